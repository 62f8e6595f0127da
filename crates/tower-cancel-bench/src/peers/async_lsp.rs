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
    use std::time::Duration;

    use serde_json::{json, Value};
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};

    use super::*;

    async fn write_frame(w: &mut (impl AsyncWrite + Unpin), msg: Value) {
        let body = msg.to_string();
        let frame = format!("Content-Length: {}\r\n\r\n{body}", body.len());
        w.write_all(frame.as_bytes()).await.unwrap();
    }

    async fn read_frame(r: &mut (impl tokio::io::AsyncBufRead + Unpin)) -> Value {
        let mut len = None;
        loop {
            let mut line = String::new();
            assert!(r.read_line(&mut line).await.unwrap() > 0, "EOF in headers");
            if line == "\r\n" {
                break;
            }
            if let Some(v) = line.strip_prefix("Content-Length: ") {
                len = Some(v.trim().parse::<usize>().unwrap());
            }
        }
        let mut body = vec![0; len.unwrap()];
        r.read_exact(&mut body).await.unwrap();
        serde_json::from_slice(&body).unwrap()
    }

    #[tokio::test]
    async fn serves_work_cancel_and_eof() {
        // Tag 8, not 7: the tower-lsp peer's test uses 7 in the same process, and the probe's records are global.
        const TAG: u64 = 8;
        let (client, server) = tokio::io::duplex(1 << 16);
        let (sr, sw) = tokio::io::split(server);
        let served = tokio::spawn(serve(Box::pin(sr), Box::pin(sw)));
        let (cr, mut cw) = tokio::io::split(client);
        let mut cr = BufReader::new(cr);

        let init = json!({"processId": null, "rootUri": null, "capabilities": {}});
        write_frame(
            &mut cw,
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init}),
        )
        .await;
        let reply = read_frame(&mut cr).await;
        assert_eq!(reply["id"], 0);
        assert!(reply["result"]["capabilities"].is_object(), "{reply}");
        write_frame(
            &mut cw,
            json!({"jsonrpc": "2.0", "method": "initialized", "params": {}}),
        )
        .await;

        let work = json!({"jsonrpc": "2.0", "id": 1, "method": "bench/work", "params": {"ms": 0, "tag": 1}});
        write_frame(&mut cw, work).await;
        assert_eq!(
            read_frame(&mut cr).await,
            json!({"jsonrpc": "2.0", "id": 1, "result": "done"})
        );

        let work = json!({"jsonrpc": "2.0", "id": 2, "method": "bench/work", "params": {"ms": 3_600_000, "tag": TAG}});
        write_frame(&mut cw, work).await;
        write_frame(
            &mut cw,
            json!({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": 2}}),
        )
        .await;
        let reply = read_frame(&mut cr).await;
        let error =
            json!({"code": -32800, "message": "Client cancelled the request", "data": null});
        assert_eq!(reply, json!({"jsonrpc": "2.0", "id": 2, "error": error}));
        let mut stopped = crate::probe::take_stop(TAG);
        for _ in 0..100 {
            if stopped.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
            stopped = crate::probe::take_stop(TAG);
        }
        assert!(stopped.is_some(), "the cancelled handler was not dropped");

        // Closing with a request still in flight: `serve` must not wait for it.
        let work = json!({"jsonrpc": "2.0", "id": 3, "method": "bench/work", "params": {"ms": 3_600_000, "tag": 80}});
        write_frame(&mut cw, work).await;
        cw.shutdown().await.unwrap();
        tokio::time::timeout(Duration::from_secs(5), served)
            .await
            .unwrap()
            .unwrap();
    }
}
