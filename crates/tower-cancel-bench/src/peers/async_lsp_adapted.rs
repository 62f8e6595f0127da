//! async-lsp 0.2.4 under tower-cancel (`tower-cancel-async-lsp`): the same `Router` as [`super::async_lsp`]
//! (`initialize`, `bench/work`), under async-lsp's `LifecycleLayer` and `CatchUnwindLayer` but without its
//! `ConcurrencyLayer`, served by [`tower_cancel_io::Server`] behind [`CancelStack::lsp`].
//!
//! # Cancellation
//!
//! tower-cancel's: the stack consumes `$/cancelRequest`, drops the handler's future and answers
//! `{"code":-32800,"message":"Request cancelled"}`. async-lsp's main loop still runs beside the connection for
//! what the server sends the client (nothing, in this workload), and the adapter marks each poll of a handler
//! for it: the cost of nested requests being cancellable, paid here although the workload makes none.
//!
//! # End of connection
//!
//! `serve` returns at EOF, once the driver has cancelled what was in flight.

use std::ops::ControlFlow;

use async_lsp::{panic::CatchUnwindLayer, router::Router, server::LifecycleLayer};
use lsp_types::{notification::Initialized, request::Initialize, InitializeResult};
use tower::ServiceBuilder;
use tower_cancel::CancelStack;
use tower_cancel_async_lsp::AsyncLsp;
use tower_cancel_io::Server;

use super::async_lsp::BenchWork;
use crate::{
    probe::work,
    target::{BoxRead, BoxWrite, ServeFuture},
};

fn router() -> Router<()> {
    let mut router = Router::new(());
    router
        .request::<Initialize, _>(|_, _| async { Ok(InitializeResult::default()) })
        .request::<BenchWork, _>(|_, params| async move {
            work(params.into()).await;
            Ok(serde_json::Value::from("done"))
        })
        .notification::<Initialized>(|_, _| ControlFlow::Continue(()));
    router
}

/// Serves one connection with async-lsp's router behind tower-cancel, until the client closes its side.
pub fn serve(reader: BoxRead, writer: BoxWrite, _need: usize) -> ServeFuture {
    Box::pin(async move {
        let lsp = AsyncLsp::new_server(|_client| {
            ServiceBuilder::new()
                .layer(LifecycleLayer::default())
                .layer(CatchUnwindLayer::default())
                .service(router())
        });
        let server = Server::with_stack(CancelStack::lsp(), lsp.service());
        if let Err(error) = lsp.serve(server, reader, writer).await {
            eprintln!("async-lsp under tower-cancel: {error}");
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
        super::super::lsp_check::serves_work_cancel_and_eof(super::serve, 21, error).await;
    }
}
