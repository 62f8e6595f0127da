//! A progress token a handler creates through its `ClientSocket` (`window/workDoneProgress/create`) is bound to
//! the handler's request: the client's `window/workDoneProgress/cancel` of it cancels the request (-32800), and
//! async-lsp's main loop goes on (the notification is passed on to the router, which has a handler for it).

mod common;

use common::{cancelled, settle, start};
use serde_json::json;
use tower_cancel::CancelStack;

#[tokio::test(start_paused = true)]
async fn the_clients_cancel_of_a_created_token_cancels_the_handler() {
    let mut h = start(CancelStack::lsp());
    h.client
        .request(1, "test/progress", json!({ "token": "al-1" }))
        .await;
    let create = h.client.next().await;
    assert_eq!(
        create["method"], "window/workDoneProgress/create",
        "{create}"
    );
    assert_eq!(create["params"], json!({ "token": "al-1" }), "{create}");
    h.client
        .send(json!({ "jsonrpc": "2.0", "id": create["id"], "result": null }))
        .await;
    h.client
        .send(json!({ "jsonrpc": "2.0", "method": "window/workDoneProgress/cancel", "params": { "token": "al-1" } }))
        .await;
    assert_eq!(h.client.next().await, cancelled(1));
    settle().await;
    assert_eq!(h.counters.stopped(), 1);
    assert!(h.registry.is_empty());
    assert_eq!(h.registry.stats().groups, 0);
    // The connection goes on.
    h.client.request(2, "test/sleep", json!({ "ms": 5 })).await;
    assert_eq!(
        h.client.next().await,
        json!({ "jsonrpc": "2.0", "id": 2, "result": { "slept": 5 } })
    );
}
