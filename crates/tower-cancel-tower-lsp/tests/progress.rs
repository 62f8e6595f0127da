//! A progress token a handler creates with tower-lsp's `Client` (`create_work_done_progress`) is bound to the
//! handler's request: the client's `window/workDoneProgress/cancel` of it cancels the request. What the handler
//! sends as its future is dropped (the progress's `end`) goes out before the cancelled reply.

mod common;

use common::{cancelled, Peer};
use serde_json::json;
use tower_cancel::TimeoutLayer;

#[tokio::test(start_paused = true)]
async fn the_clients_cancel_of_a_created_token_cancels_the_handler_after_its_end() {
    let mut peer = Peer::start(TimeoutLayer::none()).await;
    peer.request(json!(1), "test/progress", json!({"token": "tl-1"}))
        .await;
    let create = peer.recv().await;
    assert_eq!(
        create["method"], "window/workDoneProgress/create",
        "{create}"
    );
    assert_eq!(create["params"], json!({"token": "tl-1"}), "{create}");
    peer.send(json!({"jsonrpc":"2.0","id":create["id"],"result":null}))
        .await;
    assert_eq!(
        peer.recv().await,
        json!({"jsonrpc":"2.0","method":"$/progress","params":{"token":"tl-1","value":
            {"kind":"begin","title":"test/progress","cancellable":true}}})
    );
    peer.send(json!({"jsonrpc":"2.0","method":"window/workDoneProgress/cancel","params":{"token":"tl-1"}}))
        .await;
    assert_eq!(
        peer.recv().await,
        json!({"jsonrpc":"2.0","method":"$/progress","params":{"token":"tl-1","value":{"kind":"end"}}})
    );
    assert_eq!(peer.recv_raw().await, cancelled("1"));
    assert_eq!(peer.counters.get(), (1, 0, 1), "the handler was stopped");
    assert!(peer.registry.is_empty());
    assert_eq!(peer.registry.stats().groups, 0);
}
