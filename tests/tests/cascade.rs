//! `CascadeLayer` over real connections: a handler calls the other side through `req.peer()`, and when
//! its own request is cancelled (the peer's cancel, the server's timeout, the connection closing), the nested
//! request is cancelled too: the other side receives the dialect's cancel for the nested id and its handler is
//! stopped. Cascades go both ways and several levels deep; every table is empty at the end.
//!
//! Most tests run two servers back to back ([`Pair`]); the probe's `call` method is the handler that calls the
//! other side (see the `tests` crate docs).

use serde_json::json;
use tests::{
    ms,
    pair::{settle, Pair, PeerCounts},
    Conn, Counts, Ended, Nested, Probe,
};
use tower_cancel::{
    dialect::{Lsp, Mcp},
    CancelReason, CancelStack, ErrorObject, Id, PeerError,
};
use tower_cancel_io::Framing;

const LSP_CANCEL_0: &str = r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":0}}"#;
const ACP_CANCEL_0: &str =
    r#"{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":0}}"#;
const CANCELLED_0: &str =
    r#"{"jsonrpc":"2.0","id":0,"error":{"code":-32800,"message":"Request cancelled"}}"#;
const HANG_0: &str = r#"{"jsonrpc":"2.0","id":0,"method":"hang"}"#;
const CALL_HANG_0: &str = r#"{"jsonrpc":"2.0","id":0,"method":"call","params":{"method":"hang"}}"#;

fn mcp_cancel(id: i64, reason: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"reason":"{reason}","requestId":{id}}}}}"#
    )
}

fn nested(parent: i64, id: i64, method: &str) -> Nested {
    Nested {
        parent: parent.into(),
        id: id.into(),
        method: method.to_owned(),
        outcome: None,
    }
}

// ---------------------------------------------------------------------------------------------------------------
// A server calls its client.
// ---------------------------------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_handler_calls_the_client_and_answers_with_its_reply() {
    let mut pair = Pair::lsp();
    let result = pair
        .client
        .peer
        .request(
            "call",
            json!({ "method": "echo", "params": { "text": "from the client" } }),
        )
        .await;
    assert_eq!(
        result,
        Ok(json!({ "nested": 0, "ok": { "text": "from the client" } }))
    );
    pair.to_server
        .expect(r#"{"jsonrpc":"2.0","id":0,"method":"call","params":{"method":"echo","params":{"text":"from the client"}}}"#)
        .await;
    pair.to_client
        .expect(r#"{"jsonrpc":"2.0","id":0,"method":"echo","params":{"text":"from the client"}}"#)
        .await;
    pair.to_server
        .expect(r#"{"jsonrpc":"2.0","id":0,"result":{"text":"from the client"}}"#)
        .await;
    pair.to_client
        .expect(r#"{"jsonrpc":"2.0","id":0,"result":{"nested":0,"ok":{"text":"from the client"}}}"#)
        .await;
    assert_eq!(
        pair.server.probe.nested()[0].outcome,
        Some(Ok(json!({ "text": "from the client" })))
    );
    assert_eq!(pair.server.counts(), Counts::new(1, 1, 0));
    assert_eq!(pair.client.counts(), Counts::new(1, 1, 0));
    assert_eq!(pair.client.peer_counts(), PeerCounts::new(1, 0, 0));
    assert_eq!(pair.server.peer_counts(), PeerCounts::new(1, 0, 0));
    pair.finish().await;
}

/// The client sends `call {method: hang}` (its id 0); the server's handler sends `hang` to the client (the
/// server's id 0); the client drops its call. The server's request is cancelled, and with it the nested one: the
/// client gets `nested_cancel` and its `hang` handler is stopped.
async fn cancelling_the_servers_request_cancels_the_nested_one(
    mut pair: Pair,
    cancel: &str,
    nested_cancel: &str,
    reply: Option<&str>,
    // What the server's handler for the call and the client's handler for the nested request see.
    (server_reason, client_reason): (CancelReason, CancelReason),
) {
    let call = pair
        .client
        .peer
        .request("call", json!({ "method": "hang" }));
    pair.to_server.expect(CALL_HANG_0).await;
    pair.to_client.expect(HANG_0).await;
    pair.client.probe.wait_started(0).await;
    assert_eq!(pair.server.peer_counts().pending, 1);

    drop(call);
    pair.to_server.expect(cancel).await;
    pair.to_client.expect(nested_cancel).await;
    if let Some(reply) = reply {
        // The server answers its own request after it sent the nested cancel; the client answers the nested one.
        pair.to_client.expect(reply).await;
        pair.to_server.expect(reply).await;
    }
    settle().await;
    assert_eq!(
        pair.server.probe.ended_of(0),
        Some(Ended::stopped(0, "call", Some(server_reason)))
    );
    assert_eq!(
        pair.client.probe.ended_of(0),
        Some(Ended::stopped(0, "hang", Some(client_reason)))
    );
    assert_eq!(pair.server.probe.nested(), vec![nested(0, 0, "hang")]);
    assert_eq!(pair.server.counts(), Counts::new(1, 0, 1));
    assert_eq!(pair.client.counts(), Counts::new(1, 0, 1));
    let late = u64::from(reply.is_some());
    assert_eq!(pair.client.peer_counts(), PeerCounts::new(1, 1, late));
    assert_eq!(pair.server.peer_counts(), PeerCounts::new(1, 1, late));
    pair.finish().await;
}

#[tokio::test(start_paused = true)]
async fn lsp_cancelling_the_servers_request_cancels_its_request_to_the_client() {
    cancelling_the_servers_request_cancels_the_nested_one(
        Pair::lsp(),
        LSP_CANCEL_0,
        LSP_CANCEL_0,
        Some(CANCELLED_0),
        (CancelReason::peer(None), CancelReason::peer(None)),
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn acp_cancelling_the_agents_request_cancels_its_request_to_the_client() {
    cancelling_the_servers_request_cancels_the_nested_one(
        Pair::acp(),
        ACP_CANCEL_0,
        ACP_CANCEL_0,
        Some(CANCELLED_0),
        (CancelReason::peer(None), CancelReason::peer(None)),
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn mcp_cancelling_the_servers_request_cancels_its_request_to_the_client() {
    // The client's own call is dropped by its caller; the server's handler is dropped with its call in it, and
    // the nested cancel says it was its parent's.
    let nested = "parent request cancelled";
    cancelling_the_servers_request_cancels_the_nested_one(
        Pair::mcp(),
        &mcp_cancel(0, "cancelled locally: caller went away"),
        &mcp_cancel(0, nested),
        None,
        (
            CancelReason::peer(Some("cancelled locally: caller went away".into())),
            CancelReason::peer(Some(nested.into())),
        ),
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn lsp_raw_client_the_cancel_for_the_nested_request_goes_out_before_the_reply() {
    let probe = Probe::new();
    let (mut conn, peer) = Conn::with_peer(CancelStack::lsp(), &probe, Framing::ContentLength, Lsp);
    conn.send(r#"{"jsonrpc":"2.0","id":7,"method":"call","params":{"method":"workspace/configuration","params":{"items":[]}}}"#)
        .await;
    conn.expect(
        r#"{"jsonrpc":"2.0","id":0,"method":"workspace/configuration","params":{"items":[]}}"#,
    )
    .await;
    conn.send(r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":7}}"#)
        .await;
    conn.expect(LSP_CANCEL_0).await;
    conn.expect(
        r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32800,"message":"Request cancelled"}}"#,
    )
    .await;
    // The client answers the nested request after all: dropped as late.
    conn.send(r#"{"jsonrpc":"2.0","id":0,"result":[]}"#).await;
    settle().await;
    assert_eq!(
        probe.ended_of(7),
        Some(Ended::stopped(7, "call", Some(CancelReason::peer(None))))
    );
    let stats = peer.stats();
    assert_eq!(
        (
            stats.sent,
            stats.cancels_sent,
            stats.late_replies,
            stats.pending
        ),
        (1, 1, 1, 0)
    );
    assert_eq!(conn.counts(), Counts::new(1, 0, 1));
    conn.finish_quiet().await;
}

#[tokio::test(start_paused = true)]
async fn mcp_raw_client_the_nested_request_is_cancelled_and_nothing_is_answered() {
    let probe = Probe::new();
    let (mut conn, peer) = Conn::with_peer(CancelStack::mcp(), &probe, Framing::Ndjson, Mcp);
    conn.send(r#"{"jsonrpc":"2.0","id":"t1","method":"call","params":{"method":"sampling/createMessage","params":{"messages":[]}}}"#)
        .await;
    conn.expect(
        r#"{"jsonrpc":"2.0","id":0,"method":"sampling/createMessage","params":{"messages":[]}}"#,
    )
    .await;
    conn.send(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"t1","reason":"user"}}"#)
        .await;
    conn.expect(&mcp_cancel(0, "parent request cancelled"))
        .await;
    settle().await;
    assert_eq!(
        probe.ended_of("t1"),
        Some(Ended::stopped(
            "t1",
            "call",
            Some(CancelReason::peer(Some("user".into())))
        ))
    );
    assert_eq!(peer.stats().pending, 0);
    assert_eq!(peer.stats().cancels_sent, 1);
    conn.finish_quiet().await;
}

// ---------------------------------------------------------------------------------------------------------------
// The server's own timeout.
// ---------------------------------------------------------------------------------------------------------------

/// The server's `TimeoutLayer` cancels its request after 100 ms: the nested request to the client is cancelled
/// (`nested_cancel`), the client's handler stopped, and the client's call gets the server's `reply`.
async fn the_servers_timeout_cancels_the_nested_request(
    mut pair: Pair,
    reply: &str,
    error: ErrorObject,
    nested_cancel: &str,
    nested_reason: CancelReason,
    nested_reply: Option<&str>,
    // How the server's handler ended: stopped, or (MCP, whose nested call ends at once at its deadline) returned.
    handler: fn(i64, &str, Option<CancelReason>) -> Ended,
) {
    let result = pair
        .client
        .peer
        .request("call", json!({ "method": "hang" }))
        .await;
    assert_eq!(result, Err(PeerError::Rejected(error)));
    pair.to_server.expect(CALL_HANG_0).await;
    // The nested call carries the time its parent had left (see deadline.rs), and stops when it passes.
    pair.to_client
        .expect(r#"{"jsonrpc":"2.0","id":0,"method":"hang","params":{"_meta":{"timeoutMs":100}}}"#)
        .await;
    pair.to_client.expect(nested_cancel).await;
    pair.to_client.expect(reply).await;
    if let Some(nested_reply) = nested_reply {
        pair.to_server.expect(nested_reply).await;
    }
    settle().await;
    assert_eq!(
        pair.server.probe.ended_of(0),
        Some(handler(0, "call", Some(CancelReason::Timeout)))
    );
    assert_eq!(
        pair.client.probe.ended_of(0),
        Some(Ended::stopped(0, "hang", Some(nested_reason)))
    );
    assert_eq!(pair.server.counts(), Counts::new(1, 0, 1));
    assert_eq!(pair.client.counts(), Counts::new(1, 0, 1));
    assert_eq!(pair.client.peer_counts(), PeerCounts::new(1, 0, 0));
    assert_eq!(
        pair.server.peer_counts(),
        PeerCounts::new(1, 1, u64::from(nested_reply.is_some()))
    );
    pair.finish().await;
}

#[tokio::test(start_paused = true)]
async fn lsp_the_servers_timeout_cancels_its_request_to_the_client() {
    the_servers_timeout_cancels_the_nested_request(
        Pair::new(
            Framing::ContentLength,
            (CancelStack::lsp(), Lsp),
            (CancelStack::lsp().timeout(ms(100)), Lsp),
        ),
        CANCELLED_0,
        ErrorObject::new(-32800, "Request cancelled"),
        LSP_CANCEL_0,
        CancelReason::peer(None),
        Some(CANCELLED_0),
        Ended::stopped,
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn mcp_the_servers_timeout_cancels_its_request_to_the_client() {
    the_servers_timeout_cancels_the_nested_request(
        Pair::new(
            Framing::Ndjson,
            (CancelStack::mcp(), Mcp),
            (CancelStack::mcp().timeout(ms(100)), Mcp),
        ),
        r#"{"jsonrpc":"2.0","id":0,"error":{"code":-32001,"message":"Request timed out"}}"#,
        ErrorObject::new(-32001, "Request timed out"),
        // The nested call reached its parent's deadline: it timed out (the same instant as its parent).
        &mcp_cancel(0, "timed out"),
        CancelReason::peer(Some("timed out".into())),
        None,
        Ended::finished,
    )
    .await;
}

// ---------------------------------------------------------------------------------------------------------------
// The connection closes.
// ---------------------------------------------------------------------------------------------------------------

/// The client's call waits on the server's handler, which waits on the client: the connection breaks. Every
/// call fails with `Closed` or is dropped with its handler; every handler is stopped with reason Disconnect.
async fn the_connection_closing_ends_nested_calls(spawn: bool) {
    let mut pair = Pair::lsp();
    let call = tokio::spawn(
        pair.client
            .peer
            .request("call", json!({ "method": "hang", "spawn": spawn })),
    );
    pair.client.probe.wait_started(0).await;
    pair.cut().await;
    assert_eq!(call.await.unwrap(), Err(PeerError::Closed));
    if spawn {
        // The call in its own task outlived the handler: it failed with Closed.
        assert_eq!(
            pair.server.probe.wait_outcome(0).await,
            Err(PeerError::Closed)
        );
    } else {
        // The call was dropped with its handler.
        assert_eq!(pair.server.probe.nested(), vec![nested(0, 0, "hang")]);
    }
    pair.client.join().await;
    pair.server.join().await;
    assert_eq!(
        pair.server.probe.ended_of(0),
        Some(Ended::stopped(0, "call", Some(CancelReason::Disconnect)))
    );
    assert_eq!(
        pair.client.probe.ended_of(0),
        Some(Ended::stopped(0, "hang", Some(CancelReason::Disconnect)))
    );
    assert_eq!(pair.server.counts(), Counts::new(1, 0, 1));
    assert_eq!(pair.client.counts(), Counts::new(1, 0, 1));
}

#[tokio::test(start_paused = true)]
async fn the_connection_closing_stops_the_handler_and_its_nested_call() {
    the_connection_closing_ends_nested_calls(false).await;
}

#[tokio::test(start_paused = true)]
async fn the_connection_closing_fails_a_nested_call_in_its_own_task_with_closed() {
    the_connection_closing_ends_nested_calls(true).await;
}

#[tokio::test(start_paused = true)]
async fn a_cooperative_handler_sees_its_nested_call_fail_with_closed_when_the_client_hangs_up() {
    // The client closes its sending side only: the server reads the end of the stream and still writes.
    let probe = Probe::new();
    let (mut conn, peer) = Conn::with_peer(
        CancelStack::lsp().cooperative(ms(1_000)),
        &probe,
        Framing::ContentLength,
        Lsp,
    );
    conn.send(r#"{"jsonrpc":"2.0","id":1,"method":"call","params":{"method":"hang"}}"#)
        .await;
    conn.expect(HANG_0).await;
    let rest = conn.finish().await;
    // The handler got `Closed` for its call at once (no cancel: nothing can answer it), and its answer is its
    // request's partial result.
    assert_eq!(rest.len(), 1, "{rest:?}");
    tests::assert_same_json(
        &rest[0],
        r#"{"jsonrpc":"2.0","id":1,"result":{"failed":"connection closed","nested":0}}"#,
    );
    assert_eq!(probe.nested()[0].outcome, Some(Err(PeerError::Closed)));
    assert_eq!(
        probe.ended_of(1),
        Some(Ended::finished(1, "call", Some(CancelReason::Disconnect)))
    );
    let stats = peer.stats();
    assert_eq!((stats.sent, stats.cancels_sent, stats.pending), (1, 0, 0));
}

// ---------------------------------------------------------------------------------------------------------------
// The parent's token: cooperative handlers, calls in their own tasks.
// ---------------------------------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn lsp_a_cooperative_handlers_nested_call_is_cancelled_and_answered_by_the_client() {
    let mut pair = Pair::new(
        Framing::ContentLength,
        (CancelStack::lsp(), Lsp),
        (CancelStack::lsp().cooperative(ms(1_000)), Lsp),
    );
    let call = pair
        .client
        .peer
        .request("call", json!({ "method": "hang" }));
    pair.client.probe.wait_started(0).await;
    drop(call);
    pair.to_server.expect(CALL_HANG_0).await;
    pair.to_server.expect(LSP_CANCEL_0).await;
    pair.to_client.expect(HANG_0).await;
    // The handler kept running; its call saw the parent cancelled, sent the cancel and waited for the answer ...
    pair.to_client.expect(LSP_CANCEL_0).await;
    pair.to_server.expect(CANCELLED_0).await;
    // ... which it hands on as its partial result.
    pair.to_client
        .expect(r#"{"jsonrpc":"2.0","id":0,"result":{"error":{"code":-32800,"message":"Request cancelled"},"nested":0}}"#)
        .await;
    settle().await;
    assert_eq!(
        pair.server.probe.ended_of(0),
        Some(Ended::finished(0, "call", Some(CancelReason::peer(None))))
    );
    assert_eq!(
        pair.client.probe.ended_of(0),
        Some(Ended::stopped(0, "hang", Some(CancelReason::peer(None))))
    );
    assert_eq!(
        pair.server.probe.nested()[0].outcome,
        Some(Err(PeerError::Rejected(ErrorObject::new(
            -32800,
            "Request cancelled"
        ))))
    );
    assert_eq!(pair.server.peer_counts(), PeerCounts::new(1, 1, 0));
    assert_eq!(pair.client.peer_counts(), PeerCounts::new(1, 1, 1));
    pair.finish().await;
}

#[tokio::test(start_paused = true)]
async fn mcp_a_nested_call_in_its_own_task_is_cancelled_with_its_parent() {
    let mut pair = Pair::mcp();
    let call = pair
        .client
        .peer
        .request("call", json!({ "method": "hang", "spawn": true }));
    pair.client.probe.wait_started(0).await;
    drop(call);
    pair.to_server
        .expect(
            r#"{"jsonrpc":"2.0","id":0,"method":"call","params":{"method":"hang","spawn":true}}"#,
        )
        .await;
    pair.to_server
        .expect(&mcp_cancel(0, "cancelled locally: caller went away"))
        .await;
    pair.to_client.expect(HANG_0).await;
    // The handler was dropped, its task was not: the parent's token stopped the call, and MCP stops waiting.
    pair.to_client
        .expect(&mcp_cancel(0, "parent request cancelled"))
        .await;
    assert_eq!(
        pair.server.probe.wait_outcome(0).await,
        Err(PeerError::Cancelled)
    );
    settle().await;
    assert_eq!(
        pair.client.probe.ended_of(0),
        Some(Ended::stopped(
            0,
            "hang",
            Some(CancelReason::peer(Some("parent request cancelled".into())))
        ))
    );
    assert_eq!(pair.server.peer_counts(), PeerCounts::new(1, 1, 0));
    assert_eq!(pair.client.peer_counts(), PeerCounts::new(1, 1, 0));
    pair.finish().await;
}

#[tokio::test(start_paused = true)]
async fn a_handler_whose_request_is_cancelled_sends_no_new_request() {
    // A cooperative handler winding down after its cancel makes one more call: it must not reach the client.
    let mut pair = Pair::new(
        Framing::ContentLength,
        (CancelStack::lsp(), Lsp),
        (CancelStack::lsp().cooperative(ms(1_000)), Lsp),
    );
    let call = pair
        .client
        .peer
        .request("call", json!({ "method": "hang", "after_cancel": true }));
    pair.server.probe.wait_started(0).await;
    drop(call);
    pair.to_server.next().await;
    pair.to_server.expect(LSP_CANCEL_0).await;
    assert_eq!(
        pair.server.probe.wait_outcome(0).await,
        Err(PeerError::Cancelled)
    );
    pair.to_client
        .expect(r#"{"jsonrpc":"2.0","id":0,"result":{"failed":"request cancelled","nested":0}}"#)
        .await;
    settle().await;
    assert_eq!(
        pair.client.probe.started(),
        0,
        "no request reached the client"
    );
    assert_eq!(pair.server.peer_counts(), PeerCounts::new(0, 0, 0));
    pair.finish().await;
}

// ---------------------------------------------------------------------------------------------------------------
// Deeper cascades, both ways.
// ---------------------------------------------------------------------------------------------------------------

/// Client -> server A (`call`); the server's handler sends B (`call`) to the client; the client's handler for B
/// sends C (`hang`) to the server. The client cancels A: B is cancelled on the client, and C on the server.
async fn a_cascade_two_levels_deep(
    mut pair: Pair,
    // The cancel of request `id`, and the reason its handler sees; `cascaded` when it follows from its parent's.
    cancel: impl Fn(i64, bool) -> String,
    reason: impl Fn(bool) -> CancelReason,
    reply: Option<fn(i64) -> String>,
) {
    let a = pair.client.peer.request(
        "call",
        json!({ "method": "call", "params": { "method": "hang" } }),
    );
    // A is the client's id 0, B the server's id 0, C the client's id 1.
    pair.server.probe.wait_started(1).await;
    assert_eq!(pair.client.peer_counts().pending, 2, "A and C");
    assert_eq!(pair.server.peer_counts().pending, 1, "B");
    assert_eq!(pair.server.registry.len(), 2, "A and C run on the server");
    assert_eq!(pair.client.registry.len(), 1, "B runs on the client");

    drop(a);
    pair.to_server
        .expect(r#"{"jsonrpc":"2.0","id":0,"method":"call","params":{"method":"call","params":{"method":"hang"}}}"#)
        .await;
    pair.to_server
        .expect(r#"{"jsonrpc":"2.0","id":1,"method":"hang"}"#)
        .await;
    pair.to_server.expect(&cancel(0, false)).await; // A
    pair.to_server.expect(&cancel(1, true)).await; // C, from the client's handler for B
    pair.to_client
        .expect(r#"{"jsonrpc":"2.0","id":0,"method":"call","params":{"method":"hang"}}"#)
        .await;
    pair.to_client.expect(&cancel(0, true)).await; // B, from the server's handler for A
    if let Some(reply) = reply {
        pair.to_client.expect(&reply(0)).await; // A's answer
        pair.to_server.expect(&reply(0)).await; // B's answer
        pair.to_client.expect(&reply(1)).await; // C's answer
    }
    settle().await;

    assert_eq!(
        pair.server.probe.ended(),
        vec![
            Ended::stopped(0, "call", Some(reason(false))),
            Ended::stopped(1, "hang", Some(reason(true))),
        ]
    );
    assert_eq!(
        pair.client.probe.ended(),
        vec![Ended::stopped(0, "call", Some(reason(true)))]
    );
    assert_eq!(pair.server.probe.nested(), vec![nested(0, 0, "call")]);
    assert_eq!(pair.client.probe.nested(), vec![nested(0, 1, "hang")]);
    assert_eq!(pair.server.counts(), Counts::new(2, 0, 2));
    assert_eq!(pair.client.counts(), Counts::new(1, 0, 1));
    let late = u64::from(reply.is_some());
    assert_eq!(pair.client.peer_counts(), PeerCounts::new(2, 2, 2 * late));
    assert_eq!(pair.server.peer_counts(), PeerCounts::new(1, 1, late));
    pair.finish().await;
}

fn lsp_cancel(id: i64) -> String {
    format!(r#"{{"jsonrpc":"2.0","method":"$/cancelRequest","params":{{"id":{id}}}}}"#)
}

fn acp_cancel(id: i64) -> String {
    format!(r#"{{"jsonrpc":"2.0","method":"$/cancel_request","params":{{"requestId":{id}}}}}"#)
}

fn cancelled(id: i64) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-32800,"message":"Request cancelled"}}}}"#
    )
}

#[tokio::test(start_paused = true)]
async fn lsp_a_cascade_two_levels_deep() {
    a_cascade_two_levels_deep(
        Pair::lsp(),
        |id, _| lsp_cancel(id),
        |_| CancelReason::peer(None),
        Some(cancelled),
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn acp_a_cascade_two_levels_deep() {
    a_cascade_two_levels_deep(
        Pair::acp(),
        |id, _| acp_cancel(id),
        |_| CancelReason::peer(None),
        Some(cancelled),
    )
    .await;
}

/// The reason text of an MCP cancel sent by a dropped call: its caller went away, or its parent was cancelled.
fn mcp_reason(cascaded: bool) -> &'static str {
    if cascaded {
        "parent request cancelled"
    } else {
        "cancelled locally: caller went away"
    }
}

#[tokio::test(start_paused = true)]
async fn mcp_a_cascade_two_levels_deep() {
    a_cascade_two_levels_deep(
        Pair::mcp(),
        |id, cascaded| mcp_cancel(id, mcp_reason(cascaded)),
        |cascaded| CancelReason::peer(Some(mcp_reason(cascaded).into())),
        None,
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_cascade_started_by_the_server() {
    // The server's application calls the client; the client's handler calls the server; the server gives up.
    let mut pair = Pair::lsp();
    let call = pair
        .server
        .peer
        .request("call", json!({ "method": "hang" }));
    pair.server.probe.wait_started(0).await;
    drop(call);
    pair.to_client.expect(CALL_HANG_0).await;
    pair.to_client.expect(LSP_CANCEL_0).await;
    pair.to_server.expect(HANG_0).await;
    pair.to_server.expect(LSP_CANCEL_0).await;
    pair.to_server.expect(CANCELLED_0).await;
    pair.to_client.expect(CANCELLED_0).await;
    settle().await;
    assert_eq!(
        pair.client.probe.ended_of(0),
        Some(Ended::stopped(0, "call", Some(CancelReason::peer(None))))
    );
    assert_eq!(
        pair.server.probe.ended_of(0),
        Some(Ended::stopped(0, "hang", Some(CancelReason::peer(None))))
    );
    assert_eq!(pair.client.peer_counts(), PeerCounts::new(1, 1, 1));
    assert_eq!(pair.server.peer_counts(), PeerCounts::new(1, 1, 1));
    pair.finish().await;
}

#[tokio::test(start_paused = true)]
async fn ids_of_the_two_directions_never_mix() {
    // Both sides have a request 0 in flight, one each way; cancelling the client's request 0 on the server leaves
    // the server's request 0 on the client alone.
    let mut pair = Pair::lsp();
    let to_client = pair.server.peer.request("sleep", json!({ "ms": 100 }));
    let to_server = pair.client.peer.request("hang", ());
    pair.client.probe.wait_started(0).await;
    pair.server.probe.wait_started(0).await;
    drop(to_server);
    assert_eq!(to_client.await, Ok(json!({ "slept": 100 })));
    settle().await;
    assert_eq!(
        pair.server.probe.ended_of(Id::from(0)),
        Some(Ended::stopped(0, "hang", Some(CancelReason::peer(None))))
    );
    assert_eq!(
        pair.client.probe.ended_of(0),
        Some(Ended::finished(0, "sleep", None))
    );
    for _ in 0..2 {
        pair.to_server.next().await;
        pair.to_client.next().await;
    }
    // The client also answered the server's sleep.
    pair.to_server.next().await;
    pair.finish().await;
}

// ---------------------------------------------------------------------------------------------------------------
// A graceful shutdown of the server.
// ---------------------------------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_graceful_shutdown_lets_a_handler_finish_its_nested_call() {
    // The server keeps reading while it drains: the client's answer to the nested call still reaches its peer.
    let mut pair = Pair::lsp();
    let call = tokio::spawn(pair.client.peer.request(
        "call",
        json!({ "method": "sleep", "params": { "ms": 100 } }),
    ));
    pair.client.probe.wait_started(0).await;
    pair.server.shutdown.shutdown();
    assert_eq!(
        call.await.unwrap(),
        Ok(json!({ "nested": 0, "ok": { "slept": 100 } }))
    );
    pair.to_server.next().await;
    pair.to_client
        .expect(r#"{"jsonrpc":"2.0","id":0,"method":"sleep","params":{"ms":100}}"#)
        .await;
    pair.to_server
        .expect(r#"{"jsonrpc":"2.0","id":0,"result":{"slept":100}}"#)
        .await;
    pair.to_client
        .expect(r#"{"jsonrpc":"2.0","id":0,"result":{"nested":0,"ok":{"slept":100}}}"#)
        .await;
    // The server closed the connection once drained.
    pair.server.join().await;
    pair.client.join().await;
    assert_eq!(pair.server.counts(), Counts::new(1, 1, 0));
    assert_eq!(pair.client.counts(), Counts::new(1, 1, 0));
    assert_eq!(pair.server.peer_counts(), PeerCounts::new(1, 0, 0));
    pair.to_server.assert_quiet();
    pair.to_client.assert_quiet();
}

#[tokio::test(start_paused = true)]
async fn when_the_drain_ends_the_handlers_nested_call_is_cancelled_too() {
    let mut pair = Pair::lsp();
    let call = tokio::spawn(pair.client.peer.request(
        "call",
        json!({ "method": "sleep", "params": { "ms": 60_000 } }),
    ));
    pair.client.probe.wait_started(0).await;
    pair.server.shutdown.shutdown();
    // After the drain timeout the server's request is cancelled (reason Shutdown), which cancels the nested one:
    // the client is still listening and hears the cancel before the server's own answer.
    assert_eq!(
        call.await.unwrap(),
        Err(PeerError::Rejected(ErrorObject::new(
            -32800,
            "Request cancelled"
        )))
    );
    pair.to_server.next().await;
    pair.to_client.next().await;
    pair.to_client.expect(LSP_CANCEL_0).await;
    pair.to_client.expect(CANCELLED_0).await;
    pair.server.join().await;
    pair.client.join().await;
    assert_eq!(
        pair.server.probe.ended_of(0),
        Some(Ended::stopped(0, "call", Some(CancelReason::Shutdown)))
    );
    assert_eq!(
        pair.client.probe.ended_of(0),
        Some(Ended::stopped(0, "sleep", Some(CancelReason::peer(None))))
    );
    assert_eq!(pair.server.peer_counts().cancels_sent, 1);
}
