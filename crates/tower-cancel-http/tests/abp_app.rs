//! The ABP app over a real WebSocket, driven by a raw peer: every row of the cancellation spec's edge-case table,
//! the session rules, bad envelopes, and the tables empty at the end.

#[path = "support/abp.rs"]
mod support;

use std::time::Duration;

use serde_json::json;
use support::{serve, Wire};

#[tokio::test]
async fn initialize_answers_with_the_session_and_the_capabilities() {
    let app = serve(None).await;
    let mut wire = Wire::connect(&app.url).await;
    let id = wire.send("initialize", support::initialize_payload()).await;
    let reply = wire.reply_to(&id).await;
    assert_eq!(reply["type"], "initialize-result");
    assert!(reply["timestamp"].as_u64().is_some());
    let payload = &reply["payload"];
    assert!(
        uuid_like(payload["sessionId"].as_str().unwrap()),
        "{payload}"
    );
    assert_eq!(payload["protocolVersion"], "0.1");
    assert_eq!(
        payload["app"],
        json!({"id": "test-app", "name": "Test", "version": "1.2.3"})
    );
    assert_eq!(
        payload["capabilities"],
        json!([{"name": "sleep", "available": true}, {"name": "echo", "available": true}])
    );
    assert_eq!(payload["features"]["progress"], true);
    wire.close().await;
    app.settled().await;
}

#[tokio::test]
async fn before_initialize_a_call_and_a_cancel_get_not_initialized() {
    let app = serve(None).await;
    let mut wire = Wire::connect(&app.url).await;
    let call = wire.call("c1", "sleep", json!({"ms": 1})).await;
    let reply = wire.reply_to(&call).await;
    assert_eq!(reply["type"], "capabilities/call-result");
    assert_eq!(reply["payload"]["success"], false);
    assert_eq!(reply["payload"]["error"]["code"], "NOT_INITIALIZED");
    assert_eq!(reply["payload"]["error"]["retryable"], true);
    let cancel = wire.cancel("c1").await;
    let reply = wire.reply_to(&cancel).await;
    assert_eq!(reply["type"], "capabilities/cancel-result");
    assert_eq!(reply["payload"]["callId"], "c1");
    assert_eq!(reply["payload"]["cancelled"], false);
    assert_eq!(reply["payload"]["error"]["code"], "NOT_INITIALIZED");
    assert_eq!(app.counts.started(), 0, "nothing ran");
    wire.close().await;
    app.settled().await;
}

#[tokio::test]
async fn a_cancel_during_the_operation_stops_it_and_is_acknowledged_before_its_result() {
    let app = serve(None).await;
    let mut wire = Wire::session(&app.url).await;
    let call = wire.call("long", "sleep", json!({"ms": 60_000})).await;
    wait_until(|| app.counts.started() == 1).await;
    let cancel = wire.cancel("long").await;
    let ack = wire.recv().await;
    assert_eq!(
        ack["type"], "capabilities/cancel-result",
        "the acknowledgment comes first: {ack}"
    );
    assert_eq!(ack["id"].as_str(), Some(cancel.as_str()));
    assert_eq!(ack["payload"], json!({"callId": "long", "cancelled": true}));
    let result = wire.reply_to(&call).await;
    assert_eq!(result["type"], "capabilities/call-result");
    assert_eq!(result["payload"]["success"], false);
    assert_eq!(result["payload"]["cancelled"], true);
    assert_eq!(result["payload"]["error"]["code"], "CANCELLED");
    assert_eq!(result["payload"]["error"]["retryable"], false);
    assert_eq!(app.counts.stopped(), 1, "the handler was stopped");
    wire.close().await;
    app.settled().await;
}

#[tokio::test]
async fn a_cancel_of_a_completed_call_says_already_completed_and_the_result_stands() {
    let app = serve(None).await;
    let mut wire = Wire::session(&app.url).await;
    let call = wire.call("done", "sleep", json!({"ms": 1})).await;
    let result = wire.reply_to(&call).await;
    assert_eq!(
        result["payload"],
        json!({"success": true, "data": {"slept": 1}})
    );
    for _ in 0..2 {
        let cancel = wire.cancel("done").await;
        let ack = wire.reply_to(&cancel).await;
        assert_eq!(
            ack["payload"],
            json!({"callId": "done", "cancelled": false, "reason": "Operation already completed"})
        );
    }
    wire.close().await;
    app.settled().await;
}

#[tokio::test]
async fn a_cancel_of_an_unknown_call_id_is_not_found() {
    let app = serve(None).await;
    let mut wire = Wire::session(&app.url).await;
    let cancel = wire.cancel("nobody").await;
    let ack = wire.reply_to(&cancel).await;
    assert_eq!(
        ack["payload"],
        json!({"callId": "nobody", "cancelled": false, "reason": "Operation not found"})
    );
    wire.close().await;
    app.settled().await;
}

#[tokio::test]
async fn cancelling_a_cancelled_call_says_cancelled_every_time() {
    let app = serve(None).await;
    let mut wire = Wire::session(&app.url).await;
    let call = wire.call("again", "sleep", json!({"ms": 60_000})).await;
    let first = wire.cancel("again").await;
    assert_eq!(wire.reply_to(&first).await["payload"]["cancelled"], true);
    assert_eq!(wire.reply_to(&call).await["payload"]["cancelled"], true);
    // While the result is on its way and after: the same answer, every time.
    for _ in 0..3 {
        let cancel = wire.cancel("again").await;
        assert_eq!(
            wire.reply_to(&cancel).await["payload"],
            json!({"callId": "again", "cancelled": true})
        );
    }
    wire.close().await;
    app.settled().await;
}

#[tokio::test]
async fn a_cancel_before_its_call_is_not_found_and_the_call_then_runs() {
    // One WebSocket delivers in order: a cancel for a callId the session has not received is for no call. Its
    // answer says so, and it has no later effect.
    let app = serve(None).await;
    let mut wire = Wire::session(&app.url).await;
    let cancel = wire.cancel("x").await;
    assert_eq!(
        wire.reply_to(&cancel).await["payload"],
        json!({"callId": "x", "cancelled": false, "reason": "Operation not found"})
    );
    let call = wire.call("x", "sleep", json!({"ms": 1})).await;
    let result = wire.reply_to(&call).await;
    assert_eq!(
        result["payload"],
        json!({"success": true, "data": {"slept": 1}})
    );
    assert_eq!(app.counts.started(), 1, "the call ran");
    // And it is known now: a cancel of it says it completed.
    let cancel = wire.cancel("x").await;
    assert_eq!(
        wire.reply_to(&cancel).await["payload"],
        json!({"callId": "x", "cancelled": false, "reason": "Operation already completed"})
    );
    wire.close().await;
    app.settled().await;
}

#[tokio::test]
async fn a_queued_call_cancelled_never_runs() {
    // One call at a time below the stack: the second waits for the first's slot, cancellable all along.
    let app = serve(Some(1)).await;
    let mut wire = Wire::session(&app.url).await;
    let running = wire.call("running", "sleep", json!({"ms": 60_000})).await;
    let queued = wire.call("queued", "sleep", json!({"ms": 60_000})).await;
    wait_until(|| app.counts.started() == 1).await;
    let cancel = wire.cancel("queued").await;
    let ack = wire.reply_to(&cancel).await;
    assert_eq!(
        ack["payload"],
        json!({"callId": "queued", "cancelled": true})
    );
    let result = wire.reply_to(&queued).await;
    assert_eq!(result["payload"]["cancelled"], true);
    let cancel = wire.cancel("running").await;
    assert_eq!(wire.reply_to(&cancel).await["payload"]["cancelled"], true);
    assert_eq!(wire.reply_to(&running).await["payload"]["cancelled"], true);
    assert_eq!(app.counts.started(), 1, "the queued call never ran");
    wire.close().await;
    app.settled().await;
}

#[tokio::test]
async fn a_calls_own_timeout_is_a_cancel_with_the_code_timeout() {
    let app = serve(None).await;
    let mut wire = Wire::session(&app.url).await;
    let call = wire
        .send(
            "capabilities/call",
            json!({"capability": "sleep", "params": {"ms": 60_000}, "options": {"callId": "slow", "timeout": 50}}),
        )
        .await;
    let result = wire.reply_to(&call).await;
    assert_eq!(result["payload"]["success"], false);
    assert_eq!(result["payload"]["cancelled"], true);
    assert_eq!(result["payload"]["error"]["code"], "TIMEOUT");
    assert_eq!(result["payload"]["error"]["retryable"], true);
    assert_eq!(app.counts.stopped(), 1, "the handler was stopped");
    // To the app a timeout is a cancel: a later cancel finds it cancelled.
    let cancel = wire.cancel("slow").await;
    assert_eq!(
        wire.reply_to(&cancel).await["payload"],
        json!({"callId": "slow", "cancelled": true})
    );
    wire.close().await;
    app.settled().await;
}

#[tokio::test]
async fn a_completion_racing_a_cancel_gets_answers_that_agree() {
    let app = serve(None).await;
    let mut wire = Wire::session(&app.url).await;
    let (mut won_by_cancel, mut won_by_completion) = (0, 0);
    for n in 0..200 {
        let call_id = format!("race-{n}");
        // `echo` answers on its first poll: the cancel right behind it races the completion.
        let call = wire.call(&call_id, "echo", json!({"n": n})).await;
        let cancel = wire.cancel(&call_id).await;
        let (mut ack, mut result) = (None, None);
        while ack.is_none() || result.is_none() {
            let envelope = wire.recv().await;
            if envelope["id"].as_str() == Some(cancel.as_str()) {
                assert!(
                    result.is_none() || envelope["payload"]["cancelled"] == false,
                    "the ack of a cancel that won comes first"
                );
                ack = Some(envelope);
            } else {
                assert_eq!(envelope["id"].as_str(), Some(call.as_str()));
                result = Some(envelope);
            }
        }
        let (ack, result) = (ack.unwrap(), result.unwrap());
        if ack["payload"]["cancelled"] == true {
            won_by_cancel += 1;
            assert_eq!(result["payload"]["cancelled"], true, "{result}");
        } else {
            won_by_completion += 1;
            assert_eq!(ack["payload"]["reason"], "Operation already completed");
            assert_eq!(
                result["payload"],
                json!({"success": true, "data": {"n": n}})
            );
        }
    }
    assert_eq!(won_by_cancel + won_by_completion, 200);
    wire.close().await;
    app.settled().await;
}

#[tokio::test]
async fn bad_envelopes_get_error_envelopes_and_the_session_goes_on() {
    let app = serve(None).await;
    let mut wire = Wire::session(&app.url).await;
    for text in [
        "not json",
        "[1,2]",
        r#"{"id":"x","payload":{}}"#,
        r#"{"type":7}"#,
    ] {
        wire.send_raw(text).await;
        let error = wire.recv().await;
        assert_eq!(error["type"], "error", "{text}: {error}");
        assert_eq!(error["payload"]["code"], "INVALID_MESSAGE", "{text}");
    }
    let huge = format!(
        r#"{{"type":"capabilities/call","id":"{}","payload":{{}}}}"#,
        "x".repeat(10_000)
    );
    wire.send_raw(&huge).await;
    assert_eq!(wire.recv().await["payload"]["code"], "INVALID_MESSAGE");
    wire.send_binary(b"\x00\x01").await;
    assert_eq!(wire.recv().await["payload"]["code"], "INVALID_MESSAGE");
    let unknown = wire.send("session/teleport", json!({})).await;
    let error = wire.reply_to(&unknown).await;
    assert_eq!(
        (error["type"].as_str(), error["payload"]["code"].as_str()),
        (Some("error"), Some("NOT_IMPLEMENTED"))
    );
    let again = wire.send("initialize", support::initialize_payload()).await;
    assert_eq!(
        wire.reply_to(&again).await["payload"]["code"],
        "ALREADY_INITIALIZED"
    );
    let numeric = wire
        .send(
            "capabilities/call",
            json!({"capability": "echo", "options": {"callId": 7}}),
        )
        .await;
    let refused = wire.reply_to(&numeric).await;
    assert_eq!(refused["payload"]["error"]["code"], "INVALID_PARAMS");
    let long_id = wire.call(&"c".repeat(300), "echo", json!({})).await;
    assert_eq!(
        wire.reply_to(&long_id).await["payload"]["error"]["code"],
        "INVALID_PARAMS"
    );
    let bad_cancel = wire.send("capabilities/cancel", json!(["c1"])).await;
    assert_eq!(
        wire.reply_to(&bad_cancel).await["payload"]["code"],
        "INVALID_PARAMS"
    );
    let unknown_capability = wire.call("u", "teleport", json!({})).await;
    assert_eq!(
        wire.reply_to(&unknown_capability).await["payload"]["error"]["code"],
        "UNKNOWN_CAPABILITY"
    );
    let failing = wire.call("f", "fail", json!({})).await;
    let failed = wire.reply_to(&failing).await;
    assert_eq!(
        failed["payload"]["error"],
        json!({"code": "INVALID_PARAMS", "message": "fail always fails", "retryable": false})
    );
    assert!(
        failed["payload"].get("cancelled").is_none(),
        "a failure is no cancel"
    );
    // Still a working session.
    let call = wire.call("ok", "echo", json!({"fine": true})).await;
    assert_eq!(
        wire.reply_to(&call).await["payload"]["data"],
        json!({"fine": true})
    );
    assert!(app.app.stats().bad_envelopes >= 7);
    wire.close().await;
    app.settled().await;
}

#[tokio::test]
async fn a_call_id_in_flight_is_refused_and_the_running_call_is_untouched() {
    let app = serve(None).await;
    let mut wire = Wire::session(&app.url).await;
    let first = wire.call("dup", "sleep", json!({"ms": 60_000})).await;
    let second = wire.call("dup", "sleep", json!({"ms": 1})).await;
    let refused = wire.reply_to(&second).await;
    assert_eq!(refused["payload"]["success"], false);
    assert_eq!(refused["payload"]["error"]["code"], "INVALID_PARAMS");
    let cancel = wire.cancel("dup").await;
    assert_eq!(
        wire.reply_to(&cancel).await["payload"]["cancelled"],
        true,
        "the first was still running"
    );
    assert_eq!(wire.reply_to(&first).await["payload"]["cancelled"], true);
    wire.close().await;
    app.settled().await;
}

#[tokio::test]
async fn a_call_id_at_the_top_of_the_payload_is_taken() {
    let app = serve(None).await;
    let mut wire = Wire::session(&app.url).await;
    let call = wire
        .send(
            "capabilities/call",
            json!({"capability": "sleep", "params": {"ms": 60_000}, "callId": "top"}),
        )
        .await;
    let cancel = wire.cancel("top").await;
    assert_eq!(
        wire.reply_to(&cancel).await["payload"],
        json!({"callId": "top", "cancelled": true})
    );
    assert_eq!(wire.reply_to(&call).await["payload"]["cancelled"], true);
    wire.close().await;
    app.settled().await;
}

#[tokio::test]
async fn closing_the_socket_cancels_the_sessions_calls() {
    let app = serve(None).await;
    let mut wire = Wire::session(&app.url).await;
    for n in 0..5 {
        wire.call(&format!("c{n}"), "sleep", json!({"ms": 60_000}))
            .await;
    }
    wait_until(|| app.counts.started() == 5).await;
    assert_eq!(app.app.stats().sessions, 1);
    wire.close().await;
    app.settled().await;
    assert_eq!(app.counts.stopped(), 5, "every handler stopped");
}

#[tokio::test]
async fn shutdown_cancels_the_sessions_calls_answers_them_and_closes() {
    let app = serve(None).await;
    let mut wire = Wire::session(&app.url).await;
    let call = wire.call("s", "sleep", json!({"ms": 60_000})).await;
    wait_until(|| app.counts.started() == 1).await;
    wire.send("shutdown", json!({})).await;
    let result = wire.reply_to(&call).await;
    assert_eq!(result["payload"]["cancelled"], true);
    assert!(
        wire.closed().await,
        "one session per connection: the app closes it"
    );
    app.settled().await;
}

#[tokio::test]
async fn the_apps_shutdown_answers_running_calls_cancelled() {
    let app = serve(None).await;
    let mut wire = Wire::session(&app.url).await;
    let call = wire.call("s", "sleep", json!({"ms": 60_000})).await;
    wait_until(|| app.counts.started() == 1).await;
    app.app.shutdown();
    let result = wire.reply_to(&call).await;
    assert_eq!(result["payload"]["cancelled"], true);
    assert_eq!(result["payload"]["error"]["code"], "CANCELLED");
    assert!(wire.closed().await);
    app.settled().await;
}

#[tokio::test]
async fn progress_reports_carry_the_calls_token_as_their_operation_id() {
    let app = serve(None).await;
    let mut wire = Wire::session(&app.url).await;
    let call = wire
        .send(
            "capabilities/call",
            json!({"capability": "report", "params": {"steps": 2}, "options": {"callId": "p", "progressToken": "op-7"}}),
        )
        .await;
    for step in 1..=2 {
        let report = wire.recv().await;
        assert_eq!(report["type"], "progress", "{report}");
        assert_eq!(report["payload"]["operationId"], "op-7");
        assert_eq!(report["payload"]["progress"], json!(step as f64));
        assert_eq!(report["payload"]["total"], json!(2.0));
        assert_eq!(report["payload"]["status"], "working");
    }
    let result = wire.reply_to(&call).await;
    assert_eq!(
        result["payload"]["data"],
        json!({"steps": 2, "reported": true})
    );
    let quiet = wire.call("q", "report", json!({"steps": 2})).await;
    assert_eq!(
        wire.reply_to(&quiet).await["payload"]["data"]["reported"],
        false,
        "no token, no reports"
    );
    wire.close().await;
    app.settled().await;
}

#[tokio::test]
async fn a_call_forgotten_by_the_sessions_memory_is_answered_as_unknown() {
    let app = serve(None).await;
    let mut wire = Wire::session(&app.url).await;
    // The session remembers its last 4096 finished calls: the first of 4097 is forgotten.
    let calls = tower_cancel::registry::DEFAULT_FINISHED_CAPACITY + 1;
    // In batches below the session's limit of calls running at once.
    for batch in (0..calls).collect::<Vec<_>>().chunks(512) {
        for n in batch {
            wire.call(&format!("f{n}"), "echo", json!(null)).await;
        }
        for _ in batch {
            assert_eq!(wire.recv().await["payload"]["success"], true);
        }
    }
    let forgotten = wire.cancel("f0").await;
    assert_eq!(
        wire.reply_to(&forgotten).await["payload"]["reason"],
        "Operation not found"
    );
    let remembered = wire.cancel(&format!("f{}", calls - 1)).await;
    assert_eq!(
        wire.reply_to(&remembered).await["payload"]["reason"],
        "Operation already completed"
    );
    wire.close().await;
    app.settled().await;
}

#[tokio::test]
async fn a_call_past_the_sessions_limit_is_refused_as_rate_limited() {
    let app = serve(None).await;
    let mut wire = Wire::session(&app.url).await;
    let limit = tower_cancel_http::abp::DEFAULT_MAX_CALLS_PER_SESSION;
    for n in 0..limit {
        wire.call(&format!("c{n}"), "sleep", json!({"ms": 60_000}))
            .await;
    }
    wait_until(|| app.counts.started() == limit as u64).await;
    let past = wire.call("past", "sleep", json!({"ms": 1})).await;
    let refused = wire.reply_to(&past).await;
    assert_eq!(refused["payload"]["error"]["code"], "RATE_LIMITED");
    assert_eq!(refused["payload"]["error"]["retryable"], true);
    wire.close().await;
    app.settled().await;
    assert_eq!(app.counts.stopped(), limit as u64);
}

async fn wait_until(done: impl Fn() -> bool) {
    for _ in 0..1000 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("the condition did not come true");
}

fn uuid_like(text: &str) -> bool {
    text.len() == 36 && text.chars().filter(|c| *c == '-').count() == 4
}
