//! Scopes by principal: a principal's cancel reaches its call on any of its connections (a cancel POSTed over
//! HTTP for a call running on a WebSocket), and never another principal's.

mod support;

use serde_json::json;
use support::{
    cancel, cancelled_reply, next, post, send, sleep_call, start, wait_until, ws, User, LONG_MS,
};
use tower_cancel::CancelReason;
use tower_cancel_jsonrpsee::CancelRpcLayer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_principals_cancel_posted_over_http_stops_its_websocket_call_and_no_one_elses() {
    let server = start(
        CancelRpcLayer::new()
            .cancel_messages(true)
            .scope_by_principal::<User>(),
    )
    .await;
    let mut alice = ws(server.addr, Some("alice")).await;
    let mut anonymous = ws(server.addr, None).await;
    send(&mut alice, sleep_call(json!(1), LONG_MS)).await;
    send(&mut anonymous, sleep_call(json!(1), 100)).await;
    wait_until("both started", || server.probe.started() == 2).await;

    // Bob's cancel and an anonymous POST's reach nothing of alice's.
    assert_eq!(
        post(server.addr, Some("bob"), cancel(json!(1))).await.0,
        200
    );
    assert_eq!(post(server.addr, None, cancel(json!(1))).await.0, 200);
    // The anonymous WebSocket's call is its own: it ends with its result.
    assert_eq!(
        next(&mut anonymous).await,
        json!({ "jsonrpc": "2.0", "id": 1, "result": { "slept": 100 } })
    );
    assert!(server.probe.stopped().is_empty());

    // Alice's cancel, POSTed on a connection of its own, stops her call on the WebSocket.
    assert_eq!(
        post(server.addr, Some("alice"), cancel(json!(1))).await.0,
        200
    );
    assert_eq!(next(&mut alice).await, cancelled_reply(json!(1)));
    assert_eq!(
        server.probe.stopped(),
        [("1".to_owned(), Some(CancelReason::peer(None)))]
    );
    wait_until("nothing left", || server.layer.in_flight() == 0).await;
}
