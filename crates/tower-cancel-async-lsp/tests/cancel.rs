//! The client's cancels, early cancels, timeouts and closes over a real connection: the exact reply on the wire,
//! the handler stopped, and nothing left in the adapter or the registry.

mod common;

use std::time::Duration;

use common::{cancelled, settle, start};
use serde_json::json;
use tokio::time::Instant;
use tower_cancel::CancelStack;
use tower_cancel_async_lsp::AdapterStats;

#[tokio::test(start_paused = true)]
async fn a_cancel_stops_the_handler_with_the_exact_reply() {
    let mut h = start(CancelStack::lsp());
    h.client
        .request(1, "test/sleep", json!({ "ms": 10_000 }))
        .await;
    settle().await;
    assert_eq!(h.counters.started(), 1);
    assert_eq!(h.registry.len(), 1);
    assert_eq!(h.watch.stats().handlers, 1);

    h.client.cancel(1).await;
    assert_eq!(h.client.next().await, cancelled(1));
    assert_eq!(h.counters.stopped(), 1);
    assert_eq!(h.counters.finished(), 0);
    assert!(h.client.nothing_more().await, "one reply only");
    assert!(h.registry.is_empty());
    assert_eq!(h.watch.stats(), AdapterStats::default());
}

#[tokio::test(start_paused = true)]
async fn an_early_cancel_is_remembered() {
    let mut h = start(CancelStack::lsp());
    h.client.cancel(5).await;
    settle().await;
    h.client
        .request(5, "test/sleep", json!({ "ms": 10_000 }))
        .await;
    assert_eq!(h.client.next().await, cancelled(5));
    assert_eq!(h.counters.started(), 0, "the handler never ran");
    assert!(h.registry.is_empty());
    assert_eq!(h.watch.stats(), AdapterStats::default());
}

#[tokio::test(start_paused = true)]
async fn a_timeout_answers_minus_32800() {
    let mut h = start(CancelStack::lsp().timeout(Duration::from_secs(1)));
    let began = Instant::now();
    h.client
        .request(1, "test/sleep", json!({ "ms": 10_000 }))
        .await;
    assert_eq!(h.client.next().await, cancelled(1));
    assert_eq!(began.elapsed(), Duration::from_secs(1));
    assert_eq!(h.counters.stopped(), 1);
    assert!(h.registry.is_empty());
    assert_eq!(h.watch.stats(), AdapterStats::default());
}

#[tokio::test(start_paused = true)]
async fn a_close_stops_every_handler_in_flight() {
    let mut h = start(CancelStack::lsp());
    for id in 1..=3 {
        h.client
            .request(id, "test/sleep", json!({ "ms": 10_000 }))
            .await;
    }
    settle().await;
    assert_eq!(h.counters.started(), 3);
    h.client.close().await;
    h.served.await.unwrap().unwrap();
    assert_eq!(h.counters.stopped(), 3);
    assert!(h.registry.is_empty());
    assert_eq!(h.watch.stats(), AdapterStats::default());
}

#[tokio::test(start_paused = true)]
async fn a_finished_request_answers_and_a_late_cancel_changes_nothing() {
    let mut h = start(CancelStack::lsp());
    h.client.request(1, "test/sleep", json!({ "ms": 50 })).await;
    assert_eq!(
        h.client.next().await,
        json!({ "jsonrpc": "2.0", "id": 1, "result": { "slept": 50 } })
    );
    h.client.cancel(1).await;
    assert!(h.client.nothing_more().await);
    assert_eq!(h.counters.finished(), 1);
    assert!(h.registry.is_empty());
}

#[tokio::test(start_paused = true)]
async fn ids_outside_i32_and_lookalike_strings_work() {
    let mut h = start(CancelStack::lsp());
    let big = 1_i64 << 40;
    h.client
        .request(big, "test/sleep", json!({ "ms": 10 }))
        .await;
    assert_eq!(
        h.client.next().await,
        json!({ "jsonrpc": "2.0", "id": big, "result": { "slept": 10 } })
    );
    // Cancelled by the client's own id.
    h.client
        .request(-big, "test/sleep", json!({ "ms": 10_000 }))
        .await;
    settle().await;
    h.client.cancel(-big).await;
    assert_eq!(h.client.next().await, cancelled(-big));
    // A string that looks like the adapter's alias for `big`.
    let lookalike = format!("\u{1}{big}");
    h.client
        .request(lookalike.as_str(), "test/sleep", json!({ "ms": 10 }))
        .await;
    assert_eq!(
        h.client.next().await,
        json!({ "jsonrpc": "2.0", "id": lookalike, "result": { "slept": 10 } })
    );
    assert!(h.registry.is_empty());
    assert_eq!(h.watch.stats(), AdapterStats::default());
}

#[tokio::test(start_paused = true)]
async fn notifications_the_router_rejects_do_not_stop_the_connection() {
    let mut h = start(CancelStack::lsp());
    // No handler (async-lsp's main loop would stop), and params the handler cannot read.
    h.client
        .send(json!({ "jsonrpc": "2.0", "method": "custom/unknown", "params": {} }))
        .await;
    h.client
        .send(json!({ "jsonrpc": "2.0", "method": "initialized", "params": "not an object" }))
        .await;
    h.client.request(1, "test/sleep", json!({ "ms": 1 })).await;
    assert_eq!(
        h.client.next().await,
        json!({ "jsonrpc": "2.0", "id": 1, "result": { "slept": 1 } })
    );
    // An unknown request gets the router's -32601; bad params its -32602.
    h.client.request(2, "test/nope", json!({})).await;
    let reply = h.client.next().await;
    assert_eq!(reply["error"]["code"], -32601, "{reply}");
    h.client
        .request(3, "test/sleep", json!({ "ms": "soon" }))
        .await;
    let reply = h.client.next().await;
    assert_eq!(reply["error"]["code"], -32602, "{reply}");
    assert!(!h.served.is_finished());
}

#[tokio::test(start_paused = true)]
async fn many_cancelled_requests_leave_nothing_and_ids_are_reused() {
    const N: i64 = 100_000;
    let mut h = start(CancelStack::lsp());
    for round in 0..N / 1000 {
        for id in round * 1000..(round + 1) * 1000 {
            h.client
                .request(id % 2000, "test/sleep", json!({ "ms": 60_000 }))
                .await;
            h.client.cancel(id % 2000).await;
        }
        for id in round * 1000..(round + 1) * 1000 {
            assert_eq!(h.client.next().await, cancelled(id % 2000));
        }
    }
    settle().await;
    assert!(h.registry.is_empty());
    assert_eq!(h.watch.stats(), AdapterStats::default());
    assert_eq!(h.counters.finished(), 0);
    // A cancelled id, reused, runs to the end.
    h.client.request(7, "test/sleep", json!({ "ms": 5 })).await;
    assert_eq!(
        h.client.next().await,
        json!({ "jsonrpc": "2.0", "id": 7, "result": { "slept": 5 } })
    );
}
