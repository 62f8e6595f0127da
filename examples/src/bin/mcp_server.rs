//! An MCP server over stdio (one JSON object per line) whose tool calls the client can cancel with
//! `notifications/cancelled`. A cancelled call gets no reply at all, as MCP says.
//!
//! ```text
//! cargo run -p examples --bin mcp_server
//! cargo run -p examples --bin mcp_server -- --timeout-ms 5000   # idle timeout 5 s, reset by progress; -32001
//! ```
//!
//! Tools ([`examples::mcp`], shared with `mcp_http_server`): `sleep {"ms"}`, `progress {"steps", "intervalMs"}`
//! (reports `notifications/progress` after each step when the call carried a progress token) and `stats` (the
//! counters of the sleep and progress handlers).

use examples::mcp::{Tools, Versions};
use tower::{service_fn, ServiceBuilder};
use tower_cancel::CancelStack;
use tower_cancel_io::{Framing, Server};

/// Protocol revisions this server can speak; it answers with the client's if it is one of them.
const VERSIONS: Versions = Versions {
    known: &["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"],
    default: "2025-06-18",
};

#[tokio::main]
async fn main() -> std::io::Result<()> {
    examples::init_tracing();
    let tools = Tools::new(VERSIONS);
    let service = ServiceBuilder::new()
        .layer(CancelStack::mcp().timeouts(examples::timeouts_from_args()))
        .service(service_fn(move |req| tools.clone().handle(req)));
    Server::new(service).serve_stdio(Framing::Ndjson).await
}
