//! tower-lsp-server 0.23 under tower-cancel (`tower-cancel-tower-lsp`): the same [`LanguageServer`](tower_lsp_server::LanguageServer) as
//! [`super::tower_lsp`] (`initialize`, `bench/work` through `custom_method`), its `LspService` served by
//! [`tower_cancel_io::Server`] behind [`CancelStack::lsp`] instead of by tower-lsp's own `Server`.
//!
//! # Cancellation
//!
//! tower-cancel's: the stack consumes `$/cancelRequest`, drops the handler's future and answers
//! `{"code":-32800,"message":"Request cancelled"}`; the adapter then removes the request from tower-lsp's own table
//! (a synthesized `$/cancelRequest` given to the service). Each handler is polled holding the `ClientSocket`'s
//! channel, drained after the poll: the cost of the server's requests to the client being cancellable, paid here
//! although the workload makes none.
//!
//! # Concurrency
//!
//! tower-lsp's `concurrency_level` belongs to its own `Server`, not used here: nothing limits the requests in
//! flight but the workload, as for the other targets under tower-cancel.
//!
//! # End of connection
//!
//! `serve` returns at EOF, once the driver has cancelled what was in flight.

use tower_cancel::CancelStack;
use tower_cancel_io::{Framing, Server};
use tower_cancel_tower_lsp::LspAdapter;
use tower_lsp_server::LspService;

use super::tower_lsp::Bench;
use crate::target::{BoxRead, BoxWrite, ServeFuture};

/// Serves one connection with tower-lsp-server's service behind tower-cancel, until the client closes its side.
pub fn serve(reader: BoxRead, writer: BoxWrite, _need: usize) -> ServeFuture {
    Box::pin(async move {
        let service = LspService::build(|_| Bench)
            .custom_method("bench/work", Bench::work)
            .finish();
        let server = Server::with_stack(CancelStack::lsp(), LspAdapter::new(service));
        if let Err(error) = server.serve(reader, writer, Framing::ContentLength).await {
            eprintln!("tower-lsp-server under tower-cancel: {error}");
        }
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[tokio::test]
    async fn serves_work_cancel_and_eof() {
        // Each peer's test has its own tag: the probe's records are global to the test process.
        let error = json!({"code": -32800, "message": "Request cancelled"});
        super::super::lsp_check::serves_work_cancel_and_eof(super::serve, 22, error).await;
    }
}
