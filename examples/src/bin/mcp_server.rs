//! An MCP server over stdio (one JSON object per line) whose tool calls the client can cancel with
//! `notifications/cancelled`. A cancelled call gets no reply at all, as MCP says.
//!
//! ```text
//! cargo run -p examples --bin mcp_server
//! cargo run -p examples --bin mcp_server -- --timeout-ms 5000   # idle timeout 5 s, reset by progress; -32001
//! cargo run -p examples --bin mcp_server -- --subscription-ms 2000   # the server ends each subscription after 2 s
//! ```
//!
//! Tools ([`examples::mcp`], shared with `mcp_http_server`): `sleep {"ms"}`, `progress {"steps", "intervalMs"}`
//! (reports `notifications/progress` after each step when the call carried a progress token), `confirm {"action"}`
//! (asks the client with `elicitation/create`; cancelling the call cancels the question) and `stats` (the counters
//! of the sleep, progress and confirm handlers). `subscriptions/listen` stays open until the client cancels it, or
//! until `--subscription-ms` passes: then the server tears it down with `notifications/cancelled` naming it.

use examples::mcp::{Tools, Versions};
use tower::service_fn;
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
    let tools =
        Tools::new(VERSIONS).end_subscriptions_after(examples::subscription_end_from_args());
    // The connection speaks the stack's dialect, so that a handler has a peer to ask the client on (`confirm`).
    let stack = CancelStack::mcp().timeouts(examples::timeouts_from_args());
    let handler = service_fn(move |req| tools.clone().handle(req));
    Server::with_stack(stack, handler)
        .serve_stdio(Framing::Ndjson)
        .await
}
