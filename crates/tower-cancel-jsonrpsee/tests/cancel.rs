//! The adapter's own promises, over real sockets: each handler finds its `RequestContext` and learns why it was
//! stopped; a panic, a shutdown and the bound on calls in flight are answered as the stack answers them.

mod support;

use std::time::Duration;

use jsonrpsee::core::{client::ClientT, params::ObjectParams};
use jsonrpsee_http_client::HttpClientBuilder;
use serde_json::{json, Value};
use support::{
    cancel, cancelled_reply, guarded, next, send, sleep_call, start, wait_until, ws, LONG_MS,
};
use tower_cancel::CancelReason;
use tower_cancel_jsonrpsee::CancelRpcLayer;

fn by_name(ms: u64) -> ObjectParams {
    let mut params = ObjectParams::new();
    params.insert("ms", ms).unwrap();
    params
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_websocket_stops_its_calls_with_reason_disconnect() {
    let server = start(CancelRpcLayer::new()).await;
    let mut socket = ws(server.addr, None).await;
    send(&mut socket, sleep_call(json!(1), LONG_MS)).await;
    send(&mut socket, sleep_call(json!("two"), LONG_MS)).await;
    wait_until("both started", || server.probe.started() == 2).await;
    drop(socket);
    wait_until("both stopped", || server.probe.stopped().len() == 2).await;
    let mut stopped = server.probe.stopped();
    stopped.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        stopped,
        [
            ("\"two\"".to_owned(), Some(CancelReason::Disconnect)),
            ("1".to_owned(), Some(CancelReason::Disconnect)),
        ]
    );
    wait_until("nothing left", || {
        server.layer.in_flight() == 0 && server.layer.stats().open == 0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aborted_http_request_stops_its_call_with_reason_disconnect() {
    let server = start(CancelRpcLayer::new()).await;
    let client = HttpClientBuilder::default()
        .build(format!("http://{}", server.addr))
        .unwrap();
    let call = tokio::spawn(async move {
        let _: Result<Value, _> = client.request("probe/sleep", by_name(LONG_MS)).await;
    });
    wait_until("started", || server.probe.started() == 1).await;
    call.abort();
    wait_until("stopped", || server.probe.stopped().len() == 1).await;
    assert_eq!(
        server.probe.stopped(),
        // jsonrpsee's HTTP client numbers its calls from 0.
        [("0".to_owned(), Some(CancelReason::Disconnect))]
    );
    wait_until("nothing left", || {
        server.layer.in_flight() == 0 && server.layer.stats().open == 0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_message_and_a_timeout_say_so_to_the_handler() {
    let server = start(CancelRpcLayer::new().cancel_messages(true).timeouts(
        tower_cancel::TimeoutLayer::none().method("probe/sleep", Duration::from_millis(50)),
    ))
    .await;
    let mut socket = ws(server.addr, None).await;
    send(&mut socket, sleep_call(json!(1), LONG_MS)).await;
    assert_eq!(next(&mut socket).await, cancelled_reply(json!(1)));
    wait_until("stopped", || server.probe.stopped().len() == 1).await;
    assert_eq!(
        server.probe.stopped()[0],
        ("1".to_owned(), Some(CancelReason::Timeout))
    );

    let server = start(CancelRpcLayer::new().cancel_messages(true)).await;
    let mut socket = ws(server.addr, None).await;
    send(&mut socket, sleep_call(json!(2), LONG_MS)).await;
    wait_until("started", || server.probe.started() == 1).await;
    send(&mut socket, cancel(json!(2))).await;
    assert_eq!(next(&mut socket).await, cancelled_reply(json!(2)));
    assert_eq!(
        server.probe.stopped(),
        [("2".to_owned(), Some(CancelReason::peer(None)))]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_cancel_messages_a_cancel_is_jsonrpsees_notification_and_stops_nothing() {
    let server = start(CancelRpcLayer::new()).await;
    let mut socket = ws(server.addr, None).await;
    send(&mut socket, sleep_call(json!(1), 50)).await;
    wait_until("started", || server.probe.started() == 1).await;
    send(&mut socket, cancel(json!(1))).await;
    assert_eq!(
        next(&mut socket).await,
        json!({ "jsonrpc": "2.0", "id": 1, "result": { "slept": 50 } })
    );
    assert!(server.probe.stopped().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_handler_is_answered_32603_and_the_connection_goes_on() {
    let server = start(CancelRpcLayer::new()).await;
    let mut socket = ws(server.addr, None).await;
    send(
        &mut socket,
        json!({ "jsonrpc": "2.0", "id": 7, "method": "probe/panic" }),
    )
    .await;
    assert_eq!(
        next(&mut socket).await,
        json!({ "jsonrpc": "2.0", "id": 7, "error": { "code": -32603, "message": "Internal error: handler panicked" } })
    );
    send(&mut socket, sleep_call(json!(8), 0)).await;
    assert_eq!(next(&mut socket).await["result"], json!({ "slept": 0 }));
    wait_until("nothing left", || server.layer.in_flight() == 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_answers_the_calls_in_flight_and_the_later_ones_32800() {
    let server = start(CancelRpcLayer::new()).await;
    let mut socket = ws(server.addr, None).await;
    send(&mut socket, sleep_call(json!(1), LONG_MS)).await;
    wait_until("started", || server.probe.started() == 1).await;
    assert_eq!(server.layer.shutdown(), 1);
    assert_eq!(next(&mut socket).await, cancelled_reply(json!(1)));
    assert_eq!(
        server.probe.stopped(),
        [("1".to_owned(), Some(CancelReason::Shutdown))]
    );
    // A call on the same WebSocket after the shutdown never runs.
    send(&mut socket, sleep_call(json!(2), 0)).await;
    assert_eq!(next(&mut socket).await, cancelled_reply(json!(2)));
    // And over a connection opened after it.
    let (status, body) = support::post(server.addr, None, sleep_call(json!(3), 0)).await;
    assert_eq!(status, 200);
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap(),
        cancelled_reply(json!(3))
    );
    assert_eq!(server.probe.started(), 1);
    drop(socket);
    guarded("drained", server.layer.drained()).await;
    server.handle.stop().unwrap();
    guarded("jsonrpsee stopped", server.handle.stopped()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_max_in_flight_a_call_is_refused_busy_and_never_runs_but_a_cancel_is_taken() {
    let server = start(CancelRpcLayer::new().max_in_flight(1).cancel_messages(true)).await;
    let mut socket = ws(server.addr, None).await;
    send(&mut socket, sleep_call(json!(1), LONG_MS)).await;
    wait_until("started", || server.probe.started() == 1).await;
    send(&mut socket, sleep_call(json!(2), 0)).await;
    assert_eq!(
        next(&mut socket).await,
        json!({ "jsonrpc": "2.0", "id": 2, "error": { "code": -32009, "message": "Server is busy, try again later" } })
    );
    assert_eq!(server.probe.started(), 1);
    assert_eq!(server.layer.stats().busy, 1);
    send(&mut socket, cancel(json!(1))).await;
    assert_eq!(next(&mut socket).await, cancelled_reply(json!(1)));
    wait_until("nothing left", || server.layer.in_flight() == 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_is_served_as_jsonrpsee_serves_it() {
    let server = start(CancelRpcLayer::new().cancel_messages(true)).await;
    let mut socket = ws(server.addr, None).await;
    send(
        &mut socket,
        json!({ "jsonrpc": "2.0", "id": 1, "method": "probe/subscribe" }),
    )
    .await;
    let accepted = next(&mut socket).await;
    assert_eq!(accepted["id"], 1, "{accepted}");
    let subscription = accepted["result"].clone();
    assert!(!subscription.is_null(), "{accepted}");
    for item in 0..3 {
        assert_eq!(
            next(&mut socket).await,
            json!({
                "jsonrpc": "2.0",
                "method": "probe/item",
                "params": { "subscription": subscription, "result": item },
            })
        );
    }
    // The subscribe call was settled when it was accepted: nothing of it is left in flight.
    wait_until("nothing left", || server.layer.in_flight() == 0).await;
}
