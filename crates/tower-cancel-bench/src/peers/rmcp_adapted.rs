//! rmcp 3.11 under tower-cancel: the same handler as [`super::rmcp`] (its `call_tool` races the work against
//! `context.ct`), served by `tower-cancel-rmcp` under `CancelStack::mcp()` on our stream driver, instead of by
//! rmcp's own loop on its own transport. rmcp still runs each request on a task of its own; the stack decides
//! every cancel and the bridge turns it into rmcp's (`ct` fires).

use tower_cancel::CancelStack;
use tower_cancel_io::{Framing, Server};
use tower_cancel_rmcp::RmcpService;

use super::rmcp::Bench;
use crate::target::{BoxRead, BoxWrite, ServeFuture};

/// Serves one MCP connection with the rmcp handler under the stack until the client closes its side.
pub fn serve(reader: BoxRead, writer: BoxWrite, _need: usize) -> ServeFuture {
    Box::pin(async move {
        let server = Server::with_stack(CancelStack::mcp(), RmcpService::new(Bench));
        let _ = server.serve(reader, writer, Framing::Ndjson).await;
    })
}
