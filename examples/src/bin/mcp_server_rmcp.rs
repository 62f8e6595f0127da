//! `mcp_server`, its tools written as an rmcp 3.11 `ServerHandler` ([`examples::mcp_rmcp`]) and served under the
//! stack by `tower-cancel-rmcp`: the same wire, the same contract. A cancelled call gets no reply at all, and its
//! handler's `ct` fires, whatever cancelled it (the client, `--timeout-ms`, end of input).
//!
//! ```text
//! cargo run -p examples --bin mcp_server_rmcp
//! cargo run -p examples --bin mcp_server_rmcp -- --timeout-ms 5000   # idle timeout 5 s, reset by progress; -32001
//! cargo run -p examples --bin mcp_server_rmcp -- --subscription-ms 2000   # the server ends each subscription after 2 s
//! ```

use examples::{
    mcp::Versions,
    mcp_rmcp::{RmcpServer, RmcpTools},
};
use tower_cancel::CancelStack;
use tower_cancel_io::{Framing, Server};
use tower_cancel_rmcp::RmcpService;

/// Protocol revisions this server can speak; it answers with the client's if it is one of them.
const VERSIONS: Versions = Versions {
    known: &["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"],
    default: "2025-06-18",
};

#[tokio::main]
async fn main() -> std::io::Result<()> {
    examples::init_tracing();
    // `with_stack`: the connection speaks MCP, so it has a peer, through which a handler's requests to the client
    // (sampling, elicitation, roots) go, each cancelled with the call it was made in.
    let stack = CancelStack::mcp().timeouts(examples::timeouts_from_args());
    let tools =
        RmcpTools::new(VERSIONS).end_subscriptions_after(examples::subscription_end_from_args());
    let handler = RmcpService::new(RmcpServer::new(tools));
    Server::with_stack(stack, handler)
        .serve_stdio(Framing::Ndjson)
        .await
}
