//! What an rmcp handler sends on its own over our Streamable HTTP front end, over real HTTP: an elicitation made
//! through rmcp's peer in a `2025-11-25` session (on the tool call's SSE stream, answered on a later POST, cancelled
//! on that stream with the call), refused in the stateless revision; and a stateless subscription (rmcp's own
//! `subscriptions/listen`), acknowledged on its stream under the client's id, ended by `notifications/cancelled` when
//! the server ends it.

mod support;

use std::{net::SocketAddr, time::Duration};

use serde_json::{json, Value};
use support::{
    http::{eventually, open_session, post, stateless_meta, Served, Stream},
    Fate, Probe, LISTEN,
};
use tower_cancel_rmcp::BridgeSizes;

fn ask(id: Value, tag: u64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": { "name": "ask", "arguments": { "tag": tag } }})
}

/// What rmcp's `create_elicitation` puts on the wire for `Allow <tag>?` (rmcp's shape, its `mode`), as `asked`
/// carried it: under `asked`'s id, with the progress token the bridge asks every such request with (rmcp asks with
/// one of its own; the client's reports under the bridge's go back to rmcp under rmcp's).
fn elicitation(asked: &Value, tag: u64) -> Value {
    let token = &asked["params"]["_meta"]["progressToken"];
    assert!(token.is_number() || token.is_string(), "{asked}");
    json!({"jsonrpc": "2.0", "id": asked["id"], "method": "elicitation/create", "params": {
        "_meta": { "progressToken": token },
        "mode": "form",
        "message": format!("Allow {tag}?"),
        "requestedSchema": { "type": "object", "properties": {} },
    }})
}

/// POSTs `message` in `session`: a notification or an answer, accepted with 202 and nothing else.
async fn post_accepted(addr: SocketAddr, session: &str, message: Value) {
    let response = post(addr, &[("mcp-session-id", session)], message)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    assert_eq!(response.text().await.unwrap(), "");
}

/// Nothing in the bridge's tables but the session's rmcp server.
fn assert_only_the_session(sizes: &BridgeSizes) {
    let BridgeSizes {
        requests,
        progress_tokens,
        nested,
        sessions,
        ..
    } = *sizes;
    assert_eq!(
        (requests, progress_tokens, nested, sessions),
        (0, 0, 0, 1),
        "{sizes:?}"
    );
}

#[tokio::test]
async fn an_elicitation_goes_out_on_the_calls_stream_and_the_answer_posted_later_reaches_it() {
    let Served {
        addr,
        probe,
        rmcp,
        mcp,
    } = Served::start(None).await;
    let session = open_session(addr).await;
    let headers = [("mcp-session-id", session.as_str())];
    let mut first = Stream::post(addr, &headers, ask(json!(1), 1)).await;
    let asked_first = first.until(1).await.remove(0);
    assert_eq!(asked_first, elicitation(&asked_first, 1));
    let mut second = Stream::post(addr, &headers, ask(json!(2), 2)).await;
    let asked_second = second.until(1).await.remove(0);
    assert_eq!(asked_second, elicitation(&asked_second, 2));
    assert_ne!(
        asked_first["id"], asked_second["id"],
        "numbered in the session"
    );

    // Answered in the other order, each on a POST of its own.
    post_accepted(
        addr,
        &session,
        json!({"jsonrpc": "2.0", "id": asked_second["id"],
        "result": { "action": "decline" }}),
    )
    .await;
    post_accepted(
        addr,
        &session,
        json!({"jsonrpc": "2.0", "id": asked_first["id"],
        "result": { "action": "accept", "content": {} }}),
    )
    .await;
    let reply = |id: u64, text: &str| {
        json!({"jsonrpc": "2.0", "id": id, "result": {
            "content": [{ "type": "text", "text": text }], "isError": false }})
    };
    assert_eq!(
        second.until_the_end().await,
        vec![asked_second, reply(2, "decline")]
    );
    assert_eq!(
        first.until_the_end().await,
        vec![asked_first, reply(1, "accept")]
    );
    assert_eq!(probe.fate(1), Some(Fate::Finished));
    assert_eq!(probe.fate(2), Some(Fate::Finished));
    assert_eq!(mcp.in_flight(), 0);
    assert_only_the_session(&rmcp.sizes());
}

#[tokio::test]
async fn a_cancelled_call_cancels_its_elicitation_on_its_stream_and_fires_ct() {
    let Served {
        addr,
        probe,
        rmcp,
        mcp,
    } = Served::start(None).await;
    let session = open_session(addr).await;
    let headers = [("mcp-session-id", session.as_str())];
    let mut call = Stream::post(addr, &headers, ask(json!(3), 3)).await;
    let asked = call.until(1).await.remove(0);
    assert_eq!(asked, elicitation(&asked, 3));

    post_accepted(
        addr,
        &session,
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": { "requestId": 3, "reason": "user stopped it" }}),
    )
    .await;
    let on_the_stream = call.until_the_end().await;
    assert_eq!(on_the_stream.len(), 2, "{on_the_stream:?}");
    assert_eq!(on_the_stream[0], asked);
    assert_eq!(
        on_the_stream[1]["method"], "notifications/cancelled",
        "{on_the_stream:?}"
    );
    assert_eq!(
        on_the_stream[1]["params"]["requestId"], asked["id"],
        "{on_the_stream:?}"
    );
    probe.until(3, Fate::Stopped).await;

    // The client's late answer is accepted and dropped; the session goes on.
    post_accepted(
        addr,
        &session,
        json!({"jsonrpc": "2.0", "id": asked["id"],
        "result": { "action": "accept" }}),
    )
    .await;
    eventually("nothing in flight", || mcp.in_flight() == 0).await;
    assert_only_the_session(&rmcp.sizes());
}

#[tokio::test]
async fn a_stateless_handler_cannot_ask_the_client_and_rmcp_says_so() {
    let Served { addr, probe, .. } = Served::start(None).await;
    let headers = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "ask"),
    ];
    let mut call = ask(json!(4), 4);
    call["params"]["_meta"] = stateless_meta();
    let messages = Stream::post(addr, &headers, call)
        .await
        .until_the_end()
        .await;
    assert_eq!(messages.len(), 1, "no elicitation: {messages:?}");
    assert_eq!(messages[0]["id"], 4, "{messages:?}");
    assert_eq!(messages[0]["error"]["code"], -32600, "{messages:?}");
    assert_eq!(
        messages[0]["error"]["message"],
        "server-to-client requests are not allowed on protocol 2026-07-28 or later; return InputRequiredResult instead"
    );
    assert_eq!(probe.fate(4), Some(Fate::Finished));
}

fn listen(id: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "subscriptions/listen", "params": {
        "notifications": { "toolsListChanged": true, "promptsListChanged": true },
        "_meta": stateless_meta(),
    }})
}

const LISTEN_HEADERS: [(&str, &str); 2] = [
    ("mcp-protocol-version", "2026-07-28"),
    ("mcp-method", "subscriptions/listen"),
];

/// rmcp names a subscription by its own id: the client sees its, in the acknowledgment and in the teardown, which
/// is the subscription's end (rmcp's result for it is not sent).
#[tokio::test]
async fn a_subscription_the_server_ends_is_acknowledged_then_torn_down_on_its_stream() {
    let Served {
        addr,
        probe,
        rmcp,
        mcp,
    } = Served::start_with(
        Probe::ending_subscriptions_after(Duration::from_millis(200)),
        None,
    )
    .await;
    let messages = Stream::post(addr, &LISTEN_HEADERS, listen(json!("sub-1")))
        .await
        .until_the_end()
        .await;
    assert_eq!(
        messages,
        vec![
            json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged", "params": {
                "_meta": { "io.modelcontextprotocol/subscriptionId": "sub-1" },
                "notifications": { "toolsListChanged": true },
            }}),
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {
                "requestId": "sub-1", "reason": "subscription ended by the server" }}),
        ]
    );
    assert_eq!(probe.fate(LISTEN), Some(Fate::Finished));
    eventually("nothing in flight", || mcp.in_flight() == 0).await;
    assert_eq!(rmcp.sizes(), BridgeSizes::default());
}

#[tokio::test]
async fn a_subscription_the_client_closes_fires_ct_and_gets_no_teardown() {
    let Served {
        addr,
        probe,
        rmcp,
        mcp,
    } = Served::start(None).await;
    let mut stream = Stream::post(addr, &LISTEN_HEADERS, listen(json!(9))).await;
    let acknowledged = stream.until(1).await.remove(0);
    assert_eq!(
        acknowledged["method"],
        "notifications/subscriptions/acknowledged"
    );
    assert_eq!(
        acknowledged["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        9
    );
    // The client closes the listen's stream: that ends the subscription.
    drop(stream);
    probe.until(LISTEN, Fate::Stopped).await;
    eventually("nothing in flight", || mcp.in_flight() == 0).await;
    assert_eq!(rmcp.sizes(), BridgeSizes::default());
}
