//! `Peer` over real connections, in both directions: two servers back to back ([`Pair`]), each with its own stack,
//! handler and `server.peer(dialect)`, the frames between them recorded; or a server with a peer and a raw-frame
//! client where the other side's exact bytes matter (the ACP draft's `initialize`).
//!
//! What a caller gets for each way a call ends (reply, drop, timeout, detach, close), the exact cancel frame of
//! each dialect, what the other side's handler and registry see, and the late replies; at the end of every test
//! both registries and both pending tables are empty.

use serde_json::json;
use tests::{
    assert_about, ms,
    pair::{settle, Pair, PeerCounts, Side, Tap},
    Conn, Counts, Ended, Probe,
};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower_cancel::{
    dialect::{AcpDraft, Lsp},
    CancelReason, CancelStack, ErrorObject, PeerError,
};
use tower_cancel_io::Framing;

const HANG_0: &str = r#"{"jsonrpc":"2.0","id":0,"method":"hang"}"#;
const LSP_CANCEL_0: &str = r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":0}}"#;
const ACP_CANCEL_0: &str =
    r#"{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":0}}"#;
const CANCELLED_0: &str =
    r#"{"jsonrpc":"2.0","id":0,"error":{"code":-32800,"message":"Request cancelled"}}"#;

fn mcp_cancel_0(reason: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"reason":"{reason}","requestId":0}}}}"#
    )
}

fn request_cancelled() -> ErrorObject {
    ErrorObject::new(-32800, "Request cancelled")
}

/// Which side calls which.
#[derive(Clone, Copy, Debug)]
enum Direction {
    /// The client's application calls the server.
    ToServer,
    /// The server's application calls its client (outside any request).
    ToClient,
}

/// The caller, the callee, the frames from the caller and the frames back.
fn ends(pair: &mut Pair, direction: Direction) -> (&Side, &Side, &mut Tap, &mut Tap) {
    match direction {
        Direction::ToServer => (
            &pair.client,
            &pair.server,
            &mut pair.to_server,
            &mut pair.to_client,
        ),
        Direction::ToClient => (
            &pair.server,
            &pair.client,
            &mut pair.to_client,
            &mut pair.to_server,
        ),
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Cancel on drop.
// ---------------------------------------------------------------------------------------------------------------

/// The caller sends `hang` (id 0), waits until its handler runs on the other side, and drops the call: exactly
/// one `cancel` frame goes out, the handler is stopped for `reason`, the other side answers `reply` (or nothing)
/// and that reply is dropped as late.
async fn dropping_a_call_cancels_it(
    mut pair: Pair,
    direction: Direction,
    cancel: &str,
    reply: Option<&str>,
    reason: CancelReason,
) {
    let (caller, callee, out, back) = ends(&mut pair, direction);
    let call = caller.peer.request("hang", ());
    assert_eq!(call.id(), &0.into());
    out.expect(HANG_0).await;
    callee.probe.wait_started(0).await;
    assert_eq!(caller.peer_counts().pending, 1);

    drop(call);
    assert_eq!(caller.peer_counts().pending, 0, "forgotten at once");
    out.expect(cancel).await;
    if let Some(reply) = reply {
        back.expect(reply).await;
    }
    settle().await;
    out.assert_quiet();
    back.assert_quiet();
    assert_eq!(
        callee.probe.ended_of(0),
        Some(Ended::stopped(0, "hang", Some(reason)))
    );
    assert_eq!(callee.counts(), Counts::new(1, 0, 1));
    assert_eq!(
        caller.peer_counts(),
        PeerCounts::new(1, 1, u64::from(reply.is_some()))
    );
    pair.finish().await;
}

/// LSP and ACP: the handler is stopped with no reason text, and the peer's -32800 comes late.
async fn dropping_a_call_cancels_it_and_the_reply_is_late(
    pair: Pair,
    direction: Direction,
    cancel: &str,
) {
    let reason = CancelReason::peer(None);
    dropping_a_call_cancels_it(pair, direction, cancel, Some(CANCELLED_0), reason).await;
}

/// MCP: the cancel says the caller went away, and nothing comes back.
async fn mcp_dropping_a_call_cancels_it(direction: Direction) {
    let reason = "cancelled locally: caller went away";
    let (cancel, reason_seen) = (
        mcp_cancel_0(reason),
        CancelReason::peer(Some(reason.into())),
    );
    dropping_a_call_cancels_it(Pair::mcp(), direction, &cancel, None, reason_seen).await;
}

#[tokio::test(start_paused = true)]
async fn lsp_dropping_a_call_to_the_server_sends_one_cancel_and_drops_the_late_reply() {
    dropping_a_call_cancels_it_and_the_reply_is_late(
        Pair::lsp(),
        Direction::ToServer,
        LSP_CANCEL_0,
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn lsp_dropping_a_call_to_the_client_sends_one_cancel_and_drops_the_late_reply() {
    dropping_a_call_cancels_it_and_the_reply_is_late(
        Pair::lsp(),
        Direction::ToClient,
        LSP_CANCEL_0,
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn acp_dropping_a_call_to_the_agent_sends_one_cancel_and_drops_the_late_reply() {
    dropping_a_call_cancels_it_and_the_reply_is_late(
        Pair::acp(),
        Direction::ToServer,
        ACP_CANCEL_0,
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn acp_dropping_a_call_to_the_client_sends_one_cancel_and_drops_the_late_reply() {
    dropping_a_call_cancels_it_and_the_reply_is_late(
        Pair::acp(),
        Direction::ToClient,
        ACP_CANCEL_0,
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn mcp_dropping_a_call_to_the_server_sends_one_cancel_with_a_reason_and_gets_no_reply() {
    mcp_dropping_a_call_cancels_it(Direction::ToServer).await;
}

#[tokio::test(start_paused = true)]
async fn mcp_dropping_a_call_to_the_client_sends_one_cancel_with_a_reason_and_gets_no_reply() {
    mcp_dropping_a_call_cancels_it(Direction::ToClient).await;
}

#[tokio::test(start_paused = true)]
async fn a_call_answered_before_it_is_dropped_sends_no_cancel() {
    let mut pair = Pair::lsp();
    let result = pair.client.peer.request("echo", json!({ "x": 1 })).await;
    assert_eq!(result, Ok(json!({ "x": 1 })));
    pair.to_server
        .expect(r#"{"jsonrpc":"2.0","id":0,"method":"echo","params":{"x":1}}"#)
        .await;
    pair.to_client
        .expect(r#"{"jsonrpc":"2.0","id":0,"result":{"x":1}}"#)
        .await;
    // A reply that is an error is the caller's result too, and still no cancel.
    let result = pair.server.peer.request("nope", ()).await;
    assert_eq!(
        result,
        Err(PeerError::Rejected(ErrorObject::method_not_found("nope")))
    );
    pair.to_client
        .expect(r#"{"jsonrpc":"2.0","id":0,"method":"nope"}"#)
        .await;
    pair.to_server.next().await;
    assert_eq!(pair.client.peer_counts(), PeerCounts::new(1, 0, 0));
    assert_eq!(pair.server.peer_counts(), PeerCounts::new(1, 0, 0));
    pair.finish().await;
}

#[tokio::test(start_paused = true)]
async fn a_cancel_token_cancels_the_call_and_lsp_waits_for_the_peers_answer() {
    let mut pair = Pair::lsp();
    let token = CancellationToken::new();
    let call = pair
        .client
        .peer
        .request("hang", ())
        .cancel_on(token.clone());
    let waiter = tokio::spawn(call);
    pair.to_server.expect(HANG_0).await;
    pair.server.probe.wait_started(0).await;
    token.cancel();
    assert_eq!(
        waiter.await.unwrap(),
        Err(PeerError::Rejected(request_cancelled())),
        "the peer's -32800 is the answer"
    );
    pair.to_server.expect(LSP_CANCEL_0).await;
    pair.to_client.expect(CANCELLED_0).await;
    assert_eq!(
        pair.server.probe.ended_of(0),
        Some(Ended::stopped(0, "hang", Some(CancelReason::peer(None))))
    );
    assert_eq!(pair.client.peer_counts(), PeerCounts::new(1, 1, 0));
    pair.finish().await;
}

// ---------------------------------------------------------------------------------------------------------------
// Timeouts.
// ---------------------------------------------------------------------------------------------------------------

/// LSP and ACP: the timeout sends the cancel, the call keeps waiting and resolves with the peer's -32800.
async fn a_timeout_waits_for_the_peers_answer(mut pair: Pair, cancel: &str, default: bool) {
    let start = Instant::now();
    let call = if default {
        pair.client
            .peer
            .clone()
            .with_default_timeout(ms(100))
            .request("hang", ())
    } else {
        pair.client.peer.request("hang", ()).timeout(ms(100))
    };
    let result = call.await;
    assert_eq!(result, Err(PeerError::Rejected(request_cancelled())));
    assert_about(start.elapsed(), ms(100));
    pair.to_server.expect(HANG_0).await;
    pair.to_server.expect(cancel).await;
    pair.to_client.expect(CANCELLED_0).await;
    assert_eq!(
        pair.server.probe.ended_of(0),
        Some(Ended::stopped(0, "hang", Some(CancelReason::peer(None))))
    );
    assert_eq!(pair.server.counts(), Counts::new(1, 0, 1));
    assert_eq!(
        pair.client.peer_counts(),
        PeerCounts::new(1, 1, 0),
        "the reply was awaited, not late"
    );
    pair.finish().await;
}

#[tokio::test(start_paused = true)]
async fn lsp_a_call_timeout_sends_the_cancel_and_resolves_with_the_peers_reply() {
    a_timeout_waits_for_the_peers_answer(Pair::lsp(), LSP_CANCEL_0, false).await;
}

#[tokio::test(start_paused = true)]
async fn lsp_the_handles_default_timeout_works_the_same() {
    a_timeout_waits_for_the_peers_answer(Pair::lsp(), LSP_CANCEL_0, true).await;
}

#[tokio::test(start_paused = true)]
async fn acp_a_call_timeout_sends_the_cancel_and_resolves_with_the_peers_reply() {
    a_timeout_waits_for_the_peers_answer(Pair::acp(), ACP_CANCEL_0, false).await;
}

#[tokio::test(start_paused = true)]
async fn acp_the_handles_default_timeout_works_the_same() {
    a_timeout_waits_for_the_peers_answer(Pair::acp(), ACP_CANCEL_0, true).await;
}

/// Where an MCP call's timeout comes from.
#[derive(Clone, Copy)]
enum McpTimeout {
    /// The call's own, 100 ms.
    Call,
    /// The handle's default, 100 ms.
    Handle,
    /// None set: the peer's [`Peer::DEFAULT_TIMEOUT`](tower_cancel::Peer::DEFAULT_TIMEOUT).
    Peer,
}

/// MCP: the timeout sends the cancel and the call stops at once; the server sends nothing back.
async fn mcp_a_timeout_stops_at_once(timeout: McpTimeout) {
    let mut pair = Pair::mcp();
    let start = Instant::now();
    let hang = || json!({ "name": "t", "hang": true });
    let (call, after) = match timeout {
        McpTimeout::Call => (
            pair.client
                .peer
                .request("tools/call", hang())
                .timeout(ms(100)),
            ms(100),
        ),
        McpTimeout::Handle => (
            pair.client
                .peer
                .clone()
                .with_default_timeout(ms(100))
                .request("tools/call", hang()),
            ms(100),
        ),
        McpTimeout::Peer => (
            pair.client.peer.request("tools/call", hang()),
            tower_cancel::Peer::DEFAULT_TIMEOUT,
        ),
    };
    assert_eq!(call.await, Err(PeerError::TimedOut));
    assert_about(start.elapsed(), after);
    assert_eq!(pair.client.peer_counts().pending, 0);
    pair.to_server
        .expect(
            r#"{"jsonrpc":"2.0","id":0,"method":"tools/call","params":{"hang":true,"name":"t"}}"#,
        )
        .await;
    pair.to_server.expect(&mcp_cancel_0("timed out")).await;
    settle().await;
    pair.to_client.assert_quiet();
    assert_eq!(
        pair.server.probe.ended_of(0),
        Some(Ended::stopped(
            0,
            "tools/call",
            Some(CancelReason::peer(Some("timed out".into())))
        ))
    );
    assert_eq!(pair.client.peer_counts(), PeerCounts::new(1, 1, 0));
    pair.finish().await;
}

#[tokio::test(start_paused = true)]
async fn mcp_a_call_timeout_stops_at_once_and_the_server_sends_no_reply() {
    mcp_a_timeout_stops_at_once(McpTimeout::Call).await;
}

#[tokio::test(start_paused = true)]
async fn mcp_the_handles_default_timeout_stops_at_once_too() {
    mcp_a_timeout_stops_at_once(McpTimeout::Handle).await;
}

#[tokio::test(start_paused = true)]
async fn a_calls_own_timeout_wins_over_the_default_and_other_handles_keep_theirs() {
    let mut pair = Pair::lsp();
    let short = pair.client.peer.clone().with_default_timeout(ms(1_000));
    let start = Instant::now();
    let result = short.request("hang", ()).timeout(ms(100)).await;
    assert_eq!(result, Err(PeerError::Rejected(request_cancelled())));
    assert_about(start.elapsed(), ms(100));
    pair.to_server.expect(HANG_0).await;
    pair.to_server.expect(LSP_CANCEL_0).await;
    pair.to_client.expect(CANCELLED_0).await;

    // The handle with the default keeps it for its other calls ...
    let start = Instant::now();
    let result = short.request("sleep", json!({ "ms": 2_000 })).await;
    assert_eq!(result, Err(PeerError::Rejected(request_cancelled())));
    assert_about(start.elapsed(), ms(1_000));
    // ... and the peer itself keeps the 60 s default: a 2 s call is simply answered.
    let start = Instant::now();
    let result = pair
        .client
        .peer
        .request("sleep", json!({ "ms": 2_000 }))
        .await;
    assert_eq!(result, Ok(json!({ "slept": 2_000 })));
    assert_about(start.elapsed(), ms(2_000));
    for _ in 0..3 {
        pair.to_server.next().await;
    }
    pair.to_client.next().await;
    pair.to_client.next().await;
    assert_eq!(pair.to_server.count_method("$/cancelRequest"), 2);
    assert_eq!(pair.client.peer_counts(), PeerCounts::new(3, 2, 0));
    pair.finish().await;
}

/// MCP: "implementations SHOULD establish timeouts for all sent requests". A call that sets none, on a handle
/// that sets none, gives up after 60 s (the MCP TypeScript SDK's default): the cancel goes out and the server's
/// handler stops.
#[tokio::test(start_paused = true)]
async fn mcp_a_call_with_no_timeout_of_its_own_gives_up_after_60_s() {
    assert_eq!(tower_cancel::Peer::DEFAULT_TIMEOUT, ms(60_000));
    mcp_a_timeout_stops_at_once(McpTimeout::Peer).await;
}

/// Waiting longer than the default is an explicit choice, for a handle or for one call.
#[tokio::test(start_paused = true)]
async fn no_timeout_is_an_explicit_choice_of_a_handle_or_a_call() {
    let mut pair = Pair::mcp();
    assert_eq!(
        pair.client.peer.default_timeout(),
        Some(tower_cancel::Peer::DEFAULT_TIMEOUT)
    );
    let patient = pair.client.peer.clone().without_default_timeout();
    assert_eq!(patient.default_timeout(), None);
    let start = Instant::now();
    let result = patient.request("sleep", json!({ "ms": 100_000 })).await;
    assert_eq!(result, Ok(json!({ "slept": 100_000 })));
    assert_about(start.elapsed(), ms(100_000));

    let start = Instant::now();
    let result = pair
        .client
        .peer
        .request("sleep", json!({ "ms": 90_000 }))
        .no_timeout()
        .await;
    assert_eq!(result, Ok(json!({ "slept": 90_000 })));
    assert_about(start.elapsed(), ms(90_000));
    for _ in 0..2 {
        pair.to_server.next().await;
        pair.to_client.next().await;
    }
    pair.to_server.assert_quiet();
    assert_eq!(pair.client.peer_counts(), PeerCounts::new(2, 0, 0));
    pair.finish().await;
}

#[tokio::test(start_paused = true)]
async fn lsp_stop_waiting_on_cancel_stops_at_once_and_the_peers_reply_is_late() {
    let mut pair = Pair::lsp();
    let start = Instant::now();
    let result = pair
        .client
        .peer
        .request("hang", ())
        .timeout(ms(100))
        .wait_after_cancel(false)
        .await;
    assert_eq!(result, Err(PeerError::TimedOut));
    assert_about(start.elapsed(), ms(100));
    pair.to_server.expect(HANG_0).await;
    pair.to_server.expect(LSP_CANCEL_0).await;
    // The server still answers, as LSP says; the caller no longer listens.
    pair.to_client.expect(CANCELLED_0).await;
    settle().await;
    assert_eq!(pair.client.peer_counts(), PeerCounts::new(1, 1, 1));
    assert_eq!(
        pair.server.probe.ended_of(0),
        Some(Ended::stopped(0, "hang", Some(CancelReason::peer(None))))
    );
    pair.finish().await;
}

#[tokio::test(start_paused = true)]
async fn acp_stop_waiting_on_cancel_with_a_token_rejects_at_once() {
    let mut pair = Pair::acp();
    let token = CancellationToken::new();
    let call = pair
        .server
        .peer
        .request("hang", ())
        .cancel_on(token.clone())
        .wait_after_cancel(false);
    let waiter = tokio::spawn(call);
    pair.to_client.expect(HANG_0).await;
    pair.client.probe.wait_started(0).await;
    token.cancel();
    assert_eq!(waiter.await.unwrap(), Err(PeerError::Cancelled));
    pair.to_client.expect(ACP_CANCEL_0).await;
    pair.to_server.expect(CANCELLED_0).await;
    settle().await;
    assert_eq!(pair.server.peer_counts(), PeerCounts::new(1, 1, 1));
    pair.finish().await;
}

#[tokio::test(start_paused = true)]
async fn a_call_answered_within_its_timeout_sends_no_cancel() {
    let mut pair = Pair::mcp();
    let result = pair
        .client
        .peer
        .request("sleep", json!({ "ms": 50 }))
        .timeout(ms(100))
        .await;
    assert_eq!(result, Ok(json!({ "slept": 50 })));
    // Past the timeout, nothing happens.
    tokio::time::sleep(ms(200)).await;
    pair.to_server.next().await;
    pair.to_client.next().await;
    assert_eq!(pair.to_server.count_method("notifications/cancelled"), 0);
    assert_eq!(pair.client.peer_counts().cancels_sent, 0);
    pair.finish().await;
}

// ---------------------------------------------------------------------------------------------------------------
// Detach.
// ---------------------------------------------------------------------------------------------------------------

async fn a_detached_call_runs_to_completion(mut pair: Pair, direction: Direction) {
    let (caller, callee, out, back) = ends(&mut pair, direction);
    let call = caller.peer.request("sleep", json!({ "ms": 100 })).detach();
    out.expect(r#"{"jsonrpc":"2.0","id":0,"method":"sleep","params":{"ms":100}}"#)
        .await;
    callee.probe.wait_started(0).await;
    drop(call);
    assert_eq!(caller.peer_counts().pending, 0);
    back.expect(r#"{"jsonrpc":"2.0","id":0,"result":{"slept":100}}"#)
        .await;
    settle().await;
    out.assert_quiet();
    assert_eq!(
        callee.probe.ended_of(0),
        Some(Ended::finished(0, "sleep", None))
    );
    assert_eq!(callee.counts(), Counts::new(1, 1, 0));
    assert_eq!(caller.peer_counts(), PeerCounts::new(1, 0, 1));
    pair.finish().await;
}

#[tokio::test(start_paused = true)]
async fn lsp_a_detached_call_sends_no_cancel_and_its_reply_is_late() {
    a_detached_call_runs_to_completion(Pair::lsp(), Direction::ToServer).await;
}

#[tokio::test(start_paused = true)]
async fn mcp_a_detached_call_to_the_client_sends_no_cancel_and_its_reply_is_late() {
    a_detached_call_runs_to_completion(Pair::mcp(), Direction::ToClient).await;
}

// ---------------------------------------------------------------------------------------------------------------
// `initialize` is never cancelled.
// ---------------------------------------------------------------------------------------------------------------

/// `initialize`, dropped or timed out, never gets a cancel; the other side runs it to the end.
async fn initialize_is_never_cancelled(mut pair: Pair) {
    let init = pair.client.peer.request("initialize", json!({ "ms": 100 }));
    pair.to_server
        .expect(r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"ms":100}}"#)
        .await;
    pair.server.probe.wait_started(0).await;
    drop(init);
    pair.to_client
        .expect(r#"{"jsonrpc":"2.0","id":0,"result":{"capabilities":{}}}"#)
        .await;

    // A timeout does not cancel it either: with no cancel sent there is nothing to wait for, in any dialect.
    let start = Instant::now();
    let result = pair
        .client
        .peer
        .request("initialize", json!({ "ms": 100 }))
        .timeout(ms(50))
        .await;
    assert_eq!(result, Err(PeerError::TimedOut));
    assert_about(start.elapsed(), ms(50));
    pair.to_server.next().await;
    pair.to_client
        .expect(r#"{"jsonrpc":"2.0","id":1,"result":{"capabilities":{}}}"#)
        .await;
    settle().await;
    assert_eq!(pair.to_server.log().len(), 2, "{:#?}", pair.to_server.log());
    assert_eq!(
        pair.server.probe.ended(),
        vec![
            Ended::finished(0, "initialize", None),
            Ended::finished(1, "initialize", None)
        ]
    );
    assert_eq!(pair.client.peer_counts(), PeerCounts::new(2, 0, 2));
    pair.finish().await;
}

#[tokio::test(start_paused = true)]
async fn lsp_initialize_is_never_cancelled() {
    initialize_is_never_cancelled(Pair::lsp()).await;
}

#[tokio::test(start_paused = true)]
async fn acp_initialize_is_never_cancelled() {
    initialize_is_never_cancelled(Pair::acp()).await;
}

#[tokio::test(start_paused = true)]
async fn mcp_initialize_is_never_cancelled() {
    initialize_is_never_cancelled(Pair::mcp()).await;
}

#[tokio::test(start_paused = true)]
async fn acp_draft_initialize_is_never_cancelled() {
    initialize_is_never_cancelled(Pair::acp_draft()).await;
}

// ---------------------------------------------------------------------------------------------------------------
// The ACP draft: cancels only to a peer that declared `cancellation.request`.
// ---------------------------------------------------------------------------------------------------------------

const DRAFT_CANCELLED_1: &str =
    r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32800,"message":"Cancelled"}}"#;

/// This side is the ACP client (a server with a peer, the test's application sending through it); the raw
/// connection plays the agent, which declares `agent_declares` in its `initialize` result.
async fn acp_draft_client_learns_from_the_initialize_result(agent_declares: bool) {
    let probe = Probe::new();
    let (mut agent, peer) = Conn::with_peer(
        CancelStack::acp_draft(),
        &probe,
        Framing::Ndjson,
        AcpDraft::new(),
    );
    let init = peer.request(
        "initialize",
        json!({ "protocolVersion": 1, "clientCapabilities": { "cancellation": { "request": true } } }),
    );
    agent
        .expect(r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"clientCapabilities":{"cancellation":{"request":true}},"protocolVersion":1}}"#)
        .await;
    // Before `initialize` completed nothing is cancellable: no cancel, whatever the agent will declare.
    drop(peer.request("session/new", json!({})));
    agent
        .expect(r#"{"jsonrpc":"2.0","id":1,"method":"session/new","params":{}}"#)
        .await;
    agent
        .send(&format!(
            r#"{{"jsonrpc":"2.0","id":0,"result":{{"protocolVersion":1,"agentCapabilities":{{"cancellation":{{"request":{agent_declares}}}}}}}}}"#
        ))
        .await;
    let result = init.await.expect("initialized");
    assert_eq!(
        result["agentCapabilities"]["cancellation"]["request"],
        agent_declares
    );
    let session = agent.session();
    assert!(session.is_initialized());
    assert_eq!(session.peer_accepts_cancel(), agent_declares);

    let prompt = peer.request("session/prompt", json!({ "sessionId": "s" }));
    agent
        .expect(r#"{"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":"s"}}"#)
        .await;
    drop(prompt);
    if agent_declares {
        agent
            .expect(r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":2}}"#)
            .await;
    }
    // The next frame is this marker: nothing else went out in between.
    peer.notify("marker", ()).unwrap();
    agent.expect(r#"{"jsonrpc":"2.0","method":"marker"}"#).await;
    // The agent's answers arrive after their callers left.
    agent
        .send(r#"{"jsonrpc":"2.0","id":1,"result":{"sessionId":"s"}}"#)
        .await;
    agent
        .send(r#"{"jsonrpc":"2.0","id":2,"error":{"code":-32800,"message":"Cancelled"}}"#)
        .await;
    settle().await;
    let stats = peer.stats();
    assert_eq!(stats.sent, 3);
    assert_eq!(stats.cancels_sent, u64::from(agent_declares));
    assert_eq!(stats.late_replies, 2);
    assert_eq!(stats.pending, 0);
    agent.finish_quiet().await;
    assert_eq!(peer.stats().pending, 0);
}

#[tokio::test(start_paused = true)]
async fn acp_draft_the_client_sends_a_cancel_to_an_agent_that_declared_it() {
    acp_draft_client_learns_from_the_initialize_result(true).await;
}

#[tokio::test(start_paused = true)]
async fn acp_draft_the_client_never_sends_a_cancel_to_an_agent_that_did_not_declare_it() {
    acp_draft_client_learns_from_the_initialize_result(false).await;
}

/// This side is the ACP agent (a server with a peer); the raw connection plays the client, which declares
/// `client_declares` in its `initialize` params. The agent calls the client from its application and from a
/// handler, and both calls are cancelled.
async fn acp_draft_agent_learns_from_the_initialize_params(client_declares: bool) {
    let probe = Probe::new();
    let (mut client, peer) = Conn::with_peer(
        CancelStack::acp_draft(),
        &probe,
        Framing::Ndjson,
        AcpDraft::new(),
    );
    client
        .send(&format!(
            r#"{{"jsonrpc":"2.0","id":0,"method":"initialize","params":{{"protocolVersion":1,"clientCapabilities":{{"cancellation":{{"request":{client_declares}}}}}}}}}"#
        ))
        .await;
    client
        .expect(r#"{"jsonrpc":"2.0","id":0,"result":{"capabilities":{}}}"#)
        .await;
    let session = client.session();
    assert!(session.is_initialized());
    assert_eq!(session.peer_accepts_cancel(), client_declares);

    // From the application.
    drop(peer.request("fs/read_text_file", json!({ "path": "/a" })));
    client
        .expect(r#"{"jsonrpc":"2.0","id":0,"method":"fs/read_text_file","params":{"path":"/a"}}"#)
        .await;
    if client_declares {
        client
            .expect(r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":0}}"#)
            .await;
    }

    // From a handler: the client cancels the agent's request 1, whose handler waits on the client.
    client
        .send(r#"{"jsonrpc":"2.0","id":1,"method":"call","params":{"method":"session/request_permission","params":{"sessionId":"s"}}}"#)
        .await;
    client
        .expect(r#"{"jsonrpc":"2.0","id":1,"method":"session/request_permission","params":{"sessionId":"s"}}"#)
        .await;
    client
        .send(r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":1}}"#)
        .await;
    if client_declares {
        client
            .expect(r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":1}}"#)
            .await;
    }
    client.expect(DRAFT_CANCELLED_1).await;
    assert_eq!(
        probe.ended_of(1),
        Some(Ended::stopped(1, "call", Some(CancelReason::peer(None))))
    );
    // The client answers both late.
    client
        .send(r#"{"jsonrpc":"2.0","id":0,"result":{"content":""}}"#)
        .await;
    client
        .send(r#"{"jsonrpc":"2.0","id":1,"result":{"outcome":{"outcome":"cancelled"}}}"#)
        .await;
    settle().await;
    let stats = peer.stats();
    assert_eq!(stats.sent, 2);
    assert_eq!(stats.cancels_sent, if client_declares { 2 } else { 0 });
    assert_eq!(stats.late_replies, 2);
    assert_eq!(stats.pending, 0);
    assert_eq!(client.counts(), Counts::new(1, 0, 1));
    client.finish_quiet().await;
}

#[tokio::test(start_paused = true)]
async fn acp_draft_the_agent_sends_cancels_to_a_client_that_declared_them() {
    acp_draft_agent_learns_from_the_initialize_params(true).await;
}

#[tokio::test(start_paused = true)]
async fn acp_draft_the_agent_never_sends_a_cancel_to_a_client_that_did_not_declare_it() {
    acp_draft_agent_learns_from_the_initialize_params(false).await;
}

/// Both ends are servers with peers: the client declares `client_declares` in its `initialize` params, the agent
/// `agent_declares` in its result (each side's stack handles cancels only if it declared). Each side then drops a
/// call to the other: a cancel goes out only towards a side that declared.
async fn acp_draft_both_ways(client_declares: bool, agent_declares: bool) {
    let mut pair = Pair::new(
        Framing::Ndjson,
        (
            CancelStack::new(AcpDraft::new().declared(client_declares)),
            AcpDraft::new().declared(client_declares),
        ),
        (
            CancelStack::new(AcpDraft::new().declared(agent_declares)),
            AcpDraft::new().declared(agent_declares),
        ),
    );
    let init = pair
        .client
        .peer
        .request(
            "initialize",
            json!({
                "protocolVersion": 1,
                "clientCapabilities": { "cancellation": { "request": client_declares } },
                // What the agent's handler answers.
                "result": { "protocolVersion": 1, "agentCapabilities": { "cancellation": { "request": agent_declares } } },
            }),
        )
        .await;
    assert!(init.is_ok(), "{init:?}");
    pair.to_server.next().await;
    pair.to_client.next().await;
    for (side, declared) in [
        (&pair.client, agent_declares),
        (&pair.server, client_declares),
    ] {
        assert!(side.connection.session().is_initialized());
        assert_eq!(side.connection.session().peer_accepts_cancel(), declared);
    }

    // Client -> agent.
    let call = pair.client.peer.request("hang", ());
    pair.to_server
        .expect(r#"{"jsonrpc":"2.0","id":1,"method":"hang"}"#)
        .await;
    pair.server.probe.wait_started(1).await;
    drop(call);
    if agent_declares {
        pair.to_server
            .expect(r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":1}}"#)
            .await;
        pair.to_client.expect(DRAFT_CANCELLED_1).await;
    }
    // Agent -> client.
    let call = pair.server.peer.request("hang", ());
    pair.to_client.expect(HANG_0).await;
    pair.client.probe.wait_started(0).await;
    drop(call);
    if client_declares {
        pair.to_client
            .expect(r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":0}}"#)
            .await;
        pair.to_server
            .expect(r#"{"jsonrpc":"2.0","id":0,"error":{"code":-32800,"message":"Cancelled"}}"#)
            .await;
    }
    settle().await;
    pair.to_server.assert_quiet();
    pair.to_client.assert_quiet();
    assert_eq!(
        pair.client.peer_counts().cancels_sent,
        u64::from(agent_declares)
    );
    assert_eq!(
        pair.server.peer_counts().cancels_sent,
        u64::from(client_declares)
    );
    // A side that got no cancel keeps running the request until the connection closes.
    let expect_running = usize::from(!agent_declares) + usize::from(!client_declares);
    assert_eq!(
        pair.client.probe.running() + pair.server.probe.running(),
        expect_running
    );
    if expect_running == 0 {
        pair.finish().await;
    } else {
        pair.close().await;
        assert_eq!(pair.client.probe.running() + pair.server.probe.running(), 0);
    }
}

#[tokio::test(start_paused = true)]
async fn acp_draft_over_two_servers_the_client_declares_and_the_agent_does_not() {
    acp_draft_both_ways(true, false).await;
}

#[tokio::test(start_paused = true)]
async fn acp_draft_over_two_servers_the_agent_declares_and_the_client_does_not() {
    acp_draft_both_ways(false, true).await;
}

// ---------------------------------------------------------------------------------------------------------------
// The connection closes.
// ---------------------------------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn when_the_connection_closes_every_pending_call_fails_with_closed() {
    let mut pair = Pair::lsp();
    let token = CancellationToken::new();
    let waiting = tokio::spawn(pair.client.peer.request("hang", ()));
    let with_token = tokio::spawn(
        pair.client
            .peer
            .request("hang", ())
            .cancel_on(token.clone()),
    );
    // A timeout that has not passed when the connection closes.
    let with_timeout = tokio::spawn(pair.client.peer.request("hang", ()).timeout(ms(100)));
    let from_the_server = tokio::spawn(pair.server.peer.request("hang", ()));
    for id in 0..3 {
        pair.server.probe.wait_started(id).await;
    }
    pair.client.probe.wait_started(0).await;
    assert_eq!(pair.client.peer_counts().pending, 3);
    assert_eq!(pair.server.peer_counts().pending, 1);

    pair.cut().await;
    for call in [waiting, with_token, with_timeout, from_the_server] {
        assert_eq!(call.await.unwrap(), Err(PeerError::Closed));
    }
    // Neither the timeout nor the token sends anything for a call that already failed.
    tokio::time::sleep(ms(200)).await;
    token.cancel();
    assert_eq!(pair.client.peer_counts(), PeerCounts::new(3, 0, 0));
    assert_eq!(pair.server.peer_counts().cancels_sent, 0);
    // A call made after the close fails at once, and nothing is sent.
    let sent = pair.client.peer.stats().sent;
    assert_eq!(
        pair.client.peer.request("echo", ()).await,
        Err(PeerError::Closed)
    );
    assert_eq!(pair.client.peer.stats().sent, sent);
    assert_eq!(pair.client.peer.notify("note", ()), Err(PeerError::Closed));

    pair.client.join().await;
    pair.server.join().await;
    for side in [&pair.client, &pair.server] {
        assert_eq!(side.probe.running(), 0);
        for ended in side.probe.ended() {
            assert_eq!(ended.reason, Some(CancelReason::Disconnect), "{ended:?}");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_timed_out_call_waiting_for_its_answer_fails_with_closed_when_the_connection_closes() {
    // The server is a cooperative one that never winds down within its grace: the timed-out call waits on, until
    // the connection closes under it.
    let mut pair = Pair::new(
        Framing::ContentLength,
        (CancelStack::lsp(), Lsp),
        (CancelStack::lsp().cooperative(ms(10_000)), Lsp),
    );
    let call = tokio::spawn(pair.client.peer.request("hang", ()).timeout(ms(100)));
    pair.to_server.expect(HANG_0).await;
    pair.to_server.expect(LSP_CANCEL_0).await;
    settle().await;
    assert_eq!(pair.client.peer_counts().pending, 1, "still waiting");
    pair.cut().await;
    assert_eq!(call.await.unwrap(), Err(PeerError::Closed));
    pair.client.join().await;
    pair.server.join().await;
}

// ---------------------------------------------------------------------------------------------------------------
// The caller's own code.
// ---------------------------------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_panicking_progress_callback_leaves_the_connection_up() {
    let mut pair = Pair::mcp();
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = calls.clone();
    let call = pair.client.peer.request_with_progress(
        "progress",
        json!({ "steps": 2, "every": 10 }),
        move |_| {
            counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            panic!("the progress callback panics on purpose");
        },
    );
    // The reports reach the callback on the client's connection driver, which outlives the panics: the reply
    // still arrives over it, and so does the next call's.
    assert_eq!(call.await, Ok(json!({ "token": 0, "reports": 2 })));
    assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 2);
    assert_eq!(
        pair.client
            .peer
            .request("echo", json!({ "still": "up" }))
            .await,
        Ok(json!({ "still": "up" }))
    );
    assert_eq!(pair.client.peer_counts(), PeerCounts::new(2, 0, 0));
    pair.to_server.expect(r#"{"jsonrpc":"2.0","id":0,"method":"progress","params":{"_meta":{"progressToken":0},"every":10,"steps":2}}"#).await;
    for step in 1..=2 {
        pair.to_client.expect(&format!(
            r#"{{"jsonrpc":"2.0","method":"notifications/progress","params":{{"message":"step {step}","progress":{step},"progressToken":0,"total":2}}}}"#
        )).await;
    }
    pair.to_client
        .expect(r#"{"jsonrpc":"2.0","id":0,"result":{"reports":2,"token":0}}"#)
        .await;
    pair.to_server
        .expect(r#"{"jsonrpc":"2.0","id":1,"method":"echo","params":{"still":"up"}}"#)
        .await;
    pair.to_client
        .expect(r#"{"jsonrpc":"2.0","id":1,"result":{"still":"up"}}"#)
        .await;
    pair.finish().await;
}
