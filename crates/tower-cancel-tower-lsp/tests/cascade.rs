//! A request the server makes inside a handler (tower-lsp's `Client::send_request`) is cancelled on the wire
//! when the handler is cancelled.

mod common;

use std::time::Duration;

use common::{cancelled, settle, Peer};
use serde_json::json;
use tower_cancel::TimeoutLayer;

#[tokio::test(start_paused = true)]
#[ignore = "open: the handler is cancelled and answered -32800, but the $/cancelRequest for its nested call is not written (under investigation)"]
async fn cancelling_a_handler_cancels_its_request_to_the_client() {
    let mut peer = Peer::start(TimeoutLayer::none()).await;
    peer.request(json!(1), "test/ask", json!({"q": 1})).await;
    let ask = peer.recv().await;
    assert_eq!(ask["method"], "test/ask", "{ask}");
    assert_eq!(ask["params"], json!({"q": 1}));
    let nested = ask["id"].clone();
    assert!(nested.is_number() || nested.is_string(), "{ask}");

    peer.cancel(json!(1)).await;
    // Both, in either order: the handler's reply, and the cancel of its nested request.
    let mut seen = vec![peer.recv_raw().await, peer.recv_raw().await];
    seen.sort();
    let mut expected = vec![
        cancelled("1"),
        json!({"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":nested}}).to_string(),
    ];
    expected.sort();
    assert_eq!(seen, expected);
    assert_eq!(peer.counters.get(), (1, 0, 1), "the handler was stopped");

    // The client answers the cancelled request as LSP clients do; nothing more is written.
    peer.send(
        json!({"jsonrpc":"2.0","id":nested,"error":{"code":-32800,"message":"Request cancelled"}}),
    )
    .await;
    peer.expect_silence(Duration::from_secs(1)).await;
    assert!(peer.registry.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_handler_gets_the_clients_answer() {
    let mut peer = Peer::start(TimeoutLayer::none()).await;
    peer.request(json!(2), "test/ask", json!("q")).await;
    let ask = peer.recv().await;
    assert_eq!(ask["method"], "test/ask");
    peer.send(json!({"jsonrpc":"2.0","id":ask["id"],"result":{"a":42}}))
        .await;
    assert_eq!(
        peer.recv_raw().await,
        r#"{"jsonrpc":"2.0","id":2,"result":{"a":42}}"#
    );
    // An error from the client reaches the handler as the client's error.
    peer.request(json!(3), "test/ask", json!("q")).await;
    let ask = peer.recv().await;
    peer.send(json!({"jsonrpc":"2.0","id":ask["id"],"error":{"code":-32000,"message":"no"}}))
        .await;
    assert_eq!(
        peer.recv_raw().await,
        r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32000,"message":"no"}}"#
    );
    settle().await;
    assert!(peer.registry.is_empty());
}

#[tokio::test(start_paused = true)]
#[ignore = "open: the handler is cancelled and answered -32800, but the $/cancelRequest for its nested call is not written (under investigation)"]
async fn a_timed_out_handler_cancels_its_request_to_the_client() {
    let mut peer = Peer::start(TimeoutLayer::new(Duration::from_secs(2))).await;
    peer.request(json!(4), "test/ask", json!(null)).await;
    let ask = peer.recv().await;
    let nested = ask["id"].clone();
    let mut seen = vec![peer.recv_raw().await, peer.recv_raw().await];
    seen.sort();
    let mut expected = vec![
        cancelled("4"),
        json!({"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":nested}}).to_string(),
    ];
    expected.sort();
    assert_eq!(seen, expected);
}
