//! Over a real connection: cancels, early cancels, timeouts, a closed connection, ids tower-lsp cannot name.

mod common;

use std::time::Duration;

use common::{cancelled, settle, Peer};
use serde_json::json;
use tower_cancel::TimeoutLayer;

#[tokio::test(start_paused = true)]
async fn a_cancel_stops_the_handler_and_gets_exactly_one_reply() {
    let mut peer = Peer::start(TimeoutLayer::none()).await;
    peer.request(json!(7), "test/sleep", json!({"ms": 60_000}))
        .await;
    settle().await;
    assert_eq!(peer.counters.get(), (1, 0, 0));
    peer.cancel(json!(7)).await;
    assert_eq!(peer.recv_raw().await, cancelled("7"));
    assert_eq!(peer.counters.get(), (1, 0, 1), "the handler was stopped");
    assert!(peer.registry.is_empty());
    // The id is free again in both tables: a normal answer, not -32600.
    peer.request(json!(7), "test/echo", json!({"again": true}))
        .await;
    assert_eq!(
        peer.recv_raw().await,
        r#"{"jsonrpc":"2.0","id":7,"result":{"again":true}}"#
    );
    peer.expect_silence(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn a_string_id_is_cancelled_and_reused() {
    let mut peer = Peer::start(TimeoutLayer::none()).await;
    peer.request(json!("a"), "test/sleep", json!({"ms": 60_000}))
        .await;
    settle().await;
    peer.cancel(json!("a")).await;
    assert_eq!(peer.recv_raw().await, cancelled(r#""a""#));
    peer.request(json!("a"), "test/echo", json!(1)).await;
    assert_eq!(
        peer.recv_raw().await,
        r#"{"jsonrpc":"2.0","id":"a","result":1}"#
    );
}

#[tokio::test(start_paused = true)]
async fn an_early_cancel_is_remembered() {
    let mut peer = Peer::start(TimeoutLayer::none()).await;
    peer.cancel(json!(9)).await;
    peer.request(json!(9), "test/sleep", json!({"ms": 60_000}))
        .await;
    assert_eq!(peer.recv_raw().await, cancelled("9"));
    assert_eq!(peer.counters.get(), (0, 0, 0), "the handler never ran");
    assert!(peer.registry.is_empty());
    peer.request(json!(9), "test/echo", json!(2)).await;
    assert_eq!(
        peer.recv_raw().await,
        r#"{"jsonrpc":"2.0","id":9,"result":2}"#
    );
}

#[tokio::test(start_paused = true)]
async fn a_timeout_answers_request_cancelled() {
    let mut peer = Peer::start(TimeoutLayer::new(Duration::from_secs(5))).await;
    peer.request(json!(3), "test/sleep", json!({"ms": 60_000}))
        .await;
    peer.request(json!(4), "test/sleep", json!({"ms": 1_000}))
        .await;
    assert_eq!(
        peer.recv_raw().await,
        r#"{"jsonrpc":"2.0","id":4,"result":{"slept":1000}}"#
    );
    assert_eq!(peer.recv_raw().await, cancelled("3"));
    assert_eq!(peer.counters.get(), (2, 1, 1));
    peer.request(json!(3), "test/echo", json!(3)).await;
    assert_eq!(
        peer.recv_raw().await,
        r#"{"jsonrpc":"2.0","id":3,"result":3}"#
    );
}

#[tokio::test(start_paused = true)]
async fn closing_the_connection_stops_every_handler() {
    let mut peer = Peer::start(TimeoutLayer::none()).await;
    for id in 1..=10 {
        peer.request(json!(id), "test/sleep", json!({"ms": 60_000}))
            .await;
    }
    settle().await;
    assert_eq!(peer.counters.get(), (10, 0, 0));
    assert_eq!(peer.registry.len(), 10);
    peer.close().await;
    let served = tokio::time::timeout(Duration::from_secs(30), &mut peer.served).await;
    assert!(matches!(served, Ok(Ok(Ok(())))), "{served:?}");
    assert_eq!(peer.counters.get(), (10, 0, 10));
    assert!(peer.registry.is_empty());
}

#[tokio::test(start_paused = true)]
async fn ids_outside_i32_work_and_can_be_cancelled() {
    let mut peer = Peer::start(TimeoutLayer::none()).await;
    let big = i64::from(i32::MAX) + 1;
    peer.request(json!(big), "test/echo", json!("x")).await;
    assert_eq!(
        peer.recv_raw().await,
        format!(r#"{{"jsonrpc":"2.0","id":{big},"result":"x"}}"#)
    );
    peer.request(json!(big), "test/sleep", json!({"ms": 60_000}))
        .await;
    peer.request(json!(i64::MIN), "test/sleep", json!({"ms": 60_000}))
        .await;
    settle().await;
    peer.cancel(json!(big)).await;
    assert_eq!(peer.recv_raw().await, cancelled(&big.to_string()));
    peer.cancel(json!(i64::MIN)).await;
    assert_eq!(peer.recv_raw().await, cancelled(&i64::MIN.to_string()));
    assert_eq!(peer.counters.get(), (2, 0, 2));
    assert!(peer.registry.is_empty());
    // A client's id that looks like the adapter's alias is one more id.
    let forged = "tower-cancel-tower-lsp/alias/0";
    peer.request(json!(forged), "test/sleep", json!({"ms": 10}))
        .await;
    assert_eq!(
        peer.recv_raw().await,
        format!(r#"{{"jsonrpc":"2.0","id":"{forged}","result":{{"slept":10}}}}"#)
    );
}

#[tokio::test(start_paused = true)]
async fn an_unknown_dollar_request_gets_method_not_found() {
    let mut peer = Peer::start(TimeoutLayer::none()).await;
    peer.request(json!(5), "$/unknown", json!({})).await;
    let reply = peer.recv().await;
    assert_eq!(reply["id"], 5);
    assert_eq!(reply["error"]["code"], -32601, "{reply}");
    // An unknown `$/` notification is ignored: nothing is written.
    peer.send(json!({"jsonrpc":"2.0","method":"$/unknown","params":{}}))
        .await;
    peer.expect_silence(Duration::from_secs(1)).await;
}
