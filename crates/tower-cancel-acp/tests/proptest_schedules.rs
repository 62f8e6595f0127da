//! Random schedules of calls, client cancels, server timeouts and a close, on a paused clock, over a real NDJSON
//! connection to an ACP SDK agent under the stack: each call gets the one right reply (its result, or -32800 when
//! the client cancelled it, it timed out or the connection closed first), every handler that did not finish saw its
//! `RequestCancellation` fire, and every table is empty at the end.

mod support;

use std::{collections::HashMap, time::Duration};

use proptest::prelude::*;
use serde_json::{json, Value};
use support::{assert_empty, cancelled, Fate, TestClient};
use tower_cancel::TimeoutLayer;

/// The server's timeout. Times are kept apart so that no two events of a schedule fall on the same instant: the
/// client's waits are multiples of 10 ms, a call's work takes 10k + 3 ms, and the timeout ends 7 ms past a
/// multiple of 10.
const TIMEOUT_MS: u64 = 57;

#[derive(Clone, Debug)]
enum Op {
    /// A call whose handler works `10 * k + 3` ms.
    Call(u64),
    /// The client cancels the `n`-th call so far (modulo their number).
    Cancel(usize),
    /// The client waits `10 * k` ms.
    Wait(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (1..=9u64).prop_map(Op::Call),
        2 => any::<usize>().prop_map(Op::Cancel),
        2 => (1..=8u64).prop_map(Op::Wait),
    ]
}

struct Sent {
    at: u64,
    work: u64,
    cancelled_at: Option<u64>,
}

impl Sent {
    /// Whether the call finishes, for a connection closed at `closed_at`: before its cancel, its timeout and the
    /// close. Otherwise ACP answers -32800 whichever ended it.
    fn finishes(&self, closed_at: u64) -> bool {
        let done = self.at + self.work;
        self.work < TIMEOUT_MS && self.cancelled_at.is_none_or(|c| done < c) && done < closed_at
    }
}

async fn run(ops: Vec<Op>, wait_before_close: bool) {
    let mut client =
        TestClient::connect_with(TimeoutLayer::new(Duration::from_millis(TIMEOUT_MS))).await;
    let mut now = 0;
    let mut sent: Vec<Sent> = Vec::new();
    for op in ops {
        match op {
            Op::Call(k) => {
                let id = sent.len() as u64;
                let work = 10 * k + 3;
                client
                    .call(json!(id), "_test/work", json!({ "ms": work, "tag": id }))
                    .await;
                sent.push(Sent {
                    at: now,
                    work,
                    cancelled_at: None,
                });
            }
            Op::Cancel(n) if !sent.is_empty() => {
                let id = n % sent.len();
                if sent[id].cancelled_at.is_none() {
                    sent[id].cancelled_at = Some(now);
                }
                client.cancel(json!(id)).await;
            }
            Op::Cancel(_) => {}
            Op::Wait(k) => {
                // The clock moves only once every task is idle: what the last messages started has happened.
                tokio::time::sleep(Duration::from_millis(10 * k)).await;
                now += 10 * k;
            }
        }
    }
    if wait_before_close {
        tokio::time::sleep(Duration::from_millis(1000)).await;
        now += 1000;
    } else {
        // Let what was sent arrive (no time passes).
        for _ in 0..64 {
            tokio::task::yield_now().await;
        }
    }
    let (messages, probe, acp, registry) = client.close().await;

    let mut replies: HashMap<u64, Vec<Value>> = HashMap::new();
    for message in messages {
        let id = message["id"]
            .as_u64()
            .unwrap_or_else(|| panic!("only replies: {message}"));
        replies.entry(id).or_default().push(message);
    }
    for (id, call) in sent.iter().enumerate() {
        let id = id as u64;
        let got = replies.remove(&id).unwrap_or_default();
        let finishes = call.finishes(now);
        let expected = if finishes {
            json!({"jsonrpc": "2.0", "id": id, "result": { "done": id }})
        } else {
            cancelled(json!(id))
        };
        assert_eq!(got, vec![expected], "call {id}: exactly one reply");
        let fate = probe.fate(id);
        if finishes {
            assert_eq!(fate, Some(Fate::Finished), "call {id}");
        } else {
            // Stopped, or never started (cancelled before the bridge handed it to the SDK).
            assert!(
                matches!(fate, Some(Fate::Stopped) | None),
                "call {id}: handler {fate:?}"
            );
        }
    }
    assert!(replies.is_empty(), "replies to ids never sent: {replies:?}");
    assert_empty(&acp, &registry);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn one_right_reply_handlers_stopped_tables_empty(
        ops in proptest::collection::vec(op(), 1..40),
        wait_before_close in any::<bool>(),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        runtime.block_on(run(ops, wait_before_close));
    }
}
