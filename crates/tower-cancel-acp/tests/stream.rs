//! An ACP SDK agent under the stack, over a real NDJSON connection: every cancel the stack decides reaches the
//! handler as the SDK's own (`RequestCancellation` fires), and the wire carries exactly what ACP says.

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::{assert_empty, cancelled, Fate, TestClient};
use tower_cancel::TimeoutLayer;

#[tokio::test]
async fn a_client_cancel_stops_the_handler_and_answers_32800() {
    let mut client = TestClient::connect().await;
    client
        .call(json!(1), "_test/work", json!({ "tag": 1 }))
        .await;
    client.probe.until(1, Fate::Running).await;
    client.cancel(json!(1)).await;
    assert_eq!(client.next().await.unwrap(), cancelled(json!(1)));
    client.probe.until(1, Fate::Stopped).await;
    assert_eq!(
        client.before_pong("p").await,
        Vec::<Value>::new(),
        "one reply only"
    );
    let (rest, _, acp, registry) = client.close().await;
    assert!(rest.is_empty(), "{rest:?}");
    assert_empty(&acp, &registry);
}

#[tokio::test]
async fn an_early_cancel_means_the_handler_never_runs() {
    let mut client = TestClient::connect().await;
    client.cancel(json!(5)).await;
    client
        .call(json!(5), "_test/work", json!({ "tag": 5 }))
        .await;
    assert_eq!(client.next().await.unwrap(), cancelled(json!(5)));
    assert_eq!(client.before_pong("p").await, Vec::<Value>::new());
    assert_eq!(client.probe.fate(5), None, "the handler never ran");
    let (rest, _, acp, registry) = client.close().await;
    assert!(rest.is_empty(), "{rest:?}");
    assert_empty(&acp, &registry);
}

#[tokio::test(start_paused = true)]
async fn a_server_timeout_answers_32800_and_stops_the_handler() {
    let mut client = TestClient::connect_with(TimeoutLayer::new(Duration::from_millis(100))).await;
    client
        .call(json!(7), "_test/work", json!({ "tag": 7 }))
        .await;
    assert_eq!(client.next().await.unwrap(), cancelled(json!(7)));
    client.probe.until(7, Fate::Stopped).await;
    let (rest, _, acp, registry) = client.close().await;
    assert!(rest.is_empty(), "{rest:?}");
    assert_empty(&acp, &registry);
}

#[tokio::test]
async fn the_end_of_input_stops_every_handler_in_flight() {
    let mut client = TestClient::connect().await;
    for tag in 1..=3 {
        client
            .call(json!(tag), "_test/work", json!({ "tag": tag }))
            .await;
    }
    for tag in 1..=3 {
        client.probe.until(tag, Fate::Running).await;
    }
    let (mut rest, probe, acp, registry) = client.close().await;
    rest.sort_by_key(|m| m["id"].as_u64());
    assert_eq!(
        rest,
        (1..=3).map(|id| cancelled(json!(id))).collect::<Vec<_>>(),
        "ACP answers a disconnect -32800"
    );
    for tag in 1..=3 {
        assert_eq!(probe.fate(tag), Some(Fate::Stopped), "handler {tag}");
    }
    assert_empty(&acp, &registry);
}

#[tokio::test(start_paused = true)]
async fn a_graceful_shutdown_stops_the_handlers_left_after_the_drain() {
    let mut client = TestClient::connect().await;
    client
        .call(json!(1), "_test/work", json!({ "tag": 1 }))
        .await;
    client
        .call(json!(2), "_test/work", json!({ "ms": 10, "tag": 2 }))
        .await;
    client.probe.until(1, Fate::Running).await;
    client.probe.until(2, Fate::Running).await;
    client.shutdown.shutdown();
    // The one that finishes within the drain is answered; the other is cancelled at its end.
    assert_eq!(
        client.next().await.unwrap(),
        json!({"jsonrpc": "2.0", "id": 2, "result": { "done": 2 }})
    );
    assert_eq!(client.next().await.unwrap(), cancelled(json!(1)));
    client.probe.until(1, Fate::Stopped).await;
    let (rest, _, acp, registry) = client.close().await;
    assert!(rest.is_empty(), "{rest:?}");
    assert_empty(&acp, &registry);
}

#[tokio::test(start_paused = true)]
async fn a_reused_id_after_a_cancel_gets_its_own_answer() {
    let mut client = TestClient::connect().await;
    // The first handler is deaf to its cancellation and answers late; the SDK would route its answer to a request
    // of the same id.
    client
        .call(json!(1), "_test/stubborn", json!({ "ms": 1000, "tag": 1 }))
        .await;
    client.probe.until(1, Fate::Running).await;
    client.cancel(json!(1)).await;
    assert_eq!(client.next().await.unwrap(), cancelled(json!(1)));
    client
        .call(json!(1), "_test/stubborn", json!({ "ms": 2000, "tag": 2 }))
        .await;
    let reply = client.next().await.unwrap();
    assert_eq!(
        reply,
        json!({"jsonrpc": "2.0", "id": 1, "result": { "done": 2 }})
    );
    assert_eq!(
        client.probe.fate(1),
        Some(Fate::Finished),
        "the old one finished first, unheard"
    );
    let (rest, _, acp, registry) = client.close().await;
    assert!(rest.is_empty(), "{rest:?}");
    assert_empty(&acp, &registry);
}

#[tokio::test]
async fn a_request_to_the_client_inside_a_cancelled_prompt_is_cancelled_on_the_wire() {
    let mut client = TestClient::connect().await;
    client.prompt(json!(3), 3).await;
    let asked = client.next().await.unwrap();
    assert_eq!(asked["method"], "session/request_permission", "{asked}");
    assert_eq!(asked["params"]["sessionId"], "s3", "{asked}");
    let nested_id = asked["id"].clone();
    assert!(!nested_id.is_null(), "{asked}");
    client.cancel(json!(3)).await;
    let mut got = vec![client.next().await.unwrap(), client.next().await.unwrap()];
    got.sort_by_key(|m| m.get("method").is_some());
    assert_eq!(
        got,
        vec![
            cancelled(json!(3)),
            json!({"jsonrpc": "2.0", "method": "$/cancel_request", "params": { "requestId": nested_id }}),
        ]
    );
    client.probe.until(3, Fate::Stopped).await;
    // The client's late answer is taken and dropped.
    client
        .send(json!({"jsonrpc": "2.0", "id": nested_id, "error": {"code": -32800, "message": "Request cancelled"}}))
        .await;
    assert_eq!(
        client.before_pong("p").await,
        Vec::<Value>::new(),
        "no second cancel, no second reply"
    );
    let (rest, _, acp, registry) = client.close().await;
    assert!(rest.is_empty(), "{rest:?}");
    assert_empty(&acp, &registry);
}

#[tokio::test]
async fn a_request_to_the_client_is_answered_through_the_bridge() {
    let mut client = TestClient::connect().await;
    client.prompt(json!(4), 4).await;
    let asked = client.next().await.unwrap();
    assert_eq!(asked["method"], "session/request_permission", "{asked}");
    client
        .send(json!({"jsonrpc": "2.0", "id": asked["id"], "result": { "outcome": { "outcome": "selected", "optionId": "allow" } }}))
        .await;
    let reply = client.next().await.unwrap();
    assert_eq!(
        reply,
        json!({"jsonrpc": "2.0", "id": 4, "result": { "stopReason": "end_turn" }})
    );
    assert_eq!(client.probe.fate(4), Some(Fate::Finished));
    let (rest, _, acp, registry) = client.close().await;
    assert!(rest.is_empty(), "{rest:?}");
    assert_empty(&acp, &registry);
}

/// Under a stack that does not group requests by session, `session/cancel` is the agent's alone: a notification
/// for it, whose prompt answers `cancelled`; the permission request the agent withdraws is cancelled on the wire.
#[tokio::test]
async fn session_cancel_ends_the_prompt_with_stop_reason_cancelled() {
    let mut client = TestClient::connect().await;
    client.prompt(json!(6), 6).await;
    let asked = client.next().await.unwrap();
    assert_eq!(asked["method"], "session/request_permission", "{asked}");
    client
        .send(
            json!({"jsonrpc": "2.0", "method": "session/cancel", "params": { "sessionId": "s6" }}),
        )
        .await;
    let mut got = vec![client.next().await.unwrap(), client.next().await.unwrap()];
    got.sort_by_key(|m| m.get("method").is_some());
    assert_eq!(
        got,
        vec![
            json!({"jsonrpc": "2.0", "id": 6, "result": { "stopReason": "cancelled" }}),
            json!({"jsonrpc": "2.0", "method": "$/cancel_request", "params": { "requestId": asked["id"] }}),
        ]
    );
    assert_eq!(client.probe.fate(6), Some(Fate::Stopped));
    assert_eq!(client.before_pong("p").await, Vec::<Value>::new());
    let (rest, _, acp, registry) = client.close().await;
    assert!(rest.is_empty(), "{rest:?}");
    assert_empty(&acp, &registry);
}

#[tokio::test]
async fn bad_params_are_answered_and_the_connection_goes_on() {
    let mut client = TestClient::connect().await;
    // Params of the wrong shape for the handler: the SDK's answer.
    client
        .call(json!(9), "_test/work", json!({ "tag": "x" }))
        .await;
    let reply = client.next().await.unwrap();
    assert_eq!(reply["id"], 9);
    assert_eq!(reply["error"]["code"], -32602, "{reply}");
    // Params that are not JSON-RPC params at all: the bridge's.
    client.call(json!(10), "_test/work", json!("x")).await;
    assert_eq!(
        client.next().await.unwrap(),
        json!({"jsonrpc": "2.0", "id": 10, "error": {"code": -32602, "message": "Invalid params: params must be an object or an array"}})
    );
    client
        .call(json!(11), "_test/work", json!({ "ms": 1, "tag": 11 }))
        .await;
    assert_eq!(
        client.next().await.unwrap(),
        json!({"jsonrpc": "2.0", "id": 11, "result": { "done": 11 }})
    );
    let (_, _, acp, registry) = client.close().await;
    assert_empty(&acp, &registry);
}

/// The SDK runs every handler inside its connection's future and catches no panic: one panicking handler unwinds
/// the whole connection. The SDK answers the panicking request itself as its responder drops; the bridge answers
/// -32603 every other request the connection was working on, and a fresh agent, initialized as the client
/// initialized the first, serves what comes next.
#[tokio::test]
async fn a_panicking_handler_is_answered_32603_and_the_connection_goes_on() {
    let mut client = TestClient::connect().await;
    client
        .call(json!(1), "_test/work", json!({ "tag": 1 }))
        .await;
    client.probe.until(1, Fate::Running).await;
    client
        .call(json!(11), "_test/panic", json!({ "tag": 11 }))
        .await;
    let mut got = vec![client.next().await.unwrap(), client.next().await.unwrap()];
    got.sort_by_key(|m| m["id"].as_u64());
    assert_eq!(
        got,
        vec![
            json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32603, "message": "Internal error: agent stopped: a handler panicked"}}),
            json!({"jsonrpc": "2.0", "id": 11, "error": {"code": -32603, "message": "Internal error",
                "data": "request handler dropped its responder for `_test/panic` without responding"}}),
        ]
    );
    client
        .call(json!(12), "_test/work", json!({ "ms": 1, "tag": 12 }))
        .await;
    assert_eq!(
        client.next().await.unwrap(),
        json!({"jsonrpc": "2.0", "id": 12, "result": { "done": 12 }})
    );
    let (_, _, acp, registry) = client.close().await;
    assert_empty(&acp, &registry);
}

/// The no-leak check: many calls cancelled, every handler stopped, every table empty.
#[tokio::test]
async fn many_cancelled_calls_leave_every_table_empty() {
    const CALLS: u64 = 20_000;
    const BATCH: u64 = 1_000;
    let mut client = TestClient::connect().await;
    for batch in 0..CALLS / BATCH {
        let tags = batch * BATCH..(batch + 1) * BATCH;
        for tag in tags.clone() {
            client
                .call(json!(tag), "_test/work", json!({ "tag": tag }))
                .await;
        }
        for tag in tags.clone() {
            client.probe.until(tag, Fate::Running).await;
        }
        for tag in tags.clone() {
            client.cancel(json!(tag)).await;
        }
        for tag in tags.clone() {
            assert_eq!(client.next().await.unwrap(), cancelled(json!(tag)));
        }
        for tag in tags {
            client.probe.until(tag, Fate::Stopped).await;
        }
    }
    assert_eq!(client.before_pong("p").await, Vec::<Value>::new());
    let (rest, probe, acp, registry) = client.close().await;
    assert!(rest.is_empty());
    assert_eq!(probe.fates().len() as u64, CALLS);
    assert!(probe.fates().values().all(|fate| *fate == Fate::Stopped));
    assert_empty(&acp, &registry);
}
