//! A RAP tool server over real sockets: invocations acknowledged at once and answered at the callback URL, the
//! runtime's cancel and close stopping the handler (and no result sent), and everything the spec says about
//! untrusted input, authentication and rate limits.

mod support;

use std::time::Duration;

use http::StatusCode;
use serde_json::{json, Value};
use tower_cancel::CancelStack;
use tower_cancel_http::rap::{Rap, MAX_NOTICE_BYTES};

use support::{
    eventually,
    rap::{end, ends, result, Harness, TOKEN},
};

#[tokio::test]
async fn discovery_needs_no_token_and_lists_the_tools() {
    let h = Harness::start().await;
    let response = h
        .http
        .get(h.url("/.well-known/rap-toolset"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let toolset: Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
    assert_eq!(toolset["name"], "probe-tools");
    assert_eq!(toolset["endpoint"], h.url("/invoke"));
    let names: Vec<&str> = toolset["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["sleep", "whoami"]);
    assert_eq!(
        toolset["tools"][0]["inputSchema"]["required"],
        json!(["ms"])
    );
}

#[tokio::test]
async fn an_invocation_is_acknowledged_at_once_and_answered_at_the_callback() {
    let h = Harness::start().await;
    h.invoke("t1", "c1", 60_000).await;
    // Acknowledged while the handler sleeps: nothing has reached the callback.
    h.probe.started(1).await;
    assert!(h.alive("t1", "c1").await);
    assert!(h.callback.received().is_empty());
    h.invoke("t1", "c2", 1).await;
    let results = h.callback.results(1).await;
    assert_eq!(results, [result("t1", "c2", r#"{"slept":1}"#)]);
    assert!(
        !h.alive("t1", "c2").await,
        "a call whose result was delivered is over"
    );

    let body = json!({
        "operation": "whoami", "arguments": {}, "id": "c3", "callback_url": h.callback_url,
        "group_id": "t2", "user_id": "u9", "thread_ancestors": ["root", "t1"],
    });
    assert_eq!(h.post("/invoke", body).await.0, StatusCode::OK);
    let results = h.callback.results(2).await;
    assert_eq!(results[1]["id"], "c3");
    assert!(results[1].get("call_id").is_none(), "no call_id to echo");
    let seen: Value = serde_json::from_str(results[1]["text"].as_str().unwrap()).unwrap();
    assert_eq!(
        seen,
        json!({"thread": "t2", "call": "c3", "user": "u9", "ancestors": ["root", "t1"]})
    );
    h.cancel("t1", "c1").await;
    h.idle().await;
}

#[tokio::test]
async fn a_cancel_stops_the_handler_and_no_result_is_sent() {
    let h = Harness::start().await;
    h.invoke("t1", "c1", 60_000).await;
    h.probe.started(1).await;
    h.cancel("t1", "c1").await;
    assert_eq!(h.probe.ended(1).await, [end("c1", "peer")]);
    h.idle().await;
    assert!(!h.alive("t1", "c1").await);
    // The call's task is over: no result can come any more.
    assert!(h.callback.received().is_empty());
    let stats = h.stats();
    assert_eq!(
        (stats.accepted, stats.cancelled, stats.delivered),
        (1, 1, 0)
    );

    // Duplicates, a call already over, unknown ids: 200 and nothing else.
    h.cancel("t1", "c1").await;
    h.cancel("t1", "never").await;
    h.cancel("nowhere", "c1").await;
    h.invoke("t1", "c2", 1).await;
    h.callback.results(1).await;
    h.idle().await;
    h.cancel("t1", "c2").await;
    assert_eq!(
        h.callback.received(),
        [result("t1", "c2", r#"{"slept":1}"#)]
    );
    assert_eq!(h.stats().cancels, 5);
}

#[tokio::test]
async fn a_cancel_before_its_invocation_means_the_call_never_runs() {
    let h = Harness::start().await;
    h.cancel("t1", "c1").await;
    h.invoke("t1", "c1", 1).await;
    eventually("the call cancelled", || h.stats().cancelled == 1).await;
    h.idle().await;
    assert!(h.probe.ends().is_empty(), "the handler never started");
    assert!(h.callback.received().is_empty());
    // The early cancel was for that thread only: the same call id elsewhere runs.
    h.invoke("t2", "c1", 1).await;
    assert_eq!(
        h.callback.results(1).await,
        [result("t2", "c1", r#"{"slept":1}"#)]
    );
}

#[tokio::test]
async fn a_cancel_reaches_its_own_thread_only() {
    let h = Harness::start().await;
    h.invoke("t1", "c1", 200).await;
    h.probe.started(1).await;
    h.cancel("t2", "c1").await;
    assert_eq!(
        h.callback.results(1).await,
        [result("t1", "c1", r#"{"slept":200}"#)]
    );
    assert_eq!(ends(&h.probe), [end("c1", "completed")]);
}

#[tokio::test]
async fn close_thread_stops_its_calls_and_forgets_it() {
    let h = Harness::start().await;
    h.invoke("t1", "c1", 60_000).await;
    h.invoke("t1", "c2", 60_000).await;
    h.invoke("t2", "c1", 300).await;
    h.probe.started(3).await;
    assert_eq!(h.server.threads(), 2);
    let (status, body) = h.post("/close_thread", json!({"thread_id": "t1"})).await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, ""));
    assert_eq!(
        h.callback.results(1).await,
        [result("t2", "c1", r#"{"slept":300}"#)]
    );
    h.idle().await;
    assert_eq!(
        ends(&h.probe),
        [end("c1", "completed"), end("c1", "peer"), end("c2", "peer")]
    );
    assert_eq!(
        h.callback.received().len(),
        1,
        "no result for a closed thread's calls"
    );
    assert_eq!(h.server.threads(), 1, "t1 is forgotten; t2 lingers");
    // Closing again, or a thread never seen: 200.
    assert_eq!(
        h.post("/close_thread", json!({"thread_id": "t1"})).await.0,
        StatusCode::OK
    );
    assert_eq!(
        h.post("/close_thread", json!({"thread_id": "t9"})).await.0,
        StatusCode::OK
    );
}

#[tokio::test]
async fn a_stranger_gets_401_and_cancels_nothing() {
    let h = Harness::start().await;
    h.invoke("t1", "c1", 300).await;
    h.probe.started(1).await;
    let cancel = json!({"thread_id": "t1", "tool_call_id": "c1"}).to_string();
    for token in [None, Some("wrong")] {
        for path in [
            "/cancel_tool_call",
            "/close_thread",
            "/tool_call_status",
            "/invoke",
        ] {
            let (status, _) = h
                .post_raw(path, token, "application/json", cancel.clone())
                .await;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{path} with {token:?}");
        }
    }
    assert_eq!(
        h.callback.results(1).await,
        [result("t1", "c1", r#"{"slept":300}"#)]
    );
    assert_eq!(ends(&h.probe), [end("c1", "completed")]);
    assert_eq!(h.stats().cancels, 0, "turned away before the endpoint");
}

#[tokio::test]
async fn notices_past_the_rate_limit_get_200_and_do_nothing() {
    let h = Harness::with(
        CancelStack::new(Rap),
        |server| server.notices_per_second(Some(1)),
        vec![],
    )
    .await;
    h.invoke("t1", "c1", 300).await;
    h.probe.started(1).await;
    // A burst of two passes (for ids that do not exist), then the cancel is answered 200, empty, as the spec
    // says it MUST be, and does nothing (a runtime never retries it: a 429 would tell it nothing it could use).
    h.cancel("t1", "x1").await;
    h.cancel("t1", "x2").await;
    h.cancel("t1", "c1").await;
    assert_eq!(
        h.callback.results(1).await,
        [result("t1", "c1", r#"{"slept":300}"#)]
    );
    assert_eq!(h.stats().rate_limited, 1);
    assert_eq!(h.stats().cancels, 3, "counted as received all the same");
    // A close past it is the same.
    h.invoke("t1", "c2", 300).await;
    let body = json!({"thread_id": "t1"});
    assert_eq!(
        h.post("/close_thread", body).await,
        (StatusCode::OK, String::new())
    );
    assert_eq!(h.stats().rate_limited, 2);
    // Invocations are not limited.
    h.invoke("t1", "c3", 1).await;
    h.callback.results(3).await;
}

#[tokio::test]
async fn malformed_oversized_and_invalid_notices_get_200_and_do_nothing() {
    let h = Harness::start().await;
    h.invoke("t1", "c1", 300).await;
    h.probe.started(1).await;
    // Each body is bad for the endpoint it goes to (a close needs only a valid thread_id).
    let pad = "x".repeat(MAX_NOTICE_BYTES);
    let json = "application/json";
    let bad_for_all: Vec<(&str, String)> = vec![
        (json, "not json".into()),
        (json, "".into()),
        (json, json!(["t1", "c1"]).to_string()),
        (json, json!({"tool_call_id": "c1"}).to_string()),
        (
            json,
            json!({"thread_id": 1, "tool_call_id": "c1"}).to_string(),
        ),
        (
            "text/plain",
            json!({"thread_id": "t1", "tool_call_id": "c1"}).to_string(),
        ),
        (
            json,
            json!({"thread_id": "t1", "tool_call_id": "c1", "pad": pad}).to_string(),
        ),
        (
            json,
            json!({"thread_id": "../t1", "tool_call_id": "c1"}).to_string(),
        ),
        (
            json,
            json!({"thread_id": "t1\u{0}", "tool_call_id": "c1"}).to_string(),
        ),
        (
            json,
            json!({"thread_id": "t".repeat(10_000), "tool_call_id": "c1"}).to_string(),
        ),
    ];
    let bad_call_ids: Vec<(&str, String)> = vec![
        (json, json!({"thread_id": "t1"}).to_string()),
        (
            json,
            json!({"thread_id": "t1", "tool_call_id": "c1\u{0}"}).to_string(),
        ),
        (
            json,
            json!({"thread_id": "t1", "tool_call_id": "c1\n"}).to_string(),
        ),
        (
            json,
            json!({"thread_id": "t1", "tool_call_id": "../c1"}).to_string(),
        ),
        (
            json,
            json!({"thread_id": "t1", "tool_call_id": "c".repeat(10_000)}).to_string(),
        ),
    ];
    for (content_type, body) in &bad_for_all {
        let answer = h
            .post_raw("/close_thread", Some(TOKEN), content_type, body.clone())
            .await;
        assert_eq!(answer, (StatusCode::OK, String::new()), "close {body:.60}");
    }
    for (content_type, body) in bad_for_all.iter().chain(&bad_call_ids) {
        let answer = h
            .post_raw("/cancel_tool_call", Some(TOKEN), content_type, body.clone())
            .await;
        assert_eq!(answer, (StatusCode::OK, String::new()), "cancel {body:.60}");
        let (status, text) = h
            .post_raw("/tool_call_status", Some(TOKEN), content_type, body.clone())
            .await;
        assert_eq!(
            (status, text.as_str()),
            (StatusCode::OK, r#"{"alive":false}"#)
        );
    }
    assert_eq!(
        h.callback.results(1).await,
        [result("t1", "c1", r#"{"slept":300}"#)]
    );
    assert_eq!(ends(&h.probe), [end("c1", "completed")]);
    assert_eq!(
        h.server.threads(),
        1,
        "no thread made for an invalid notice"
    );
}

#[tokio::test]
async fn invocations_that_cannot_be_answered_are_refused() {
    let h = Harness::with(
        CancelStack::new(Rap),
        |server| server.max_body_bytes(4096),
        vec![],
    )
    .await;
    let good = h.invocation("t1", "c1", "sleep", json!({"ms": 1}));
    let mut cases: Vec<(StatusCode, &str, String)> = vec![
        (StatusCode::BAD_REQUEST, "application/json", "{".into()),
        (
            StatusCode::BAD_REQUEST,
            "application/json",
            json!(["sleep", {"ms": 1}, "c1", null, h.callback_url, "t1"]).to_string(),
        ),
        (
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "text/plain",
            good.to_string(),
        ),
        (
            StatusCode::PAYLOAD_TOO_LARGE,
            "application/json",
            h.invocation("t1", "c1", "sleep", json!({"pad": "x".repeat(5000)}))
                .to_string(),
        ),
    ];
    for (field, value) in [
        ("group_id", json!("../t1")),
        ("group_id", json!("t\u{7}")),
        ("id", json!("..")),
        ("id", json!("a/../b")),
        ("id", json!("")),
        ("id", json!(7)),
        ("callback_url", json!("file:///etc/passwd")),
        ("callback_url", json!("not a url")),
    ] {
        let mut body = good.clone();
        body[field] = value;
        cases.push((
            StatusCode::BAD_REQUEST,
            "application/json",
            body.to_string(),
        ));
    }
    for (expected, content_type, body) in cases {
        let (status, _) = h
            .post_raw("/invoke", Some(TOKEN), content_type, body.clone())
            .await;
        assert_eq!(status, expected, "{body:.80}");
    }
    assert_eq!(h.stats().refused, 12);
    assert_eq!(h.stats().accepted, 0);
    assert_eq!(h.server.threads(), 0);
}

#[tokio::test]
async fn a_bad_operation_or_bad_arguments_get_an_error_result() {
    let h = Harness::start().await;
    let unknown = h.invocation("t1", "c1", "rm_rf", json!({}));
    assert_eq!(h.post("/invoke", unknown).await.0, StatusCode::OK);
    let results = h.callback.results(1).await;
    assert_eq!(
        results,
        [result("t1", "c1", "Error: Method not found: rm_rf")]
    );
    let not_an_object = h.invocation("t1", "c2", "sleep", json!([5]));
    assert_eq!(h.post("/invoke", not_an_object).await.0, StatusCode::OK);
    let results = h.callback.results(2).await;
    assert_eq!(
        results[1],
        result(
            "t1",
            "c2",
            "Error: Invalid params: the arguments must be an object"
        )
    );
    assert!(h.probe.ends().is_empty());
}

#[tokio::test]
async fn a_timeout_or_a_shutdown_still_answers_the_waiting_runtime() {
    let h = Harness::with(
        CancelStack::new(Rap).timeout(Duration::from_millis(50)),
        |server| server,
        vec![],
    )
    .await;
    h.invoke("t1", "c1", 60_000).await;
    assert_eq!(
        h.callback.results(1).await,
        [result("t1", "c1", "Error: the tool call timed out")]
    );
    assert_eq!(ends(&h.probe), [end("c1", "timeout")]);

    let h = Harness::start().await;
    h.invoke("t1", "c1", 60_000).await;
    h.invoke("t2", "c2", 60_000).await;
    h.probe.started(2).await;
    assert_eq!(h.server.shutdown(), 2);
    let mut results = h.callback.results(2).await;
    results.sort_by_key(|result| result["id"].as_str().unwrap().to_owned());
    assert_eq!(
        results,
        [
            result("t1", "c1", "Error: the tool server is shutting down"),
            result("t2", "c2", "Error: the tool server is shutting down"),
        ]
    );
    h.idle().await;
    // New work is refused, so the runtime records the refusal at once.
    let body = h.invocation("t3", "c3", "sleep", json!({"ms": 1}));
    assert_eq!(
        h.post("/invoke", body).await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );
}

#[tokio::test]
async fn a_retried_invocation_runs_once() {
    let h = Harness::start().await;
    h.invoke("t1", "c1", 200).await;
    h.probe.started(1).await;
    h.invoke("t1", "c1", 200).await;
    h.callback.results(1).await;
    h.idle().await;
    assert_eq!(ends(&h.probe), [end("c1", "completed")]);
    assert_eq!(h.callback.received().len(), 1);
}

#[tokio::test]
async fn a_result_is_retried_after_a_5xx_and_not_after_a_4xx() {
    let h = Harness::with(
        CancelStack::new(Rap),
        |server| server.callback_retries(3, Duration::from_millis(10)),
        vec![
            StatusCode::SERVICE_UNAVAILABLE,
            StatusCode::BAD_GATEWAY,
            StatusCode::OK,
        ],
    )
    .await;
    h.invoke("t1", "c1", 1).await;
    h.idle().await;
    assert_eq!(
        h.callback.received().len(),
        3,
        "two failures, then delivered"
    );
    assert_eq!((h.stats().delivered, h.stats().undelivered), (1, 0));

    let h = Harness::with(
        CancelStack::new(Rap),
        |server| server.callback_retries(3, Duration::from_millis(10)),
        vec![StatusCode::NOT_FOUND],
    )
    .await;
    h.invoke("t1", "c1", 1).await;
    h.idle().await;
    assert_eq!(h.callback.received().len(), 1, "a 4xx is not retried");
    assert_eq!((h.stats().delivered, h.stats().undelivered), (0, 1));
}

#[tokio::test]
async fn many_calls_cancelled_and_completed_leave_nothing_behind() {
    let h = Harness::start().await;
    for i in 0..40 {
        let ms = if i % 2 == 0 { 60_000 } else { 1 };
        h.invoke(&format!("t{}", i % 4), &format!("c{i}"), ms).await;
    }
    h.probe.started(40).await;
    for i in (0..40).step_by(2) {
        h.cancel(&format!("t{}", i % 4), &format!("c{i}")).await;
    }
    h.idle().await;
    let results = h.callback.results(20).await;
    assert_eq!(results.len(), 20);
    assert!(results
        .iter()
        .all(|result| result["text"] == r#"{"slept":1}"#));
    let stats = h.stats();
    assert_eq!(
        (stats.accepted, stats.delivered, stats.cancelled),
        (40, 20, 20)
    );
    for i in 0..40 {
        assert!(!h.alive(&format!("t{}", i % 4), &format!("c{i}")).await);
    }
}

#[tokio::test]
async fn a_cancel_or_a_close_stops_a_result_on_its_way() {
    for notice in ["cancel_tool_call", "close_thread"] {
        // The first delivery fails, and the cancel comes during the backoff before the second.
        let h = Harness::with(
            CancelStack::new(Rap),
            |server| server.callback_retries(3, Duration::from_secs(30)),
            vec![StatusCode::SERVICE_UNAVAILABLE],
        )
        .await;
        h.invoke("t1", "c1", 1).await;
        h.callback.results(1).await;
        let body = json!({"thread_id": "t1", "tool_call_id": "c1"});
        assert_eq!(h.post(&format!("/{notice}"), body).await.0, StatusCode::OK);
        h.idle().await;
        assert_eq!(
            h.callback.received().len(),
            1,
            "{notice}: no second attempt"
        );
        assert_eq!(
            (h.stats().cancelled, h.stats().delivered),
            (1, 0),
            "{notice}"
        );
    }
}

#[tokio::test]
async fn cancels_for_threads_that_never_come_cannot_lock_out_new_ones() {
    let h = Harness::with(
        CancelStack::new(Rap),
        |server| server.thread_limits(Duration::from_secs(600), 4),
        vec![],
    )
    .await;
    for i in 0..10 {
        h.cancel(&format!("junk{i}"), "c1").await;
    }
    assert_eq!(h.server.threads(), 4);
    h.invoke("real", "c1", 1).await;
    assert_eq!(
        h.callback.results(1).await,
        [result("real", "c1", r#"{"slept":1}"#)]
    );
}

#[tokio::test]
async fn an_early_cancel_also_silences_an_invocation_that_is_refused() {
    let h = Harness::start().await;
    h.cancel("t1", "c1").await;
    let unknown = h.invocation("t1", "c1", "rm_rf", json!({}));
    assert_eq!(h.post("/invoke", unknown).await.0, StatusCode::OK);
    eventually("the call cancelled", || h.stats().cancelled == 1).await;
    h.idle().await;
    assert!(h.callback.received().is_empty());
}

#[tokio::test]
async fn polling_the_status_never_uses_up_the_quota_of_cancels() {
    let h = Harness::with(
        CancelStack::new(Rap),
        |server| server.notices_per_second(Some(1)),
        vec![],
    )
    .await;
    h.invoke("t1", "c1", 60_000).await;
    h.probe.started(1).await;
    let mut limited = 0;
    for _ in 0..5 {
        let body = json!({"thread_id": "t1", "tool_call_id": "c1"});
        if h.post("/tool_call_status", body).await.0 == StatusCode::TOO_MANY_REQUESTS {
            limited += 1;
        }
    }
    assert_eq!(limited, 3, "a burst of two, then 429");
    h.cancel("t1", "c1").await;
    assert_eq!(h.probe.ended(1).await, [end("c1", "peer")]);
}

#[tokio::test]
async fn missing_or_null_arguments_are_no_arguments() {
    let h = Harness::start().await;
    for (call, arguments) in [("c1", Some(Value::Null)), ("c2", None)] {
        let mut body = h.invocation("t1", call, "whoami", json!({}));
        match arguments {
            Some(arguments) => body["arguments"] = arguments,
            None => drop(body.as_object_mut().unwrap().remove("arguments")),
        }
        assert_eq!(h.post("/invoke", body).await.0, StatusCode::OK);
    }
    let results = h.callback.results(2).await;
    for result in results {
        let seen: Value = serde_json::from_str(result["text"].as_str().unwrap()).unwrap();
        assert_eq!(seen["thread"], "t1", "the handler ran: {result}");
    }
}

#[tokio::test]
async fn a_cancel_without_a_content_type_is_read_as_json() {
    let h = Harness::start().await;
    h.invoke("t1", "c1", 60_000).await;
    h.probe.started(1).await;
    let response = h
        .http
        .post(h.url("/cancel_tool_call"))
        .bearer_auth(TOKEN)
        .body(json!({"thread_id": "t1", "tool_call_id": "c1"}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(h.probe.ended(1).await, [end("c1", "peer")]);
}

#[tokio::test]
async fn a_result_follows_no_redirect() {
    let h = Harness::with(
        CancelStack::new(Rap),
        |server| server,
        vec![StatusCode::TEMPORARY_REDIRECT],
    )
    .await;
    h.invoke("t1", "c1", 1).await;
    h.idle().await;
    assert_eq!(
        h.callback.received().len(),
        1,
        "posted once, to the URL given"
    );
    assert_eq!((h.stats().delivered, h.stats().undelivered), (0, 1));
}

/// Threads with nothing running are kept for their linger only: after it, the next thread that comes sweeps them,
/// with the early cancels they remembered, so the table holds the threads in use and no more.
#[tokio::test]
async fn idle_threads_and_their_early_cancels_are_forgotten_after_their_linger() {
    // Long enough that nothing before the wait is swept, however slow the machine.
    const LINGER: Duration = Duration::from_secs(1);
    let h = Harness::with(
        CancelStack::new(Rap),
        |server| server.thread_limits(LINGER, 64),
        vec![],
    )
    .await;
    h.invoke("t1", "c1", 1).await;
    h.callback.results(1).await;
    h.invoke("t2", "c1", 60_000).await;
    h.probe.started(2).await;
    h.cancel("t2", "c1").await;
    // An early cancel: its thread is kept (for the invocation that may follow) with the cancel in it.
    h.cancel("t3", "c1").await;
    h.idle().await;
    assert_eq!(h.server.threads(), 3);

    tokio::time::sleep(LINGER + Duration::from_millis(200)).await;
    h.invoke("t4", "c1", 1).await;
    assert_eq!(h.callback.results(2).await[1]["group_id"], "t4");
    assert_eq!(h.server.threads(), 1, "only the thread just used is left");
    h.idle().await;

    // The early cancel went with its thread: the same call now runs, and its result is sent.
    h.invoke("t3", "c1", 1).await;
    assert_eq!(
        h.callback.results(3).await[2],
        result("t3", "c1", r#"{"slept":1}"#)
    );
    h.idle().await;
    let stats = h.stats();
    assert_eq!(
        (stats.accepted, stats.cancelled, stats.delivered),
        (4, 1, 3)
    );
}

/// Any authentication layer the user picks guards invocations, cancels and closes alike: here an API key checked
/// by a middleware of the user's own instead of the bearer token.
#[tokio::test]
async fn a_layer_of_the_users_own_guards_every_endpoint_but_discovery() {
    use axum::{extract::Request as HttpRequest, middleware::Next, response::IntoResponse};
    use tower::ServiceBuilder;
    use tower_cancel_http::rap::ToolServer;

    async fn api_key(req: HttpRequest, next: Next) -> axum::response::Response {
        match req.headers().get("x-api-key") {
            Some(key) if key == "k-123" => next.run(req).await,
            _ => StatusCode::UNAUTHORIZED.into_response(),
        }
    }

    let probe = support::Probe::default();
    let tools = support::rap::tools(&probe);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let toolset = tools.toolset("probe-tools", format!("http://{addr}/invoke"));
    let server = ToolServer::new(
        toolset,
        ServiceBuilder::new()
            .layer(CancelStack::new(Rap))
            .service(tools),
    );
    let router = server
        .clone()
        .router_with(axum::middleware::from_fn(api_key));
    tokio::spawn(async move { tower_cancel_http::serve(listener, router).await.unwrap() });
    let (callback, callback_url) = support::rap::Callback::start(vec![]).await;
    let http = reqwest::Client::new();
    let post = |path: &str, key: Option<&str>, body: Value| {
        let mut request = http
            .post(format!("http://{addr}{path}"))
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(key) = key {
            request = request.header("x-api-key", key);
        }
        async move { request.send().await.unwrap().status() }
    };
    let invocation = |call: &str, ms: u64| {
        json!({
            "operation": "sleep", "arguments": {"ms": ms}, "id": call, "call_id": format!("p-{call}"),
            "callback_url": callback_url, "group_id": "t1",
        })
    };
    let notice = json!({"thread_id": "t1", "tool_call_id": "c1"});

    // Without the key (or with the bearer token the built-in layer would take), nothing is invoked.
    assert_eq!(
        post("/invoke", None, invocation("c0", 1)).await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(server.stats().accepted, 0);
    // Discovery stays open.
    let discovery = http
        .get(format!("http://{addr}/.well-known/rap-toolset"))
        .send()
        .await
        .unwrap();
    assert_eq!(discovery.status(), StatusCode::OK);

    assert_eq!(
        post("/invoke", Some("k-123"), invocation("c1", 300)).await,
        StatusCode::OK
    );
    probe.started(1).await;
    for path in ["/cancel_tool_call", "/close_thread", "/tool_call_status"] {
        assert_eq!(
            post(path, Some("wrong"), notice.clone()).await,
            StatusCode::UNAUTHORIZED,
            "{path}"
        );
    }
    // Nothing was cancelled: the call runs to its end and its result is sent.
    assert_eq!(
        callback.results(1).await,
        [result("t1", "c1", r#"{"slept":300}"#)]
    );
    assert_eq!(probe.ended(1).await, [end("c1", "completed")]);
    let stats = server.stats();
    assert_eq!((stats.cancels, stats.closes, stats.cancelled), (0, 0, 0));
    // With the key, a cancel is taken (200, for a call already over).
    assert_eq!(
        post("/cancel_tool_call", Some("k-123"), notice).await,
        StatusCode::OK
    );
    assert_eq!(server.stats().cancels, 1);
}
