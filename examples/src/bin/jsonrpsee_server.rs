//! A jsonrpsee server (its own `Server` and `RpcModule`) under `tower-cancel-jsonrpsee`: JSON-RPC over HTTP POST
//! and over WebSocket, on one port, at `/`.
//!
//! ```text
//! cargo run -p examples --bin jsonrpsee_server -- --addr 127.0.0.1:8080
//! cargo run -p examples --bin jsonrpsee_server -- --addr 127.0.0.1:0 --timeout-ms 5000   # -32800 after 5 s
//! ```
//!
//! Once bound it prints one line, `listening on http://ADDR` (with the real port when asked for port 0).
//! Methods: `demo/sleep {"ms"}` (answers `{"slept": ms}` after that long) and `demo/stats` (the sleep handlers'
//! counters; `inFlight` counts the calls running over every connection). A WebSocket that closes, an HTTP client
//! that hangs up, or a `$/cancelRequest {"id"}` on the call's WebSocket stops its handler; the last two, and a
//! call past `--timeout-ms`, are answered -32800 `Request cancelled` where a reply can still be delivered.

use std::time::Duration;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    examples::init_tracing();
    let addr = examples::string_arg("--addr").unwrap_or_else(|| "127.0.0.1:0".into());
    let timeout = match examples::number_arg("--timeout-ms", 0) {
        0 => None,
        ms => Some(Duration::from_millis(ms)),
    };
    let running = examples::jsonrpsee_server::start(&addr, timeout).await?;
    println!("listening on http://{}", running.addr);
    running.handle.stopped().await;
    Ok(())
}
