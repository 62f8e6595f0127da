//! Deadlines across hops, over real connections: a request's deadline follows the requests its handler makes
//! through its [`Peer`](tower_cancel::Peer). Each call stops at its parent's deadline at the latest, and carries the
//! time left in `params._meta.<field>` (the field the next hop's `TimeoutLayer::from_meta` reads), so the next
//! hop's own timeout layer applies the earlier of it and its own limit. Modelled on tonic's timeout tests (the
//! server's timeout, the client's timeout, the shorter wins), over three hops: the client's request A reaches the
//! server, whose handler calls the client (B), whose handler calls the server (C), as in the cascade tests.
//!
//! Ids: A is the client's id 0, B the server's id 0, C the client's id 1.

use serde_json::{json, Value};
use tests::{
    ms,
    pair::{settle, Pair, PeerCounts, Tap},
    Ended,
};
use tokio::time::Instant;
use tower_cancel::{
    dialect::{Acp, Lsp, Mcp},
    timeout::{TimeoutLayer, DEADLINE_FIELD},
    CancelReason, CancelStack, ErrorObject, PeerError,
};
use tower_cancel_io::Framing;

/// The dialects the hops speak (the same on both sides of the pair).
#[derive(Clone, Copy, Debug)]
enum Proto {
    Lsp,
    Acp,
    Mcp,
}

impl Proto {
    /// Two sides speaking the dialect, each with its own timeout layer.
    fn pair(self, client: TimeoutLayer, server: TimeoutLayer) -> Pair {
        match self {
            Proto::Lsp => Pair::new(
                Framing::ContentLength,
                (CancelStack::lsp().timeouts(client), Lsp),
                (CancelStack::lsp().timeouts(server), Lsp),
            ),
            Proto::Acp => Pair::new(
                Framing::Ndjson,
                (CancelStack::acp().timeouts(client), Acp),
                (CancelStack::acp().timeouts(server), Acp),
            ),
            Proto::Mcp => Pair::new(
                Framing::Ndjson,
                (CancelStack::mcp().timeouts(client), Mcp),
                (CancelStack::mcp().timeouts(server), Mcp),
            ),
        }
    }

    /// The cancel a call that timed out sends for request `id`.
    fn timeout_cancel(self, id: i64) -> String {
        match self {
            Proto::Lsp => {
                format!(r#"{{"jsonrpc":"2.0","method":"$/cancelRequest","params":{{"id":{id}}}}}"#)
            }
            Proto::Acp => format!(
                r#"{{"jsonrpc":"2.0","method":"$/cancel_request","params":{{"requestId":{id}}}}}"#
            ),
            Proto::Mcp => format!(
                r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":{id},"reason":"timed out"}}}}"#
            ),
        }
    }

    /// The error a request that timed out is answered with: LSP and ACP -32800, MCP -32001 (MCP answers a request
    /// cancelled because its parent was with -32603, and one the peer cancelled with nothing: this reply proves
    /// the hop timed out on its own deadline).
    fn timed_out(self) -> ErrorObject {
        match self {
            Proto::Lsp | Proto::Acp => ErrorObject::new(-32800, "Request cancelled"),
            Proto::Mcp => ErrorObject::new(-32001, "Request timed out"),
        }
    }

    fn timed_out_reply(self, id: i64) -> String {
        json!({ "jsonrpc": "2.0", "id": id, "error": self.timed_out() }).to_string()
    }

    /// Whether a call keeps waiting for the peer's answer after its cancel (LSP, ACP): its handler is then
    /// stopped by its own request's timeout; in MCP the call ends at once and its handler returns.
    fn waits_after_cancel(self) -> bool {
        !matches!(self, Proto::Mcp)
    }

    /// How the handler of a request that timed out while its call was out ended.
    fn caller_ended(self, id: i64, method: &str) -> Ended {
        if self.waits_after_cancel() {
            Ended::stopped(id, method, Some(CancelReason::Timeout))
        } else {
            Ended::finished(id, method, Some(CancelReason::Timeout))
        }
    }

    /// The outcome recorded for a call whose parent's deadline passed: the call's future was dropped with its
    /// handler (LSP, ACP: `None`), or it ended with `TimedOut` (MCP).
    fn capped_outcome(self) -> Option<Result<Value, PeerError>> {
        (!self.waits_after_cancel()).then_some(Err(PeerError::TimedOut))
    }
}

/// Take the next frames of `tap`, asserting each (but for the order of objects' keys).
async fn expect_frames(tap: &mut Tap, frames: &[String]) {
    for frame in frames {
        tap.expect(frame).await;
    }
}

fn request(id: i64, method: &str, params: Value) -> String {
    json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }).to_string()
}

/// A: the client asks the server to call the client (B), whose handler calls the server's `hang` (C).
fn three_hops(meta: Value) -> Value {
    let mut params = json!({ "method": "call", "params": { "method": "hang" } });
    if !meta.is_null() {
        params["_meta"] = meta;
    }
    params
}

/// The outermost deadline passes: each hop carries the time left, all three handlers stop at that moment, each
/// hop answers its own protocol's timeout reply, and nothing is left in flight. The middle hop's own limit (10 s)
/// is longer than the time the call carries (tonic's `picks_client_timeout_if_thats_sorter`).
async fn the_outermost_deadline_stops_every_hop(proto: Proto) {
    let mut pair = proto.pair(
        TimeoutLayer::new(ms(10_000)).from_meta(DEADLINE_FIELD),
        TimeoutLayer::none().from_meta(DEADLINE_FIELD),
    );
    let t0 = Instant::now();
    let a = pair
        .client
        .peer
        .request("call", three_hops(json!({ "timeoutMs": 300 })));
    pair.server.probe.wait_started(1).await;
    assert_eq!(pair.server.probe.deadline_of(0), Some(t0 + ms(300)), "A");
    assert_eq!(pair.client.probe.deadline_of(0), Some(t0 + ms(300)), "B");
    assert_eq!(pair.server.probe.deadline_of(1), Some(t0 + ms(300)), "C");

    assert_eq!(a.await, Err(PeerError::Rejected(proto.timed_out())));
    assert_eq!(t0.elapsed(), ms(300), "A's answer came at its deadline");
    expect_frames(
        &mut pair.to_server,
        &[
            request(0, "call", three_hops(json!({ "timeoutMs": 300 }))),
            request(1, "hang", json!({ "_meta": { "timeoutMs": 300 } })),
            proto.timeout_cancel(1),  // C, from the client's handler for B
            proto.timed_out_reply(0), // B's answer
        ],
    )
    .await;
    expect_frames(
        &mut pair.to_client,
        &[
            request(
                0,
                "call",
                json!({ "method": "hang", "_meta": { "timeoutMs": 300 } }),
            ),
            proto.timeout_cancel(0),  // B, from the server's handler for A
            proto.timed_out_reply(0), // A's answer
            proto.timed_out_reply(1), // C's answer
        ],
    )
    .await;
    settle().await;
    assert_eq!(
        pair.server.probe.ended(),
        vec![
            proto.caller_ended(0, "call"),
            Ended::stopped(1, "hang", Some(CancelReason::Timeout)),
        ]
    );
    assert_eq!(
        pair.client.probe.ended(),
        vec![proto.caller_ended(0, "call")]
    );
    let outcome =
        |nested: Vec<tests::Nested>| nested.into_iter().map(|n| n.outcome).collect::<Vec<_>>();
    assert_eq!(
        outcome(pair.server.probe.nested()),
        vec![proto.capped_outcome()]
    );
    assert_eq!(
        outcome(pair.client.probe.nested()),
        vec![proto.capped_outcome()]
    );
    // Each call stopped waiting at the deadline: the answer to its cancel came late (its timeout reply).
    assert_eq!(pair.client.peer_counts(), PeerCounts::new(2, 1, 1));
    assert_eq!(pair.server.peer_counts(), PeerCounts::new(1, 1, 1));
    pair.finish().await;
}

#[tokio::test(start_paused = true)]
async fn lsp_the_outermost_deadline_stops_every_hop() {
    the_outermost_deadline_stops_every_hop(Proto::Lsp).await;
}

#[tokio::test(start_paused = true)]
async fn acp_the_outermost_deadline_stops_every_hop() {
    the_outermost_deadline_stops_every_hop(Proto::Acp).await;
}

#[tokio::test(start_paused = true)]
async fn mcp_the_outermost_deadline_stops_every_hop() {
    the_outermost_deadline_stops_every_hop(Proto::Mcp).await;
}

/// The middle hop's own limit (100 ms) is shorter than the time the call carries (300 ms): it keeps it, and the
/// hop after it gets what is left of it (tonic's `picks_server_timeout_if_thats_sorter`). The outermost request
/// outlives it, and its handler answers with B's timeout reply.
async fn a_hop_whose_own_timeout_is_shorter_keeps_it(proto: Proto) {
    let mut pair = proto.pair(
        TimeoutLayer::new(ms(100)).from_meta(DEADLINE_FIELD),
        TimeoutLayer::none().from_meta(DEADLINE_FIELD),
    );
    let t0 = Instant::now();
    let a = pair
        .client
        .peer
        .request("call", three_hops(json!({ "timeoutMs": 300 })));
    pair.server.probe.wait_started(1).await;
    assert_eq!(pair.server.probe.deadline_of(0), Some(t0 + ms(300)), "A");
    assert_eq!(pair.client.probe.deadline_of(0), Some(t0 + ms(100)), "B");
    assert_eq!(pair.server.probe.deadline_of(1), Some(t0 + ms(100)), "C");

    assert_eq!(
        a.await,
        Ok(json!({ "nested": 0, "error": proto.timed_out() })),
        "A's handler got B's timeout reply"
    );
    assert_eq!(t0.elapsed(), ms(100));
    expect_frames(
        &mut pair.to_server,
        &[
            request(0, "call", three_hops(json!({ "timeoutMs": 300 }))),
            request(1, "hang", json!({ "_meta": { "timeoutMs": 100 } })),
            proto.timeout_cancel(1),
            proto.timed_out_reply(0),
        ],
    )
    .await;
    let a_reply =
        json!({ "jsonrpc": "2.0", "id": 0, "result": { "nested": 0, "error": proto.timed_out() } });
    expect_frames(
        &mut pair.to_client,
        &[
            request(
                0,
                "call",
                json!({ "method": "hang", "_meta": { "timeoutMs": 300 } }),
            ),
            proto.timed_out_reply(1),
            a_reply.to_string(),
        ],
    )
    .await;
    settle().await;
    assert_eq!(
        pair.server.probe.ended(),
        vec![
            Ended::stopped(1, "hang", Some(CancelReason::Timeout)),
            Ended::finished(0, "call", None),
        ]
    );
    assert_eq!(
        pair.client.probe.ended(),
        vec![proto.caller_ended(0, "call")]
    );
    pair.finish().await;
}

#[tokio::test(start_paused = true)]
async fn lsp_a_hop_whose_own_timeout_is_shorter_keeps_it() {
    a_hop_whose_own_timeout_is_shorter_keeps_it(Proto::Lsp).await;
}

#[tokio::test(start_paused = true)]
async fn mcp_a_hop_whose_own_timeout_is_shorter_keeps_it() {
    a_hop_whose_own_timeout_is_shorter_keeps_it(Proto::Mcp).await;
}

/// The first hop's deadline is the server's own limit (tonic's `cancelation_on_timeout` the other way round: no
/// timeout asked for): its calls carry it in the crate's field, `timeoutMs`, which the next hop reads.
#[tokio::test(start_paused = true)]
async fn a_servers_own_timeout_goes_out_in_the_default_field() {
    let mut pair = Proto::Lsp.pair(
        TimeoutLayer::none().from_meta(DEADLINE_FIELD),
        TimeoutLayer::new(ms(300)),
    );
    let t0 = Instant::now();
    let a = pair.client.peer.request("call", three_hops(Value::Null));
    assert_eq!(a.await, Err(PeerError::Rejected(Proto::Lsp.timed_out())));
    assert_eq!(t0.elapsed(), ms(300));
    assert_eq!(pair.client.probe.deadline_of(0), Some(t0 + ms(300)), "B");
    assert_eq!(
        pair.to_client.next().await,
        request(
            0,
            "call",
            json!({ "method": "hang", "_meta": { "timeoutMs": 300 } })
        )
    );
    pair.to_server.next().await;
    assert_eq!(
        pair.to_server.next().await,
        request(1, "hang", json!({ "_meta": { "timeoutMs": 300 } }))
    );
    settle().await;
    assert_eq!(
        pair.client.probe.ended(),
        vec![Proto::Lsp.caller_ended(0, "call")]
    );
    pair.assert_idle();
    pair.close().await;
}

/// A hop whose layer reads another field writes its calls' time in that field: the one the next hop, configured
/// alike, reads.
#[tokio::test(start_paused = true)]
async fn a_hop_writes_the_field_its_layer_reads() {
    let mut pair = Proto::Lsp.pair(
        TimeoutLayer::none().from_meta("budgetMs"),
        TimeoutLayer::new(ms(10_000)).from_meta("budgetMs"),
    );
    let t0 = Instant::now();
    let a = pair
        .client
        .peer
        .request("call", three_hops(json!({ "budgetMs": 250 })));
    assert_eq!(a.await, Err(PeerError::Rejected(Proto::Lsp.timed_out())));
    assert_eq!(t0.elapsed(), ms(250));
    assert_eq!(
        pair.to_client.next().await,
        request(
            0,
            "call",
            json!({ "method": "hang", "_meta": { "budgetMs": 250 } })
        )
    );
    pair.to_server.next().await;
    assert_eq!(
        pair.to_server.next().await,
        request(1, "hang", json!({ "_meta": { "budgetMs": 250 } }))
    );
    settle().await;
    assert_eq!(
        pair.server.probe.ended_of(1),
        Some(Ended::stopped(1, "hang", Some(CancelReason::Timeout)))
    );
    pair.assert_idle();
    pair.close().await;
}

/// A call inside a handler asks for a longer timeout than its request has left, or none: it still stops at the
/// request's deadline, timed out (not cancelled as its parent's child), and the next hop is told the request's
/// time, not the call's.
async fn a_long_call_timeout_does_not_extend_the_deadline(proto: Proto, call: Value) {
    let mut pair = proto.pair(
        TimeoutLayer::none().from_meta(DEADLINE_FIELD),
        TimeoutLayer::none().from_meta(DEADLINE_FIELD),
    );
    let t0 = Instant::now();
    let mut params = json!({ "method": "hang", "_meta": { "timeoutMs": 300 } });
    for (key, value) in call.as_object().expect("options") {
        params[key] = value.clone();
    }
    let a = pair.client.peer.request("call", params.clone());
    assert_eq!(a.await, Err(PeerError::Rejected(proto.timed_out())));
    assert_eq!(t0.elapsed(), ms(300));
    expect_frames(
        &mut pair.to_server,
        &[request(0, "call", params), proto.timed_out_reply(0)],
    )
    .await;
    expect_frames(
        &mut pair.to_client,
        &[
            request(0, "hang", json!({ "_meta": { "timeoutMs": 300 } })),
            proto.timeout_cancel(0),
            proto.timed_out_reply(0),
        ],
    )
    .await;
    settle().await;
    let nested = pair.server.probe.nested();
    assert_eq!(nested.len(), 1);
    assert_eq!(nested[0].outcome, proto.capped_outcome());
    assert_eq!(
        pair.client.probe.ended(),
        vec![Ended::stopped(0, "hang", Some(CancelReason::Timeout))]
    );
    pair.finish().await;
}

#[tokio::test(start_paused = true)]
async fn mcp_a_long_call_timeout_does_not_extend_the_deadline() {
    a_long_call_timeout_does_not_extend_the_deadline(Proto::Mcp, json!({ "timeout_ms": 10_000 }))
        .await;
}

#[tokio::test(start_paused = true)]
async fn mcp_a_call_without_timeout_does_not_outlive_the_deadline() {
    a_long_call_timeout_does_not_extend_the_deadline(Proto::Mcp, json!({ "no_timeout": true }))
        .await;
}

#[tokio::test(start_paused = true)]
async fn lsp_a_long_call_timeout_does_not_extend_the_deadline() {
    a_long_call_timeout_does_not_extend_the_deadline(Proto::Lsp, json!({ "timeout_ms": 10_000 }))
        .await;
}

/// A request with no time left: its handler's call is never sent (the next hop would only start a handler to
/// time it out), it fails with `TimedOut`, and the request is answered with its timeout reply.
#[tokio::test(start_paused = true)]
async fn a_call_with_no_time_left_is_not_sent() {
    let mut pair = Proto::Mcp.pair(
        TimeoutLayer::none().from_meta(DEADLINE_FIELD),
        TimeoutLayer::none().from_meta(DEADLINE_FIELD),
    );
    let t0 = Instant::now();
    let params = json!({ "method": "hang", "_meta": { "timeoutMs": 0 } });
    let a = pair.client.peer.request("call", params.clone());
    assert_eq!(a.await, Err(PeerError::Rejected(Proto::Mcp.timed_out())));
    assert_eq!(t0.elapsed(), ms(0));
    pair.to_server.expect(&request(0, "call", params)).await;
    pair.to_client.expect(&Proto::Mcp.timed_out_reply(0)).await;
    settle().await;
    let nested = pair.server.probe.nested();
    assert_eq!(nested[0].outcome, Some(Err(PeerError::TimedOut)));
    assert_eq!(pair.server.peer_counts(), PeerCounts::new(0, 0, 0));
    assert_eq!(
        pair.server.probe.ended(),
        vec![Ended::finished(0, "call", Some(CancelReason::Timeout))]
    );
    pair.finish().await;
}
