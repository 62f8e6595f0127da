//! The `tower-lsp-server` 0.23 peer: a [`LanguageServer`] with `bench/work` added through
//! [`LspService::build`]`.custom_method`, served by the library's own [`Server`] (which does the `Content-Length`
//! framing).
//!
//! # Configuration
//!
//! Two ways, each a target of its own ([`crate::peers`]):
//! - [`serve`]: [`Server::concurrency_level`] set to the work's real need, the most requests the workload ever has
//!   in flight at once, so that the held requests are never queued behind the limit, and nothing is reserved for
//!   requests that never come;
//! - [`serve_defaults`]: the library's default level (4), what most of its users run. Past 4 requests in flight the
//!   library stops reading, so only workloads with fewer held requests can run against it.
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

/// The language server: no state, default capabilities (also the one served under the adapter).
pub(super) struct Bench;

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
    pub(super) async fn work(&self, params: WorkParams) -> Result<&'static str> {
        work(params).await;
        Ok("done")
    }
}

/// Serves one connection with tower-lsp-server, its concurrency level `need`, until the client closes its side.
pub fn serve(reader: BoxRead, writer: BoxWrite, need: usize) -> ServeFuture {
    serve_at(reader, writer, Some(need))
}

/// Serves one connection with tower-lsp-server at its default settings, until the client closes its side.
pub fn serve_defaults(reader: BoxRead, writer: BoxWrite, _need: usize) -> ServeFuture {
    serve_at(reader, writer, None)
}

fn serve_at(reader: BoxRead, writer: BoxWrite, level: Option<usize>) -> ServeFuture {
    Box::pin(async move {
        let (eof_tx, eof_rx) = oneshot::channel();
        let reader = EofSignal {
            inner: reader,
            eof: Some(eof_tx),
        };
        let (service, socket) = LspService::build(|_| Bench)
            .custom_method("bench/work", Bench::work)
            .finish();
        let mut server = Server::new(reader, writer, socket);
        if let Some(level) = level {
            server = server.concurrency_level(level);
        }
        let server = server.serve(service);
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
    use serde_json::json;

    #[tokio::test]
    async fn serves_work_cancel_and_eof() {
        // Each peer's test has its own tag: the probe's records are global to the test process.
        let error = json!({"code": -32800, "message": "Canceled"});
        super::super::lsp_check::serves_work_cancel_and_eof(super::serve, 7, error).await;
    }
}
