//! The `async-lsp` 0.2.4 peer: a [`Router`] with `initialize` and `bench/work`, behind the server stack of the
//! library's examples (`LifecycleLayer`, `CatchUnwindLayer`, `ConcurrencyLayer`), driven by
//! [`MainLoop::run_buffered`] (which does the `Content-Length` framing). The client-process monitor layer is left
//! out: it watches a local process, which the benchmark has none of.
//!
//! # Configuration
//!
//! The `ConcurrencyLayer` limit is [`CONCURRENCY`] (`1 << 20`) instead of the default (the number of CPUs), so the
//! benchmark's requests in flight (up to a million) are never throttled by the peer. The layer preallocates its
//! map of ongoing requests for twice its limit, so each connection reserves that much up front.
//!
//! # Cancellation
//!
//! The library's own, in `ConcurrencyLayer`: every request runs under a `futures` `Abortable` registered by id;
//! `$/cancelRequest` aborts it, the handler future is dropped, and the library answers the request with
//! `{"code":-32800,"message":"Client cancelled the request","data":null}`.
//!
//! # End of connection
//!
//! The main loop returns by itself at EOF (with its `Eof` error, ignored here), dropping whatever is in flight.

use std::{num::NonZeroUsize, ops::ControlFlow};

use async_lsp::{
    concurrency::ConcurrencyLayer, panic::CatchUnwindLayer, router::Router, server::LifecycleLayer,
    MainLoop,
};
use lsp_types::{
    notification::Initialized,
    request::{Initialize, Request},
    InitializeResult,
};
use serde::{Deserialize, Serialize};
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};
use tower::ServiceBuilder;

use crate::{
    probe::{work, WorkParams},
    target::{BoxRead, BoxWrite, ServeFuture},
};

/// The concurrency limit the peer is configured with: high enough never to throttle the benchmark.
pub const CONCURRENCY: usize = 1 << 20;

/// The same limit, checked non-zero at compile time.
const LIMIT: NonZeroUsize = match NonZeroUsize::new(CONCURRENCY) {
    Some(limit) => limit,
    None => panic!("the concurrency limit must not be zero"),
};

/// The `bench/work` request, typed as the router wants it.
enum BenchWork {}

impl Request for BenchWork {
    type Params = BenchWorkParams;
    type Result = serde_json::Value;
    const METHOD: &'static str = "bench/work";
}

/// [`WorkParams`] again, since a [`Request`] needs its params to be `Serialize` as well.
#[derive(Serialize, Deserialize)]
struct BenchWorkParams {
    ms: u64,
    #[serde(default)]
    tag: u64,
}

impl From<BenchWorkParams> for WorkParams {
    fn from(params: BenchWorkParams) -> Self {
        Self {
            ms: params.ms,
            tag: params.tag,
        }
    }
}

/// Serves one connection with async-lsp until the client closes its side.
pub fn serve(reader: BoxRead, writer: BoxWrite) -> ServeFuture {
    Box::pin(async move {
        let (server, _client) = MainLoop::new_server(|_client| {
            let mut router = Router::new(());
            router
                .request::<Initialize, _>(|_, _| async { Ok(InitializeResult::default()) })
                .request::<BenchWork, _>(|_, params| async move {
                    work(params.into()).await;
                    Ok(serde_json::Value::from("done"))
                })
                // Without a handler the router would end the main loop on this notification.
                .notification::<Initialized>(|_, _| ControlFlow::Continue(()));
            ServiceBuilder::new()
                .layer(LifecycleLayer::default())
                .layer(CatchUnwindLayer::default())
                .layer(ConcurrencyLayer::new(LIMIT))
                .service(router)
        });
        // `Err(Eof)` is how the main loop reports the client gone: the normal end here.
        let _ = server
            .run_buffered(reader.compat(), writer.compat_write())
            .await;
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[tokio::test]
    async fn serves_work_cancel_and_eof() {
        // Each peer's test has its own tag: the probe's records are global to the test process.
        let error =
            json!({"code": -32800, "message": "Client cancelled the request", "data": null});
        super::super::lsp_check::serves_work_cancel_and_eof(super::serve, 8, error).await;
    }
}
