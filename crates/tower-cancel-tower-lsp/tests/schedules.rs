//! Random schedules over a real connection: requests (some asking the client a nested question, some giving up on
//! it after a while), the client's cancels (before, during and after their request) and answers, time passing,
//! server timeouts, and an end by close or by draining. Each request gets one right reply (none is allowed only
//! when the connection closed under it), every handler that began finished or was stopped, a nested question is
//! cancelled on the wire exactly when its handler ended while it waited, the registry and the adapter's waiters end
//! empty, and tower-lsp's own table too: after a drained schedule every id is used again, and none is refused as
//! still running (-32600).

mod common;

use std::{
    collections::{HashMap, HashSet},
    time::Duration,
};

use common::{cancelled, settle, Peer};
use proptest::prelude::*;
use serde_json::{json, Value};
use tokio::sync::mpsc::UnboundedReceiver;
use tower_cancel::TimeoutLayer;

#[derive(Clone, Debug)]
enum Op {
    /// `test/sleep` for this many ms.
    Sleep(u64),
    /// `test/ask`: waits for the client's answer.
    Ask,
    /// `test/askbriefly`: gives up on the client's answer after this many ms.
    AskBriefly(u64),
    /// The client cancels the request at this index (modulo), whatever its state.
    Cancel(usize),
    /// The client cancels the next request before sending it.
    CancelNext,
    /// The client answers the question of the request at this index (modulo), if it still waits.
    Answer(usize),
    Advance(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0_u64..3000).prop_map(Op::Sleep),
        Just(Op::Ask),
        (0_u64..3000).prop_map(Op::AskBriefly),
        (0_usize..16).prop_map(Op::Cancel),
        Just(Op::CancelNext),
        (0_usize..16).prop_map(Op::Answer),
        (0_u64..2000).prop_map(Op::Advance),
    ]
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Sleep(u64),
    Ask,
    AskBriefly,
}

/// What the client has read so far.
#[derive(Debug, Default)]
struct Seen {
    replies: HashMap<i64, Vec<Value>>,
    /// Outer request id -> the id of its nested question.
    questions: HashMap<i64, Value>,
    /// Nested ids the server cancelled.
    nested_cancels: Vec<Value>,
}

impl Seen {
    fn read(&mut self, received: &mut UnboundedReceiver<Value>) {
        while let Ok(message) = received.try_recv() {
            match message.get("method").and_then(Value::as_str) {
                Some("test/ask") => {
                    let outer = message["params"]["q"].as_i64().unwrap();
                    let fresh = self
                        .questions
                        .insert(outer, message["id"].clone())
                        .is_none();
                    assert!(fresh, "one question per ask: {message}");
                }
                Some("$/cancelRequest") => {
                    let nested = message["params"]["id"].clone();
                    assert!(
                        self.questions.values().any(|id| *id == nested),
                        "a cancel for a request never sent: {message}"
                    );
                    assert!(
                        !self.nested_cancels.contains(&nested),
                        "cancelled twice: {message}"
                    );
                    self.nested_cancels.push(nested);
                }
                Some(other) => panic!("unexpected {other}: {message}"),
                None => {
                    let id = message["id"].as_i64().unwrap();
                    self.replies.entry(id).or_default().push(message);
                }
            }
        }
    }

    fn replied(&self, id: i64) -> bool {
        self.replies.contains_key(&id)
    }
}

fn cancelled_reply(id: i64) -> Value {
    serde_json::from_str(&cancelled(&id.to_string())).unwrap()
}

fn run(ops: Vec<Op>, timeout_ms: Option<u64>, close: bool) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    runtime.block_on(async move {
        let timeouts = match timeout_ms {
            Some(ms) => TimeoutLayer::new(Duration::from_millis(ms)),
            None => TimeoutLayer::none(),
        };
        let mut peer = Peer::start(timeouts).await;
        let mut received = peer.read_in_background();
        let mut requests: Vec<(i64, Kind)> = Vec::new();
        // Ids the client sent a cancel for (before, during or after their request).
        let mut cancelled_by_client: HashSet<i64> = HashSet::new();
        // Outer ids whose question the client answered while the handler still waited.
        let mut answered: HashSet<i64> = HashSet::new();
        let mut seen = Seen::default();
        for op in ops {
            let next = requests.len() as i64;
            match op {
                Op::Sleep(ms) => {
                    requests.push((next, Kind::Sleep(ms)));
                    peer.request(json!(next), "test/sleep", json!({ "ms": ms }))
                        .await;
                }
                Op::Ask => {
                    requests.push((next, Kind::Ask));
                    peer.request(json!(next), "test/ask", json!({ "q": next }))
                        .await;
                }
                Op::AskBriefly(ms) => {
                    requests.push((next, Kind::AskBriefly));
                    let params = json!({ "q": next, "ms": ms });
                    peer.request(json!(next), "test/askbriefly", params).await;
                }
                Op::Cancel(i) if !requests.is_empty() => {
                    let id = requests[i % requests.len()].0;
                    cancelled_by_client.insert(id);
                    peer.cancel(json!(id)).await;
                }
                Op::CancelNext => {
                    cancelled_by_client.insert(next);
                    peer.cancel(json!(next)).await;
                }
                Op::Answer(i) if !requests.is_empty() => {
                    let outer = requests[i % requests.len()].0;
                    let question = seen.questions.get(&outer).cloned();
                    if let (false, false, Some(nested)) =
                        (seen.replied(outer), answered.contains(&outer), question)
                    {
                        answered.insert(outer);
                        peer.send(json!({ "jsonrpc": "2.0", "id": nested, "result": outer }))
                            .await;
                    }
                }
                Op::Cancel(_) | Op::Answer(_) => {}
                Op::Advance(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
            }
            settle().await;
            seen.read(&mut received);
        }
        // The replies read before the end: a cancelled one among them came from the client or a timeout, not
        // from the close.
        let before_end: HashSet<i64> = seen.replies.keys().copied().collect();

        if close {
            peer.close().await;
            let served = tokio::time::timeout(Duration::from_secs(60), &mut peer.served).await;
            assert!(matches!(served, Ok(Ok(Ok(())))), "{served:?}");
        } else {
            // Drain: answer every question still waiting, let every timer run out.
            for _ in 0..3 {
                settle().await;
                seen.read(&mut received);
                for (outer, nested) in seen.questions.clone() {
                    if !answered.contains(&outer) && !seen.replied(outer) {
                        answered.insert(outer);
                        peer.send(json!({ "jsonrpc": "2.0", "id": nested, "result": outer }))
                            .await;
                    }
                }
                tokio::time::sleep(Duration::from_secs(3600)).await;
            }
        }
        settle().await;
        seen.read(&mut received);

        for &(id, kind) in &requests {
            let replies = seen.replies.get(&id).cloned().unwrap_or_default();
            assert!(replies.len() <= 1, "id {id}: {replies:?}");
            let question = seen.questions.get(&id);
            let nested_cancelled = question.is_some_and(|q| seen.nested_cancels.contains(q));
            let Some(reply) = replies.first() else {
                assert!(close, "id {id} got no reply");
                continue;
            };
            if *reply == cancelled_reply(id) {
                let interrupted = cancelled_by_client.contains(&id) || timeout_ms.is_some();
                assert!(
                    interrupted || (close && !before_end.contains(&id)),
                    "id {id} cancelled for no reason"
                );
                // A question it left waiting was cancelled on the wire (unless the connection closed under it:
                // nothing more is written then).
                if question.is_some() && !answered.contains(&id) && before_end.contains(&id) {
                    assert!(nested_cancelled, "id {id}: its question was not cancelled");
                }
                continue;
            }
            match kind {
                Kind::Sleep(ms) => assert_eq!(reply["result"], json!({ "slept": ms }), "{reply}"),
                Kind::Ask => {
                    assert_eq!(reply["result"], json!(id), "{reply}");
                    assert!(
                        !nested_cancelled,
                        "id {id} was answered, yet its question was cancelled"
                    );
                }
                Kind::AskBriefly if reply["result"] == json!("gave up") => {
                    // It stopped waiting: its question, if it was still waiting, was cancelled then.
                    if question.is_some() && !answered.contains(&id) {
                        assert!(
                            nested_cancelled,
                            "id {id} gave up, its question was not cancelled"
                        );
                    }
                }
                Kind::AskBriefly => {
                    assert_eq!(reply["result"], json!(id), "{reply}");
                    assert!(
                        !nested_cancelled,
                        "id {id} was answered, yet its question was cancelled"
                    );
                }
            }
        }
        let (started, finished, stopped) = peer.counters.get();
        assert_eq!(
            started,
            finished + stopped,
            "every handler finished or was stopped"
        );
        assert!(
            peer.registry.is_empty(),
            "registry: {}",
            peer.registry.len()
        );
        assert_eq!(peer.adapter.client_requests_waiting(), 0);

        if !close {
            // tower-lsp's table: every id is free again. An id the client cancelled after its request ended may
            // still be remembered as an early cancel (the stack cannot tell it from one sent before): -32800 is
            // allowed there, never -32600 (still in tower-lsp's table).
            for &(id, _) in &requests {
                peer.request(json!(id), "test/echo", json!(id)).await;
            }
            settle().await;
            seen.replies.clear();
            seen.read(&mut received);
            for &(id, _) in &requests {
                let replies = &seen.replies[&id];
                assert_eq!(replies.len(), 1, "id {id} again: {replies:?}");
                let reply = &replies[0];
                if cancelled_by_client.contains(&id) && *reply == cancelled_reply(id) {
                    continue;
                }
                assert_eq!(
                    *reply,
                    json!({"jsonrpc":"2.0","id":id,"result":id}),
                    "id {id} again"
                );
            }
            assert!(peer.registry.is_empty());
        }
    });
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_schedules(
        ops in proptest::collection::vec(op(), 1..40),
        timeout_ms in proptest::option::of(100_u64..4000),
        close in any::<bool>(),
    ) {
        run(ops, timeout_ms, close);
    }
}
