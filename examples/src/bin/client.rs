//! A client: starts the `lsp_server` example as a child process and sends it requests through a [`Peer`], to show
//! the client side of cancellation on a real connection.
//!
//! ```text
//! cargo build -p examples --bins && cargo run -p examples --bin client
//! ```
//!
//! It shows: a call whose future is dropped sends `$/cancelRequest`; a call with a timeout sends it too and, as LSP
//! does, keeps waiting for the server's -32800; a call that stops waiting at once, whose late reply is dropped and
//! counted.

use std::{process::Stdio, time::Duration};

use serde_json::{json, Value};
use tokio::process::Command;
use tower::service_fn;
use tower_cancel::{CancelStack, ErrorObject, Peer, Request};
use tower_cancel_io::{Framing, Server};

/// The counters of the server's sleep handlers, once `key` has reached `at_least` (the server settles a cancelled
/// request as it processes the cancel, a moment after it read it).
async fn server_stats(server: &Peer, key: &str, at_least: u64) -> Value {
    for _ in 0..200 {
        let stats = server.request("demo/stats", ()).await.expect("stats");
        if stats[key].as_u64() >= Some(at_least) {
            return stats;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("the server never counted {key} >= {at_least}");
}

#[tokio::main]
async fn main() {
    examples::init_tracing();
    let exe = std::env::current_exe().expect("own path");
    let server_path = exe.with_file_name("lsp_server");
    let mut child = Command::new(&server_path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "cannot start {}: {e} (cargo build -p examples --bins)",
                server_path.display()
            )
        });
    let to_server = child.stdin.take().expect("piped");
    let from_server = child.stdout.take().expect("piped");

    // The client side of the connection is served like any other: it answers the server's requests (none here)
    // and its peer sends ours.
    let handler = service_fn(|req: Request| async move {
        Err::<Value, _>(ErrorObject::method_not_found(req.method()))
    });
    let connection = Server::with_stack(CancelStack::lsp(), handler);
    let server = connection.peer().expect("the stack's dialect gives a peer");
    let serving = tokio::spawn(connection.serve(from_server, to_server, Framing::ContentLength));

    let init = server
        .request("initialize", json!({ "capabilities": {} }))
        .await;
    println!(
        "initialize                       -> {}",
        init.expect("initialized")
    );

    // 1. Cancel-on-drop: the caller gives up (here: tokio's timeout drops the future).
    let gave_up = tokio::time::timeout(
        Duration::from_millis(100),
        server.request("demo/sleep", json!({ "ms": 5000 })),
    )
    .await;
    assert!(gave_up.is_err());
    let stats = server_stats(&server, "cancelled", 1).await;
    println!("sleep 5 s, future dropped at 100 ms -> $/cancelRequest sent; server: {stats}");

    // 2. A timeout: the cancel goes out and, as LSP does, the call waits for the server's answer.
    let started = std::time::Instant::now();
    let timed_out = server
        .request("demo/sleep", json!({ "ms": 5000 }))
        .timeout(Duration::from_millis(200))
        .await;
    println!(
        "sleep 5 s, timeout 200 ms       -> after {} ms: {}",
        started.elapsed().as_millis(),
        match timed_out {
            Err(error) => error.to_string(),
            Ok(value) => format!("unexpected result {value}"),
        }
    );

    // 3. Stop waiting at once (ACP's stopWaitingOnCancel; MCP's default): the late -32800 is dropped and counted.
    let stopped = server
        .request("demo/sleep", json!({ "ms": 5000 }))
        .timeout(Duration::from_millis(200))
        .wait_after_cancel(false)
        .await;
    let stats = server_stats(&server, "cancelled", 3).await;
    println!(
        "sleep 5 s, timeout 200 ms, stop -> {}; server: {stats}",
        stopped.expect_err("timed out")
    );

    server.request("shutdown", ()).await.expect("shutdown");
    server.notify("exit", ()).expect("exit sent");
    let status = child.wait().await.expect("the server exits");
    serving.await.expect("served").expect("connection ok");
    let peer = server.stats();
    println!(
        "server exited ({status}); client peer: {} sent, {} cancels sent, {} late replies dropped, {} pending",
        peer.sent, peer.cancels_sent, peer.late_replies, peer.pending
    );
}
