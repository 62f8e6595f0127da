//! An MCP server over Streamable HTTP at `http://ADDR/mcp`, speaking both revisions: `2025-11-25` (sessions: the
//! client cancels a call by POSTing `notifications/cancelled`, or ends the session with DELETE) and
//! `2026-07-28` (stateless: the client cancels a call by closing its response stream). A cancelled call gets no
//! reply at all, as MCP says.
//!
//! ```text
//! cargo run -p examples --bin mcp_http_server -- --addr 127.0.0.1:8080
//! cargo run -p examples --bin mcp_http_server -- --addr 127.0.0.1:0 --timeout-ms 5000   # idle timeout 5 s; -32001
//! cargo run -p examples --bin mcp_http_server -- --addr 127.0.0.1:0 --subscription-ms 2000   # subscriptions end after 2 s
//! ```
//!
//! Once bound it prints one line, `listening on http://ADDR/mcp` (with the real port when asked for port 0).
//! Tools ([`examples::mcp`], shared with `mcp_server`): `sleep {"ms"}`, `progress {"steps", "intervalMs"}`,
//! `confirm {"action"}` and `stats`, whose `inFlight` counts the requests running over every session and stateless
//! POST. In a `2025-11-25` session, `confirm`'s `elicitation/create` goes out on the SSE stream of the tool call's
//! POST and the client POSTs its answer; cancelling the tool call cancels it there with `notifications/cancelled`.
//! A stateless (`2026-07-28`) `subscriptions/listen` stream stays open until the client closes it, or until
//! `--subscription-ms` passes: then `notifications/cancelled` naming it goes out on it and ends it.
//!
//! Served by [`tower_cancel_http::serve()`] with its default bounds against hostile clients: a request's head and its body
//! within 30 s each, idle connections closed, at most 1024 connections open (the one idle the longest closed to
//! make room, 503 when every one is busy).

use axum::{routing::any_service, Router};
use examples::mcp::{Tools, HTTP_VERSIONS};
use tower::{service_fn, ServiceBuilder};
use tower_cancel::CancelStack;
use tower_cancel_http::McpHttp;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    examples::init_tracing();
    let addr = examples::string_arg("--addr").unwrap_or_else(|| "127.0.0.1:0".into());
    let tools =
        Tools::new(HTTP_VERSIONS).end_subscriptions_after(examples::subscription_end_from_args());
    let in_flight = tools.in_flight().clone();
    let stack = ServiceBuilder::new()
        .layer(CancelStack::mcp().timeouts(examples::timeouts_from_args()))
        .service(service_fn(move |req| tools.clone().handle(req)));
    let mcp = McpHttp::new(stack);
    in_flight.set_endpoint({
        let mcp = mcp.clone();
        move || mcp.in_flight()
    });
    let app = Router::new().route("/mcp", any_service(mcp));
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening on http://{}/mcp", listener.local_addr()?);
    tower_cancel_http::serve(listener, app).await
}
