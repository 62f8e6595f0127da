//! A JSON-RPC server over HTTP at `http://ADDR/rpc` (one request or batch per POST), next to a `/health` route
//! of the same axum `Router`. A client that hangs up before its reply cancels its request: the handler is
//! stopped.
//!
//! ```text
//! cargo run -p examples --bin jsonrpc_http_server -- --addr 127.0.0.1:8080
//! cargo run -p examples --bin jsonrpc_http_server -- --addr 127.0.0.1:0 --timeout-ms 5000   # -32800 after 5 s
//! ```
//!
//! Once bound it prints one line, `listening on http://ADDR/rpc` (with the real port when asked for port 0).
//! Methods, as in `lsp_server`: `demo/sleep {"ms"}` (answers `{"slept": ms}` after that long) and `demo/stats`
//! (the sleep handlers' counters; `inFlight` counts the requests running over every POST).
//!
//! Served by [`tower_cancel_http::serve()`] with its default bounds against hostile clients: a request's head and its body
//! within 30 s each, idle connections closed, at most 1024 connections open (the one idle the longest closed to
//! make room, 503 when every one is busy).

use axum::{
    routing::{get, post_service},
    Router,
};
use examples::{InFlight, SleepStats};
use serde_json::Value;
use tower::{service_fn, ServiceBuilder};
use tower_cancel::{CancelStack, ErrorObject, Request};
use tower_cancel_http::JsonRpc;

#[derive(Clone, Default)]
struct State {
    stats: SleepStats,
    in_flight: InFlight,
}

async fn handle(state: State, req: Request) -> Result<Value, ErrorObject> {
    match req.method() {
        "demo/sleep" => Ok(examples::sleep(&state.stats, req.params_as()?).await),
        "demo/stats" => Ok(state.in_flight.stats(&state.stats, &req)),
        _ if req.is_notification() => Ok(Value::Null),
        other => Err(ErrorObject::method_not_found(other)),
    }
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    examples::init_tracing();
    let addr = examples::string_arg("--addr").unwrap_or_else(|| "127.0.0.1:0".into());
    let state = State::default();
    let in_flight = state.in_flight.clone();
    let stack = ServiceBuilder::new()
        .layer(CancelStack::lsp().timeouts(examples::timeouts_from_args()))
        .service(service_fn(move |req| handle(state.clone(), req)));
    let rpc = JsonRpc::new(stack);
    in_flight.set_endpoint({
        let rpc = rpc.clone();
        move || rpc.in_flight()
    });
    let app = Router::new()
        .route("/rpc", post_service(rpc))
        .route("/health", get(|| async { "ok" }));
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening on http://{}/rpc", listener.local_addr()?);
    tower_cancel_http::serve(listener, app).await
}
