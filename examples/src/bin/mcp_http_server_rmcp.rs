//! `mcp_http_server`, its tools written as an rmcp 3.11 `ServerHandler` ([`examples::mcp_rmcp`]) and served by
//! `tower-cancel-rmcp` behind our MCP Streamable HTTP front end: both revisions, the same wire, the same contract.
//! One rmcp server runs per session (stopped when the session ends) and one for every stateless request. In a
//! `2025-11-25` session, `confirm`'s elicitation (made through rmcp's peer) goes out on the SSE stream of the tool
//! call's POST and the client POSTs its answer; cancelling the tool call cancels it there.
//!
//! ```text
//! cargo run -p examples --bin mcp_http_server_rmcp -- --addr 127.0.0.1:8080
//! cargo run -p examples --bin mcp_http_server_rmcp -- --addr 127.0.0.1:0 --timeout-ms 5000
//! cargo run -p examples --bin mcp_http_server_rmcp -- --addr 127.0.0.1:0 --subscription-ms 2000   # subscriptions end after 2 s
//! ```
//!
//! Once bound it prints one line, `listening on http://ADDR/mcp` (with the real port when asked for port 0).

use axum::{routing::any_service, Router};
use examples::{
    mcp::HTTP_VERSIONS,
    mcp_rmcp::{RmcpServer, RmcpTools},
};
use tower::ServiceBuilder;
use tower_cancel::CancelStack;
use tower_cancel_http::McpHttp;
use tower_cancel_rmcp::RmcpService;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    examples::init_tracing();
    let addr = examples::string_arg("--addr").unwrap_or_else(|| "127.0.0.1:0".into());
    let tools = RmcpTools::new(HTTP_VERSIONS)
        .end_subscriptions_after(examples::subscription_end_from_args());
    let in_flight = tools.in_flight().clone();
    let rmcp = RmcpService::new(RmcpServer::new(tools));
    let stack = ServiceBuilder::new()
        .layer(CancelStack::mcp().timeouts(examples::timeouts_from_args()))
        .service(rmcp.clone());
    let mcp = McpHttp::new(stack).on_session_end(move |id| rmcp.end_session(id));
    in_flight.set_endpoint({
        let mcp = mcp.clone();
        move || mcp.in_flight()
    });
    let app = Router::new().route("/mcp", any_service(mcp));
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening on http://{}/mcp", listener.local_addr()?);
    tower_cancel_http::serve(listener, app).await
}
