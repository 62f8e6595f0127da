//! The Rust agent against the Rust app over a real WebSocket: many calls, random cancels and random timeouts,
//! every call one result and every cancel one acknowledgment that agrees with it; the tables empty at the end.

#[path = "support/abp.rs"]
// The raw peer of the support module is for the app's own tests; this one speaks through the agent.
#[allow(dead_code)]
mod support;

use std::time::Duration;

use serde_json::json;
use tokio_util::sync::CancellationToken;
use tower_cancel_http::abp::{wire::AgentInfo, Agent};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_calls_with_random_cancels_and_timeouts_each_end_once_and_agree() {
    let app = support::serve(None).await;
    let info = AgentInfo {
        name: "race".into(),
        version: "0".into(),
    };
    let (agent, _) = Agent::connect(&app.url, info).await.unwrap();
    let agent = agent.with_grace(Duration::from_secs(10));
    // A small deterministic generator: the schedule is the same on every run, the interleavings are not.
    let mut seed: u64 = 0x5eed;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let mut calls = Vec::new();
    for n in 0..300u64 {
        let ms = next(20);
        let token = CancellationToken::new();
        let mut call = agent
            .call("sleep", json!({ "ms": ms }))
            .call_id(format!("r{n}"))
            .cancel_on(token.clone());
        if next(4) == 0 {
            call = call.timeout(Duration::from_millis(next(20) + 1));
        }
        let cancel_after = (next(2) == 0).then(|| Duration::from_millis(next(20)));
        calls.push(tokio::spawn(async move {
            if let Some(after) = cancel_after {
                tokio::spawn(async move {
                    tokio::time::sleep(after).await;
                    token.cancel();
                });
            }
            call.await
        }));
    }
    let (mut completed, mut cancelled, mut acknowledged) = (0u64, 0u64, 0u64);
    for call in calls {
        let outcome = call.await.unwrap().expect("every call gets its result");
        let result = &outcome.result;
        if result.success {
            completed += 1;
        } else {
            assert!(
                result.is_cancelled(),
                "only cancels and timeouts fail a sleep: {result:?}"
            );
            let code = result.error.as_ref().unwrap().code.as_str();
            assert!(code == "CANCELLED" || code == "TIMEOUT", "{code}");
            cancelled += 1;
        }
        if let Some(ack) = &outcome.cancel {
            acknowledged += 1;
            assert_eq!(ack.call_id, outcome.call_id);
            if ack.cancelled {
                assert!(
                    result.is_cancelled(),
                    "an ack that says cancelled, yet {result:?}"
                );
            } else {
                // The call had ended first: by completing, or by its timeout (which would have said cancelled:true).
                assert!(result.success, "{ack:?} with {result:?}");
                assert_eq!(ack.reason.as_deref(), Some("Operation already completed"));
            }
        }
    }
    assert_eq!(completed + cancelled, 300);
    assert!(
        acknowledged > 0 && cancelled > 0 && completed > 0,
        "{completed} {cancelled} {acknowledged}"
    );
    assert!(
        app.counts.started() >= completed,
        "every success ran its handler"
    );
    assert!(
        app.counts.stopped() <= cancelled,
        "a handler stopped only for a cancelled call"
    );
    assert_eq!(agent.pending(), 0, "the agent waits for nothing");
    agent.shutdown().await.unwrap();
    app.settled().await;
    assert_eq!(app.app.stats().in_flight, 0);
}
