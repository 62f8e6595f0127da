//! An ABP app at `ws://ADDR/abp`: an agent opens a WebSocket, sends `initialize`, calls the capabilities with
//! `capabilities/call` and cancels a call with `capabilities/cancel`, which is acknowledged (`cancel-result`) before
//! the cancelled call's `call-result {success: false, cancelled: true}`.
//!
//! ```text
//! cargo run -p examples --bin abp_app -- --addr 127.0.0.1:8080
//! cargo run -p examples --bin abp_app -- --addr 127.0.0.1:0 --timeout-ms 5000
//! ```
//!
//! Once bound it prints one line, `listening on ws://ADDR/abp` (with the real port when asked for port 0), and
//! nothing else on stdout. Capabilities ([`examples::abp`]): `sleep {"ms"}` answers the data `{"slept": N}`;
//! `stats` answers `{"started","completed","cancelled","inFlight"}` (the sleep handlers' counters, and the sleeps
//! running now). With `--timeout-ms T` every call is stopped after T ms (`cancelled: true`, code `TIMEOUT`); a
//! call's own `options.timeout` may ask for less. `abp_agent --url ws://ADDR/abp` drives it.
//!
//! Served by [`tower_cancel_http::serve()`] with its default bounds against hostile clients: a request's head
//! within 30 s, idle connections closed, at most 1024 connections open (the one idle the longest closed to make
//! room, 503 when every one is busy; a WebSocket is never closed for it).

use std::time::Duration;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    examples::init_tracing();
    let addr = examples::string_arg("--addr").unwrap_or_else(|| "127.0.0.1:0".into());
    let timeout = match examples::number_arg("--timeout-ms", 0) {
        0 => None,
        ms => Some(Duration::from_millis(ms)),
    };
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    let url = format!("ws://{}/abp", listener.local_addr()?);
    let app = examples::abp::App::new(timeout);
    println!("listening on {url}");
    tower_cancel_http::serve(listener, app.router()).await
}
