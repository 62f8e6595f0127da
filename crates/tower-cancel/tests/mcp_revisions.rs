//! MCP's stateless revision (`2026-07-28`): a server sends `notifications/cancelled` only to tear down a
//! subscription. Once a conversation's requests carry that revision, its peer drops its own calls without
//! sending a cancel; before (or in a `2025-11-25` conversation) a dropped call is cancelled as always.

use serde_json::{json, Value};
use tower::{service_fn, ServiceBuilder, ServiceExt};
use tower_cancel::{
    dialect::Mcp, outbox::OutboxReceiver, BoxError, CancelStack, Connection, Incoming, Message,
    Outbox, PeerError, Request, Scope,
};

async fn serve_one(connection: &Connection, json: Value) {
    let Incoming::Request(request) =
        connection.receive(Message::from_slice(json.to_string().as_bytes()).unwrap())
    else {
        unreachable!("a request")
    };
    let stack = ServiceBuilder::new()
        .layer(CancelStack::mcp())
        .service(service_fn(|_: Request| async {
            Ok::<Value, BoxError>(json!({}))
        }));
    stack.oneshot(request).await.unwrap();
}

fn sent(receiver: &mut OutboxReceiver) -> Vec<Value> {
    std::iter::from_fn(|| receiver.try_recv())
        .map(|m| serde_json::from_slice(&m).unwrap())
        .collect()
}

async fn drop_a_call(connection: &Connection) {
    let peer = connection.peer().unwrap().clone();
    let call = peer.request("sampling/createMessage", json!({}));
    // Polled once, so that it is in flight, then dropped.
    let _ = tokio::time::timeout(std::time::Duration::from_millis(1), call).await;
}

/// The stateless revision has no requests from server to client (the server asks with an `input_required` result
/// instead): a handler's call fails at once, and nothing is written, neither the call nor a cancel.
#[tokio::test(flavor = "current_thread")]
async fn in_the_stateless_revision_the_server_sends_no_requests() {
    let scope = Scope::with_dialect(Mcp);
    let (outbox, mut receiver) = Outbox::new();
    let connection = scope.connect(outbox);
    serve_one(
        &connection,
        json!({"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{
            "io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}),
    )
    .await;
    assert!(connection.session().sends_no_cancels());
    let peer = connection.peer().unwrap().clone();
    assert_eq!(
        peer.request("elicitation/create", json!({})).await,
        Err(PeerError::NotAllowed)
    );
    drop_a_call(&connection).await;
    assert_eq!(sent(&mut receiver), Vec::<Value>::new());
    let stats = peer.stats();
    assert_eq!((stats.sent, stats.pending, stats.cancels_sent), (0, 0, 0));
}

#[tokio::test(flavor = "current_thread")]
async fn in_a_session_revision_a_dropped_call_is_cancelled() {
    let scope = Scope::with_dialect(Mcp);
    let (outbox, mut receiver) = Outbox::new();
    let connection = scope.connect(outbox);
    serve_one(
        &connection,
        json!({"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"progressToken":1}}}),
    )
    .await;
    assert!(!connection.session().sends_no_cancels());
    drop_a_call(&connection).await;
    let sent = sent(&mut receiver);
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert_eq!(sent[1]["method"], "notifications/cancelled");
    assert_eq!(sent[1]["params"]["requestId"], sent[0]["id"]);
}

#[test]
fn a_subscription_teardown_names_the_listen_request() {
    let teardown = Mcp::subscription_teardown(&"listen:0".into(), None);
    assert_eq!(
        serde_json::to_value(&teardown).unwrap(),
        json!({"jsonrpc":"2.0","method":"notifications/cancelled",
               "params":{"requestId":"listen:0","reason":"subscription ended by the server"}})
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_conversation_that_initialized_speaks_a_session_revision_to_its_end() {
    let scope = Scope::with_dialect(Mcp);
    let (outbox, mut receiver) = Outbox::new();
    let connection = scope.connect(outbox);
    serve_one(
        &connection,
        json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25"}}),
    )
    .await;
    assert!(connection.session().is_initialized());
    // Its later requests are not looked at for a revision (a stray key does not change the conversation).
    serve_one(
        &connection,
        json!({"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{
            "io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}),
    )
    .await;
    assert!(!connection.session().sends_no_cancels());
    drop_a_call(&connection).await;
    let sent = sent(&mut receiver);
    assert_eq!(sent.last().unwrap()["method"], "notifications/cancelled");
}
