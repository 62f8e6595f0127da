//! An rmcp handler under the stack, over a real NDJSON connection: every cancel the stack decides reaches the
//! handler as rmcp's own (`ct` fires), and the wire carries exactly what MCP says.

mod support;

use std::time::Duration;

use serde_json::json;
use support::{assert_empty, Client, Fate, Probe, LISTEN};
use tower_cancel::TimeoutLayer;

#[tokio::test]
async fn a_client_cancel_fires_ct_and_nothing_is_answered() {
    let mut client = Client::connect().await;
    client.call(json!(1), "work", json!({ "tag": 1 })).await;
    client.probe.until(1, Fate::Running).await;
    client.cancel(json!(1)).await;
    client.probe.until(1, Fate::Stopped).await;
    assert_eq!(
        client.before_pong("p").await,
        Vec::<serde_json::Value>::new()
    );
    let (rest, _, rmcp, registry) = client.close().await;
    assert!(rest.is_empty(), "nothing for the cancelled call: {rest:?}");
    assert_empty(&rmcp, &registry);
}

#[tokio::test]
async fn an_early_cancel_means_the_handler_never_runs() {
    let mut client = Client::connect().await;
    client.cancel(json!(5)).await;
    client.call(json!(5), "work", json!({ "tag": 5 })).await;
    assert_eq!(
        client.before_pong("p").await,
        Vec::<serde_json::Value>::new()
    );
    assert_eq!(client.probe.fate(5), None, "the handler never ran");
    let (rest, _, rmcp, registry) = client.close().await;
    assert!(rest.is_empty(), "{rest:?}");
    assert_empty(&rmcp, &registry);
}

#[tokio::test(start_paused = true)]
async fn a_server_timeout_answers_32001_and_fires_ct() {
    let mut client = Client::connect_with(TimeoutLayer::new(Duration::from_millis(100))).await;
    client.call(json!(7), "work", json!({ "tag": 7 })).await;
    let reply = client.next().await.unwrap();
    assert_eq!(
        reply,
        json!({"jsonrpc": "2.0", "id": 7, "error": {"code": -32001, "message": "Request timed out"}})
    );
    client.probe.until(7, Fate::Stopped).await;
    let (rest, _, rmcp, registry) = client.close().await;
    assert!(rest.is_empty(), "{rest:?}");
    assert_empty(&rmcp, &registry);
}

#[tokio::test]
async fn the_end_of_input_fires_ct_of_every_handler_in_flight() {
    let mut client = Client::connect().await;
    for tag in 1..=3 {
        client.call(json!(tag), "work", json!({ "tag": tag })).await;
    }
    for tag in 1..=3 {
        client.probe.until(tag, Fate::Running).await;
    }
    let (rest, probe, rmcp, registry) = client.close().await;
    assert!(
        rest.is_empty(),
        "a disconnect is answered nothing in MCP: {rest:?}"
    );
    for tag in 1..=3 {
        assert_eq!(probe.fate(tag), Some(Fate::Stopped), "handler {tag}");
    }
    assert_empty(&rmcp, &registry);
}

#[tokio::test(start_paused = true)]
async fn a_reused_id_after_a_cancel_gets_its_own_answer() {
    let mut client = Client::connect().await;
    // The first handler ignores `ct` and answers late; rmcp would route its answer to a request of the same id.
    client
        .call(json!(1), "stubborn", json!({ "ms": 1000, "tag": 1 }))
        .await;
    client.probe.until(1, Fate::Running).await;
    client.cancel(json!(1)).await;
    client
        .call(json!(1), "stubborn", json!({ "ms": 2000, "tag": 2 }))
        .await;
    let reply = client.next().await.unwrap();
    assert_eq!(reply["id"], 1);
    assert_eq!(reply["result"]["content"][0]["text"], "done 2", "{reply}");
    assert_eq!(
        client.probe.fate(1),
        Some(Fate::Finished),
        "the old one finished first, unheard"
    );
    let (rest, _, rmcp, registry) = client.close().await;
    assert!(rest.is_empty(), "{rest:?}");
    assert_empty(&rmcp, &registry);
}

#[tokio::test]
async fn a_request_to_the_client_inside_a_cancelled_call_is_cancelled_on_the_wire() {
    let mut client = Client::connect().await;
    client.call(json!(3), "roots", json!({ "tag": 3 })).await;
    let asked = client.next().await.unwrap();
    assert_eq!(asked["method"], "roots/list", "{asked}");
    let nested_id = asked["id"].clone();
    assert!(!nested_id.is_null(), "{asked}");
    client.cancel(json!(3)).await;
    let cancelled = client.next().await.unwrap();
    assert_eq!(
        cancelled["method"], "notifications/cancelled",
        "{cancelled}"
    );
    assert_eq!(cancelled["params"]["requestId"], nested_id, "{cancelled}");
    client.probe.until(3, Fate::Stopped).await;
    // The client's late answer is taken and dropped.
    client
        .send(json!({"jsonrpc": "2.0", "id": nested_id, "result": { "roots": [] }}))
        .await;
    assert_eq!(
        client.before_pong("p").await,
        Vec::<serde_json::Value>::new()
    );
    let (rest, _, rmcp, registry) = client.close().await;
    assert!(rest.is_empty(), "{rest:?}");
    assert_empty(&rmcp, &registry);
}

#[tokio::test]
async fn a_request_to_the_client_is_answered_through_the_bridge() {
    let mut client = Client::connect().await;
    client.call(json!(4), "roots", json!({ "tag": 4 })).await;
    let asked = client.next().await.unwrap();
    assert_eq!(asked["method"], "roots/list", "{asked}");
    client
        .send(json!({"jsonrpc": "2.0", "id": asked["id"], "result": { "roots": [{ "uri": "file:///a" }] }}))
        .await;
    let reply = client.next().await.unwrap();
    assert_eq!(reply["id"], 4);
    assert_eq!(reply["result"]["content"][0]["text"], "1 roots", "{reply}");
    let (rest, _, rmcp, registry) = client.close().await;
    assert!(rest.is_empty(), "{rest:?}");
    assert_empty(&rmcp, &registry);
}

/// What rmcp's `create_elicitation` puts on the wire for `Allow <tag>?` (rmcp's shape, its `mode`), as `asked`
/// carried it: with the progress token the bridge asks every such request with (rmcp asks with one of its own;
/// the client's reports under the bridge's go back to rmcp under rmcp's).
fn elicitation_params(asked: &serde_json::Value, tag: u64) -> serde_json::Value {
    let token = &asked["params"]["_meta"]["progressToken"];
    assert!(token.is_number() || token.is_string(), "{asked}");
    json!({
        "_meta": { "progressToken": token },
        "mode": "form",
        "message": format!("Allow {tag}?"),
        "requestedSchema": { "type": "object", "properties": {} },
    })
}

#[tokio::test]
async fn an_elicitation_through_rmcps_peer_is_answered_by_the_client() {
    let mut client = Client::connect().await;
    client.call(json!(20), "ask", json!({ "tag": 20 })).await;
    let asked = client.next().await.unwrap();
    assert_eq!(asked["method"], "elicitation/create", "{asked}");
    assert_eq!(asked["params"], elicitation_params(&asked, 20), "{asked}");
    client
        .send(json!({"jsonrpc": "2.0", "id": asked["id"], "result": { "action": "accept", "content": {} }}))
        .await;
    let reply = client.next().await.unwrap();
    assert_eq!(
        reply,
        json!({"jsonrpc": "2.0", "id": 20, "result": {
            "content": [{ "type": "text", "text": "accept" }], "isError": false }})
    );
    assert_eq!(client.probe.fate(20), Some(Fate::Finished));
    let (rest, _, rmcp, registry) = client.close().await;
    assert!(rest.is_empty(), "{rest:?}");
    assert_empty(&rmcp, &registry);
}

#[tokio::test]
async fn a_cancelled_call_cancels_its_elicitation_on_the_wire_and_fires_ct() {
    let mut client = Client::connect().await;
    client.call(json!("c"), "ask", json!({ "tag": 21 })).await;
    let asked = client.next().await.unwrap();
    assert_eq!(asked["method"], "elicitation/create", "{asked}");
    client.cancel(json!("c")).await;
    let cancelled = client.next().await.unwrap();
    assert_eq!(
        cancelled,
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": { "requestId": asked["id"], "reason": "parent request cancelled" }}),
    );
    client.probe.until(21, Fate::Stopped).await;
    // The client's late answer is taken and dropped; the call gets no reply.
    client
        .send(json!({"jsonrpc": "2.0", "id": asked["id"], "result": { "action": "accept" }}))
        .await;
    assert_eq!(
        client.before_pong("p").await,
        Vec::<serde_json::Value>::new()
    );
    // The connection's next elicitation gets its own id, and is answered.
    client.call(json!("d"), "ask", json!({ "tag": 22 })).await;
    let again = client.next().await.unwrap();
    assert_ne!(again["id"], asked["id"], "{again}");
    client
        .send(json!({"jsonrpc": "2.0", "id": again["id"], "result": { "action": "decline" }}))
        .await;
    let reply = client.next().await.unwrap();
    assert_eq!(reply["id"], "d");
    assert_eq!(reply["result"]["content"][0]["text"], "decline", "{reply}");
    let (rest, _, rmcp, registry) = client.close().await;
    assert!(rest.is_empty(), "{rest:?}");
    assert_empty(&rmcp, &registry);
}

/// A `subscriptions/listen` of the stateless revision's shape (rmcp serves it only so), over the connection:
/// rmcp's acknowledgment names it by the client's id, and when the handler's `listen` returns, the teardown naming it
/// is its end.
#[tokio::test(start_paused = true)]
async fn a_subscription_is_acknowledged_under_the_clients_id_and_ended_by_the_teardown() {
    let probe = Probe::ending_subscriptions_after(Duration::from_millis(300));
    let mut client = Client::connect_to(probe, TimeoutLayer::none()).await;
    client
        .send(
            json!({"jsonrpc": "2.0", "id": "sub", "method": "subscriptions/listen", "params": {
                "notifications": { "toolsListChanged": true },
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientInfo": { "name": "t", "version": "0" },
                    "io.modelcontextprotocol/clientCapabilities": {},
                },
            }}),
        )
        .await;
    assert_eq!(
        client.next().await.unwrap(),
        json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged", "params": {
            "_meta": { "io.modelcontextprotocol/subscriptionId": "sub" },
            "notifications": { "toolsListChanged": true },
        }})
    );
    assert_eq!(
        client.next().await.unwrap(),
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {
            "requestId": "sub", "reason": "subscription ended by the server" }})
    );
    assert_eq!(client.probe.fate(LISTEN), Some(Fate::Finished));
    assert_eq!(
        client.before_pong("p").await,
        Vec::<serde_json::Value>::new()
    );
    let (rest, _, rmcp, registry) = client.close().await;
    assert!(rest.is_empty(), "{rest:?}");
    assert_empty(&rmcp, &registry);
}

#[tokio::test]
async fn bad_params_are_answered_and_the_connection_goes_on() {
    let mut client = Client::connect().await;
    client
        .send(json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": { "name": "work", "arguments": { "tag": "x" } }}))
        .await;
    let reply = client.next().await.unwrap();
    assert_eq!(reply["id"], 9);
    assert_eq!(reply["error"]["code"], -32602, "{reply}");
    client
        .call(json!(10), "work", json!({ "ms": 1, "tag": 10 }))
        .await;
    let reply = client.next().await.unwrap();
    assert_eq!(reply["result"]["content"][0]["text"], "done 10", "{reply}");
    let (_, _, rmcp, registry) = client.close().await;
    assert_empty(&rmcp, &registry);
}

/// rmcp runs a handler on a task of its own and never answers one that panicked: the bridge's net answers it
/// -32603, as the stack answers its own handlers' panics, and the connection goes on.
#[tokio::test]
async fn a_panicking_handler_is_answered_32603_and_the_connection_goes_on() {
    let mut client = Client::connect().await;
    client.call(json!(11), "panic", json!({ "tag": 11 })).await;
    let reply = client.next().await.unwrap();
    assert_eq!(
        reply,
        json!({"jsonrpc": "2.0", "id": 11, "error": {"code": -32603, "message": "handler panicked"}})
    );
    client
        .call(json!(12), "work", json!({ "ms": 1, "tag": 12 }))
        .await;
    let reply = client.next().await.unwrap();
    assert_eq!(reply["result"]["content"][0]["text"], "done 12", "{reply}");
    let (_, _, rmcp, registry) = client.close().await;
    assert_empty(&rmcp, &registry);
}

/// The no-leak check: many calls cancelled, every handler stopped, every table empty.
#[tokio::test]
async fn many_cancelled_calls_leave_every_table_empty() {
    const CALLS: u64 = 100_000;
    const BATCH: u64 = 1_000;
    let mut client = Client::connect().await;
    for batch in 0..CALLS / BATCH {
        let tags = batch * BATCH..(batch + 1) * BATCH;
        for tag in tags.clone() {
            client.call(json!(tag), "work", json!({ "tag": tag })).await;
        }
        for tag in tags.clone() {
            client.probe.until(tag, Fate::Running).await;
        }
        for tag in tags.clone() {
            client.cancel(json!(tag)).await;
        }
        for tag in tags {
            client.probe.until(tag, Fate::Stopped).await;
        }
    }
    assert_eq!(
        client.before_pong("p").await,
        Vec::<serde_json::Value>::new()
    );
    let (rest, probe, rmcp, registry) = client.close().await;
    assert!(rest.is_empty());
    assert_eq!(probe.fates().len() as u64, CALLS);
    assert!(probe.fates().values().all(|fate| *fate == Fate::Stopped));
    assert_empty(&rmcp, &registry);
}
