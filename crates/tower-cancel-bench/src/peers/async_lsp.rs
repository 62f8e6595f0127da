//! The `async-lsp` 0.2.4 peer: a [`Router`] with `initialize` and `bench/work`, behind the server stack of the
//! library's examples (`LifecycleLayer`, `CatchUnwindLayer`, `ConcurrencyLayer`), driven by
//! [`MainLoop::run_buffered`] (which does the `Content-Length` framing). The client-process monitor layer is left
//! out: it watches a local process, which the benchmark has none of.
//!
//! # Configuration
//!
//! Two ways, each a target of its own ([`crate::peers`]):
//! - [`serve`]: the `ConcurrencyLayer` limit set to the work's real need, the most requests the workload ever has
//!   in flight at once. The layer preallocates its map of ongoing requests for twice its limit when the connection
//!   starts; a limit far above the need (2^20 before) reserved about 138 MB that no memory window saw, and spread
//!   the map's entries over pages that stayed cold, slowing every insert;
//! - [`serve_defaults`]: `ConcurrencyLayer::default()`, a limit of the number of CPUs, what most of its users run.
//!   At the limit the main loop stops reading requests, so only workloads with fewer held requests can run
//!   against it.
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

/// The `bench/work` request, typed as the router wants it.
pub(super) enum BenchWork {}

impl Request for BenchWork {
    type Params = BenchWorkParams;
    type Result = serde_json::Value;
    const METHOD: &'static str = "bench/work";
}

/// [`WorkParams`] again, since a [`Request`] needs its params to be `Serialize` as well.
#[derive(Serialize, Deserialize)]
pub(super) struct BenchWorkParams {
    ms: u64,
    #[serde(default)]
    tag: u64,
    #[serde(default)]
    yields: bool,
}

impl From<BenchWorkParams> for WorkParams {
    fn from(params: BenchWorkParams) -> Self {
        Self {
            ms: params.ms,
            tag: params.tag,
            yields: params.yields,
        }
    }
}

/// Serves one connection with async-lsp, its concurrency limit `need`, until the client closes its side.
pub fn serve(reader: BoxRead, writer: BoxWrite, need: usize) -> ServeFuture {
    let limit = NonZeroUsize::new(need).unwrap_or(NonZeroUsize::MIN);
    serve_with(reader, writer, ConcurrencyLayer::new(limit))
}

/// Serves one connection with async-lsp at its default settings, until the client closes its side.
pub fn serve_defaults(reader: BoxRead, writer: BoxWrite, _need: usize) -> ServeFuture {
    serve_with(reader, writer, ConcurrencyLayer::default())
}

fn serve_with(reader: BoxRead, writer: BoxWrite, concurrency: ConcurrencyLayer) -> ServeFuture {
    Box::pin(async move {
        let (server, _client) = MainLoop::new_server(move |_client| {
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
                .layer(concurrency)
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
