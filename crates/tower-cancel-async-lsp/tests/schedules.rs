//! Random schedules over a real connection: requests (some asking the client a nested question), the client's
//! cancels and answers, time passing, server timeouts, and an end by close or by draining. Each request gets one
//! right reply (none is allowed only when the connection closed under it), every handler stops or finishes, a
//! nested request is cancelled on the wire exactly when its handler was stopped while it waited, and the
//! adapter's tables and the registry end empty.

mod common;

use std::{collections::HashMap, time::Duration};

use common::{cancelled, settle, start};
use proptest::prelude::*;
use serde_json::{json, Value};
use tower_cancel::CancelStack;
use tower_cancel_async_lsp::AdapterStats;

#[derive(Clone, Debug)]
enum Op {
    Sleep(u64),
    Ask,
    Cancel(usize),
    Answer(usize),
    Advance(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0_u64..3000).prop_map(Op::Sleep),
        Just(Op::Ask),
        (0_usize..16).prop_map(Op::Cancel),
        (0_usize..16).prop_map(Op::Answer),
        (0_u64..2000).prop_map(Op::Advance),
    ]
}

#[derive(Debug, Default)]
struct Seen {
    replies: HashMap<i64, Vec<Value>>,
    /// Outer request id -> the id of its nested question.
    questions: HashMap<i64, Value>,
    /// Nested ids the server cancelled.
    nested_cancels: Vec<Value>,
}

impl Seen {
    fn read(&mut self, client: &mut common::Client) {
        while let Ok(message) = client.received.try_recv() {
            match message.get("method").and_then(Value::as_str) {
                Some("test/question") => {
                    let outer = message["params"]["q"].as_i64().unwrap();
                    let fresh = self
                        .questions
                        .insert(outer, message["id"].clone())
                        .is_none();
                    assert!(fresh, "one question per ask: {message}");
                }
                Some("$/cancelRequest") => {
                    self.nested_cancels.push(message["params"]["id"].clone())
                }
                Some(other) => panic!("unexpected {other}: {message}"),
                None => {
                    let id = message["id"].as_i64().unwrap();
                    self.replies.entry(id).or_default().push(message);
                }
            }
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Sleep(u64),
    Ask,
}

fn run(ops: Vec<Op>, timeout_ms: Option<u64>, close: bool) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    runtime.block_on(async move {
        let stack = match timeout_ms {
            Some(ms) => CancelStack::lsp().timeout(Duration::from_millis(ms)),
            None => CancelStack::lsp(),
        };
        let mut h = start(stack);
        let mut requests: Vec<(i64, Kind)> = Vec::new();
        let mut cancelled_by_client: Vec<i64> = Vec::new();
        let mut answered: Vec<i64> = Vec::new();
        let mut seen = Seen::default();
        for op in ops {
            match op {
                Op::Sleep(ms) => {
                    let id = requests.len() as i64;
                    requests.push((id, Kind::Sleep(ms)));
                    h.client
                        .request(id, "test/sleep", json!({ "ms": ms }))
                        .await;
                }
                Op::Ask => {
                    let id = requests.len() as i64;
                    requests.push((id, Kind::Ask));
                    h.client.request(id, "test/ask", json!({ "q": id })).await;
                }
                Op::Cancel(i) if !requests.is_empty() => {
                    let id = requests[i % requests.len()].0;
                    cancelled_by_client.push(id);
                    h.client.cancel(id).await;
                }
                Op::Answer(i) if !requests.is_empty() => {
                    let outer = requests[i % requests.len()].0;
                    // Only while the asking handler still waits: `answered` lists the questions answered in time.
                    let waiting = !seen.replies.contains_key(&outer) && !answered.contains(&outer);
                    if let (true, Some(nested)) = (waiting, seen.questions.get(&outer).cloned()) {
                        answered.push(outer);
                        h.client
                            .send(json!({ "jsonrpc": "2.0", "id": nested, "result": outer }))
                            .await;
                    }
                }
                Op::Cancel(_) | Op::Answer(_) => {}
                Op::Advance(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
            }
            settle().await;
            seen.read(&mut h.client);
        }

        if close {
            h.client.close().await;
            h.served.await.unwrap().unwrap();
        } else {
            // Drain: answer every question still unanswered, let every timer run out.
            for _ in 0..3 {
                settle().await;
                seen.read(&mut h.client);
                for (outer, nested) in seen.questions.clone() {
                    if !answered.contains(&outer) && !seen.replies.contains_key(&outer) {
                        answered.push(outer);
                        h.client
                            .send(json!({ "jsonrpc": "2.0", "id": nested, "result": outer }))
                            .await;
                    }
                }
                tokio::time::sleep(Duration::from_secs(3600)).await;
            }
        }
        settle().await;
        seen.read(&mut h.client);

        for &(id, kind) in &requests {
            let replies = seen.replies.get(&id).cloned().unwrap_or_default();
            assert!(replies.len() <= 1, "id {id}: {replies:?}");
            let Some(reply) = replies.first() else {
                assert!(close, "id {id} got no reply");
                continue;
            };
            let interrupted = cancelled_by_client.contains(&id) || timeout_ms.is_some() || close;
            if *reply == cancelled(id) {
                assert!(interrupted, "id {id} cancelled for no reason");
                // A nested question it left waiting was cancelled on the wire (unless the connection closed: the
                // connection's peer is closed with it, and sends nothing more).
                if let Some(nested) = seen.questions.get(&id) {
                    if !answered.contains(&id) && !close {
                        assert!(
                            seen.nested_cancels.contains(nested),
                            "id {id}: nested {nested} not cancelled"
                        );
                    }
                }
                continue;
            }
            let expected = match kind {
                Kind::Sleep(ms) => json!({ "slept": ms }),
                Kind::Ask => json!({ "answer": id }),
            };
            assert_eq!(reply["result"], expected, "id {id}: {reply}");
            if let Some(nested) = seen.questions.get(&id) {
                assert!(
                    !seen.nested_cancels.contains(nested),
                    "id {id} finished, yet its question was cancelled"
                );
            }
        }
        let counters = &h.counters;
        assert_eq!(counters.started(), counters.finished() + counters.stopped());
        assert!(h.registry.is_empty(), "registry: {}", h.registry.len());
        assert_eq!(h.watch.stats(), AdapterStats::default());
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
