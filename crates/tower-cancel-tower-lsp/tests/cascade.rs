//! A request the server makes inside a handler (tower-lsp's `Client::send_request`) is cancelled on the wire
//! when the handler is cancelled, times out, or stops waiting for it; the others are answered.

mod common;

use std::time::Duration;

use common::{cancelled, settle, Peer};
use serde_json::{json, Value};
use tower_cancel::TimeoutLayer;

/// The nested `test/ask` the client sees, checked, and its id.
async fn question(peer: &mut Peer, params: &Value) -> Value {
    let ask = peer.recv().await;
    assert_eq!(ask["method"], "test/ask", "{ask}");
    assert_eq!(&ask["params"], params, "{ask}");
    let nested = ask["id"].clone();
    assert!(nested.is_number() || nested.is_string(), "{ask}");
    nested
}

/// The cancel the client is sent for its request `nested`, as on the wire.
fn cancel_of(nested: &Value) -> String {
    json!({"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":nested}}).to_string()
}

/// The next two frames, in either order, against `expected`.
async fn next_two(peer: &mut Peer, expected: [String; 2]) {
    let mut seen = vec![peer.recv_raw().await, peer.recv_raw().await];
    seen.sort();
    let mut expected = expected.to_vec();
    expected.sort();
    assert_eq!(seen, expected);
}

#[tokio::test(start_paused = true)]
async fn cancelling_a_handler_cancels_its_request_to_the_client() {
    let mut peer = Peer::start(TimeoutLayer::none()).await;
    peer.request(json!(1), "test/ask", json!({"q": 1})).await;
    let nested = question(&mut peer, &json!({"q": 1})).await;
    assert_eq!(peer.adapter.client_requests_waiting(), 1);

    peer.cancel(json!(1)).await;
    next_two(&mut peer, [cancelled("1"), cancel_of(&nested)]).await;
    assert_eq!(peer.counters.get(), (1, 0, 1), "the handler was stopped");

    // The client answers the cancelled request as LSP clients do: it goes nowhere, nothing more is written.
    peer.send(
        json!({"jsonrpc":"2.0","id":nested,"error":{"code":-32800,"message":"Request cancelled"}}),
    )
    .await;
    peer.expect_silence(Duration::from_secs(1)).await;
    assert!(peer.registry.is_empty());
    assert_eq!(peer.adapter.client_requests_waiting(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_handler_gets_the_clients_answer() {
    let mut peer = Peer::start(TimeoutLayer::none()).await;
    peer.request(json!(2), "test/ask", json!("q")).await;
    let nested = question(&mut peer, &json!("q")).await;
    peer.send(json!({"jsonrpc":"2.0","id":nested,"result":{"a":42}}))
        .await;
    assert_eq!(
        peer.recv_raw().await,
        r#"{"jsonrpc":"2.0","id":2,"result":{"a":42}}"#
    );
    // An error from the client reaches the handler as the client's error.
    peer.request(json!(3), "test/ask", json!("q")).await;
    let nested = question(&mut peer, &json!("q")).await;
    peer.send(json!({"jsonrpc":"2.0","id":nested,"error":{"code":-32000,"message":"no"}}))
        .await;
    assert_eq!(
        peer.recv_raw().await,
        r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32000,"message":"no"}}"#
    );
    settle().await;
    assert!(peer.registry.is_empty());
    assert_eq!(peer.adapter.client_requests_waiting(), 0);
    assert_eq!(peer.counters.get(), (2, 2, 0));
}

#[tokio::test(start_paused = true)]
async fn a_timed_out_handler_cancels_its_request_to_the_client() {
    let mut peer = Peer::start(TimeoutLayer::new(Duration::from_secs(2))).await;
    peer.request(json!(4), "test/ask", json!({"q": 4})).await;
    // The nested request carries the time its handler's request has left (the clock is paused: all of it).
    let nested = question(&mut peer, &json!({"q": 4, "_meta": {"timeoutMs": 2000}})).await;
    next_two(&mut peer, [cancelled("4"), cancel_of(&nested)]).await;
    assert_eq!(peer.counters.get(), (1, 0, 1));
    settle().await;
    assert!(peer.registry.is_empty());
    assert_eq!(peer.adapter.client_requests_waiting(), 0);
}

#[tokio::test(start_paused = true)]
async fn only_the_cancelled_handlers_request_is_cancelled() {
    let mut peer = Peer::start(TimeoutLayer::none()).await;
    peer.request(json!(1), "test/ask", json!({"q": 1})).await;
    let first = question(&mut peer, &json!({"q": 1})).await;
    peer.request(json!(2), "test/ask", json!({"q": 2})).await;
    let second = question(&mut peer, &json!({"q": 2})).await;
    assert_ne!(first, second);
    assert_eq!(peer.adapter.client_requests_waiting(), 2);

    peer.cancel(json!(2)).await;
    next_two(&mut peer, [cancelled("2"), cancel_of(&second)]).await;
    peer.expect_silence(Duration::from_secs(1)).await;

    // The other one still waits, and gets its answer.
    peer.send(json!({"jsonrpc":"2.0","id":first,"result":42}))
        .await;
    assert_eq!(
        peer.recv_raw().await,
        r#"{"jsonrpc":"2.0","id":1,"result":42}"#
    );
    settle().await;
    assert_eq!(peer.counters.get(), (2, 1, 1));
    assert!(peer.registry.is_empty());
    assert_eq!(peer.adapter.client_requests_waiting(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_handler_that_stops_waiting_cancels_its_request_to_the_client() {
    let mut peer = Peer::start(TimeoutLayer::none()).await;
    peer.request(json!(5), "test/askbriefly", json!({"ms": 500}))
        .await;
    let nested = question(&mut peer, &json!({"ms": 500})).await;
    // The handler answers on its own after 500 ms; its request to the client is cancelled then.
    next_two(
        &mut peer,
        [
            r#"{"jsonrpc":"2.0","id":5,"result":"gave up"}"#.to_owned(),
            cancel_of(&nested),
        ],
    )
    .await;
    settle().await;
    assert_eq!(peer.adapter.client_requests_waiting(), 0);
    assert!(peer.registry.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_close_ends_the_requests_to_the_client_without_hanging() {
    let mut peer = Peer::start(TimeoutLayer::none()).await;
    peer.request(json!(1), "test/ask", json!({"q": 1})).await;
    question(&mut peer, &json!({"q": 1})).await;
    peer.request(json!(2), "test/ask", json!({"q": 2})).await;
    question(&mut peer, &json!({"q": 2})).await;
    peer.close().await;
    let served = tokio::time::timeout(Duration::from_secs(30), &mut peer.served).await;
    assert!(matches!(served, Ok(Ok(Ok(())))), "{served:?}");
    settle().await;
    assert_eq!(peer.counters.get(), (2, 0, 2));
    assert!(peer.registry.is_empty());
    assert_eq!(peer.adapter.client_requests_waiting(), 0);
}
