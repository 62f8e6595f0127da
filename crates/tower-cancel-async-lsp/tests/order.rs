//! async-lsp's order and lifecycle kept: notifications and requests reach the router in the order they arrive,
//! the server's own events reach it through async-lsp's main loop, and `exit` ends `serve`.

mod common;

use common::start;
use serde_json::json;
use tower_cancel::CancelStack;

#[tokio::test(start_paused = true)]
async fn notifications_and_requests_reach_the_router_in_arrival_order() {
    let mut h = start(CancelStack::lsp());
    for v in 1..=3 {
        h.client
            .send(json!({ "jsonrpc": "2.0", "method": "test/append", "params": { "v": v } }))
            .await;
        h.client.request(v, "test/read", json!({})).await;
    }
    for v in 1..=3 {
        let seen: Vec<i64> = (1..=v).collect();
        assert_eq!(
            h.client.next().await,
            json!({ "jsonrpc": "2.0", "id": v, "result": seen })
        );
    }
}

#[tokio::test(start_paused = true)]
async fn the_servers_events_reach_the_router() {
    let mut h = start(CancelStack::lsp());
    h.client.request(1, "test/emit", json!({ "v": 7 })).await;
    assert_eq!(
        h.client.next().await,
        json!({ "jsonrpc": "2.0", "id": 1, "result": true })
    );
    common::settle().await;
    h.client.request(2, "test/read", json!({})).await;
    assert_eq!(
        h.client.next().await,
        json!({ "jsonrpc": "2.0", "id": 2, "result": [7] })
    );
}

#[tokio::test(start_paused = true)]
async fn exit_ends_serve() {
    let mut h = start(CancelStack::lsp());
    h.client
        .send(json!({ "jsonrpc": "2.0", "method": "exit" }))
        .await;
    h.served.await.unwrap().unwrap();
}
