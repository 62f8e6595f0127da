//! The `tower-lsp-server` 0.23 peer: a [`LanguageServer`] with `bench/work` added through
//! [`LspService::build`]`.custom_method`, served by the library's own [`Server`] (which does the `Content-Length`
//! framing).
//!
//! # Configuration
//!
//! [`Server::concurrency_level`] is set to [`CONCURRENCY`] (`1 << 20`) instead of the default 4, so the
//! benchmark's requests in flight (up to a million) are never throttled by the peer.
//!
//! # Cancellation
//!
//! The library's own: every request runs under a `futures::future::abortable` registered by id in its `Pending`
//! map; `$/cancelRequest` aborts it, the handler future is dropped, and the library answers the request with
//! `{"code":-32800,"message":"Canceled"}`.
//!
//! # End of connection
//!
//! On EOF the library stops reading but its `serve` waits for every request still in flight, which may never end.
//! So [`serve`] watches the reader and returns at EOF (or a read error), dropping whatever is in flight, as the
//! async-lsp peer does on its own.

use std::{
    io,
    pin::Pin,
    task::{Context, Poll},
};

use tokio::{
    io::{AsyncRead, ReadBuf},
    sync::oneshot,
};
use tower_lsp_server::{
    jsonrpc::Result,
    ls_types::{InitializeParams, InitializeResult},
    LanguageServer, LspService, Server,
};

use crate::{
    probe::{work, WorkParams},
    target::{BoxRead, BoxWrite, ServeFuture},
};

/// The concurrency level the peer is configured with: high enough never to throttle the benchmark.
pub const CONCURRENCY: usize = 1 << 20;

/// The language server: no state, default capabilities.
struct Bench;

impl LanguageServer for Bench {
    async fn initialize(&self, _: InitializeParams) -> Result<InitializeResult> {
        Ok(InitializeResult::default())
    }

    async fn shutdown(&self) -> Result<()> {
        Ok(())
    }
}

impl Bench {
    /// `bench/work`: the workload itself; the library drops this future on a cancel.
    async fn work(&self, params: WorkParams) -> Result<&'static str> {
        work(params).await;
        Ok("done")
    }
}

/// Serves one connection with tower-lsp-server until the client closes its side.
pub fn serve(reader: BoxRead, writer: BoxWrite) -> ServeFuture {
    Box::pin(async move {
        let (eof_tx, eof_rx) = oneshot::channel();
        let reader = EofSignal {
            inner: reader,
            eof: Some(eof_tx),
        };
        let (service, socket) = LspService::build(|_| Bench)
            .custom_method("bench/work", Bench::work)
            .finish();
        let server = Server::new(reader, writer, socket)
            .concurrency_level(CONCURRENCY)
            .serve(service);
        // Whichever comes first: the library returning by itself, or the client gone.
        tokio::select! {
            () = server => {}
            _ = eof_rx => {}
        }
    })
}

/// A reader that reports when it reaches EOF or fails, since the library's `serve` does not return then.
struct EofSignal {
    inner: BoxRead,
    eof: Option<oneshot::Sender<()>>,
}

impl AsyncRead for EofSignal {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = self.inner.as_mut().poll_read(cx, buf);
        let ended = match &polled {
            Poll::Ready(Ok(())) => buf.filled().len() == before && buf.remaining() > 0,
            Poll::Ready(Err(_)) => true,
            Poll::Pending => false,
        };
        if ended {
            if let Some(eof) = self.eof.take() {
                // The receiver only goes away with `serve` itself.
                let _ = eof.send(());
            }
        }
        polled
    }
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

        let work = json!({"jsonrpc": "2.0", "id": 2, "method": "bench/work", "params": {"ms": 3_600_000, "tag": 7}});
        write_frame(&mut cw, work).await;
        write_frame(
            &mut cw,
            json!({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": 2}}),
        )
        .await;
        let reply = read_frame(&mut cr).await;
        assert_eq!(
            reply,
            json!({"jsonrpc": "2.0", "id": 2, "error": {"code": -32800, "message": "Canceled"}})
        );
        let mut stopped = crate::probe::take_stop(7);
        for _ in 0..100 {
            if stopped.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
            stopped = crate::probe::take_stop(7);
        }
        assert!(stopped.is_some(), "the cancelled handler was not dropped");

        // Closing with a request still in flight: `serve` must not wait for it.
        let work = json!({"jsonrpc": "2.0", "id": 3, "method": "bench/work", "params": {"ms": 3_600_000, "tag": 70}});
        write_frame(&mut cw, work).await;
        cw.shutdown().await.unwrap();
        tokio::time::timeout(Duration::from_secs(5), served)
            .await
            .unwrap()
            .unwrap();
    }
}
