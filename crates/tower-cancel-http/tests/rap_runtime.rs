//! The runtime's side of RAP tool calls against a real tool server: a call's result comes back through the
//! runtime's callback; a call dropped, interrupted or timed out is cancelled on every tool server, its handler is
//! stopped there, and a result that still arrives for it is dropped.

mod support;

use std::{future::IntoFuture, time::Duration};

use http::StatusCode;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tower_cancel_http::rap::{CallError, Notifier, Runtime};

use support::{
    eventually,
    rap::{end, ends, Harness, TOKEN},
    serve,
};

/// A runtime whose notifier reaches `h`'s server (and `others`), with its callback endpoint served.
async fn runtime(h: &Harness, others: &[String]) -> Runtime {
    let mut servers = vec![format!("http://{}", h.addr)];
    servers.extend(others.iter().cloned());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let runtime = Runtime::new(
        format!("http://{addr}/callback"),
        Notifier::new(servers).bearer(TOKEN),
    )
    .bearer(TOKEN);
    let router = runtime.callback_router("/callback");
    tokio::spawn(async move { tower_cancel_http::serve(listener, router).await.unwrap() });
    runtime
}

fn endpoint(h: &Harness) -> String {
    h.url("/invoke")
}

#[tokio::test]
async fn a_call_gets_its_result_through_the_callback() {
    let h = Harness::start().await;
    let runtime = runtime(&h, &[]).await;
    let result = runtime
        .call(endpoint(&h), "t1", "c1", "sleep", json!({"ms": 5}))
        .call_id("p1")
        .await
        .unwrap();
    assert_eq!(
        (
            result.group_id.as_str(),
            result.id.as_str(),
            result.call_id.as_deref()
        ),
        ("t1", "c1", Some("p1"))
    );
    assert_eq!(result.text.as_deref(), Some(r#"{"slept":5}"#));
    assert_eq!(runtime.pending(), 0);
    assert_eq!(runtime.results(), (1, 0));
}

#[tokio::test]
async fn dropping_a_call_cancels_it_on_the_tool_server() {
    let h = Harness::start().await;
    let runtime = runtime(&h, &[]).await;
    let call = tokio::spawn(
        runtime
            .call(endpoint(&h), "t1", "c1", "sleep", json!({"ms": 60_000}))
            .into_future(),
    );
    h.probe.started(1).await;
    assert_eq!(runtime.pending(), 1);
    call.abort();
    assert_eq!(h.probe.ended(1).await, [end("c1", "peer")]);
    h.idle().await;
    assert_eq!(runtime.pending(), 0);
    assert_eq!(h.stats().cancels, 1, "the server was told");
    assert!(h.callback.received().is_empty());
}

#[tokio::test]
async fn an_interrupted_or_timed_out_call_is_cancelled_and_says_why() {
    let h = Harness::start().await;
    let runtime = runtime(&h, &[]).await;
    let token = CancellationToken::new();
    let call = tokio::spawn(
        runtime
            .call(endpoint(&h), "t1", "c1", "sleep", json!({"ms": 60_000}))
            .cancel_on(token.clone())
            .into_future(),
    );
    h.probe.started(1).await;
    token.cancel();
    assert!(matches!(call.await.unwrap(), Err(CallError::Cancelled)));
    assert_eq!(h.probe.ended(1).await, [end("c1", "peer")]);

    let outcome = runtime
        .call(endpoint(&h), "t1", "c2", "sleep", json!({"ms": 60_000}))
        .timeout(Duration::from_millis(100))
        .await;
    assert!(matches!(outcome, Err(CallError::TimedOut)));
    h.probe.ended(2).await;
    h.idle().await;
    assert_eq!(ends(&h.probe), [end("c1", "peer"), end("c2", "peer")]);
    assert_eq!(runtime.pending(), 0);
}

#[tokio::test]
async fn a_result_after_the_cancel_is_dropped() {
    let h = Harness::start().await;
    let runtime = runtime(&h, &[]).await;
    let outcome = runtime
        .call(endpoint(&h), "t1", "c1", "sleep", json!({"ms": 60_000}))
        .timeout(Duration::from_millis(50))
        .await;
    assert!(matches!(outcome, Err(CallError::TimedOut)));
    // What a tool server that ignores cancels would do: send the result anyway.
    let late = json!({"type": "tool_result", "group_id": "t1", "id": "c1", "text": "too late"});
    let response = h
        .http
        .post(runtime.callback_url())
        .header("content-type", "application/json")
        .body(late.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(runtime.results(), (0, 1));
    // A callback that is not JSON is refused; other message types are taken and ignored.
    let response = h
        .http
        .post(runtime.callback_url())
        .body("{")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let event =
        json!({"type": "view_update", "group_id": "t1", "view_type": "diff", "content": {}});
    let response = h
        .http
        .post(runtime.callback_url())
        .body(event.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(runtime.results(), (0, 1));
}

#[tokio::test]
async fn a_cancel_reaches_every_tool_server_even_when_one_hangs() {
    let h = Harness::start().await;
    // A second tool server that never answers, and an address that refuses connections.
    let hanging = serve(axum::Router::new().route(
        "/cancel_tool_call",
        axum::routing::post(std::future::pending::<()>),
    ))
    .await;
    let refusing = {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        listener.local_addr().unwrap()
    };
    let runtime = runtime(
        &h,
        &[format!("http://{hanging}"), format!("http://{refusing}")],
    )
    .await;
    let outcome = runtime
        .call(endpoint(&h), "t1", "c1", "sleep", json!({"ms": 60_000}))
        .timeout(Duration::from_millis(50))
        .await;
    assert!(matches!(outcome, Err(CallError::TimedOut)));
    // The caller was not held up by the hanging server, and the real one stopped the call.
    assert_eq!(h.probe.ended(1).await, [end("c1", "peer")]);
    eventually("the notifier's sends settled", || {
        let stats = runtime.notifier().stats();
        stats.acknowledged == 1 && stats.failed == 1
    })
    .await;
}

#[tokio::test]
async fn a_refused_invocation_is_an_error_and_sends_no_cancel() {
    let h = Harness::start().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let runtime = Runtime::new(
        format!("http://{addr}/callback"),
        Notifier::new([format!("http://{}", h.addr)]).bearer(TOKEN),
    )
    .bearer("wrong");
    let outcome = runtime
        .call(endpoint(&h), "t1", "c1", "sleep", json!({"ms": 1}))
        .await;
    assert!(matches!(
        outcome,
        Err(CallError::Refused(StatusCode::UNAUTHORIZED))
    ));
    assert_eq!(runtime.pending(), 0);
    assert_eq!(runtime.notifier().stats().sent, 0);
    assert_eq!(h.stats().accepted, 0);
}

#[tokio::test]
async fn the_same_call_twice_at_once_is_refused_locally() {
    let h = Harness::start().await;
    let runtime = runtime(&h, &[]).await;
    let first = tokio::spawn(
        runtime
            .call(endpoint(&h), "t1", "c1", "sleep", json!({"ms": 200}))
            .into_future(),
    );
    h.probe.started(1).await;
    let second = runtime
        .call(endpoint(&h), "t1", "c1", "sleep", json!({"ms": 1}))
        .await;
    assert!(matches!(second, Err(CallError::Duplicate)));
    assert!(first.await.unwrap().is_ok());
    assert_eq!(runtime.pending(), 0);
}

#[test]
fn a_call_dropped_outside_the_runtime_still_cancels() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (h, rap, mut call) = runtime.block_on(async {
        let h = Harness::start().await;
        let rap = self::runtime(&h, &[]).await;
        let mut call = rap
            .call(endpoint(&h), "t1", "c1", "sleep", json!({"ms": 60_000}))
            .into_future();
        let _ = tokio::time::timeout(Duration::from_millis(20), &mut call).await;
        h.probe.started(1).await;
        (h, rap, call)
    });
    assert_eq!(rap.pending(), 1);
    // Not in any runtime's context here: the cancel still goes out, through the call's own runtime.
    drop(std::mem::replace(
        &mut call,
        Box::pin(async { Err(CallError::Cancelled) }),
    ));
    runtime.block_on(async {
        assert_eq!(h.probe.ended(1).await, [end("c1", "peer")]);
    });
    assert_eq!(rap.pending(), 0);
}

#[tokio::test]
async fn an_invocation_that_cannot_be_sent_sends_no_cancel() {
    let h = Harness::start().await;
    let runtime = runtime(&h, &[]).await;
    let outcome = runtime
        .call("not a url", "t1", "c1", "sleep", json!({"ms": 1}))
        .await;
    assert!(
        matches!(outcome, Err(CallError::Unreachable(_))),
        "{outcome:?}"
    );
    assert_eq!(runtime.pending(), 0);
    assert_eq!(runtime.notifier().stats().sent, 0);
}

#[tokio::test]
async fn any_2xx_acknowledges_an_invocation() {
    let h = Harness::start().await;
    let runtime = runtime(&h, &[]).await;
    // A tool server that answers 202 and sends its result later.
    let accepting = serve(axum::Router::new().route(
        "/invoke",
        axum::routing::post(|| async { StatusCode::ACCEPTED }),
    ))
    .await;
    let call = tokio::spawn(
        runtime
            .call(
                format!("http://{accepting}/invoke"),
                "t1",
                "c1",
                "op",
                json!({}),
            )
            .into_future(),
    );
    eventually("the call acknowledged and waiting", || {
        runtime.pending() == 1
    })
    .await;
    let result = json!({"type": "tool_result", "group_id": "t1", "id": "c1", "text": "done"});
    let response = h
        .http
        .post(runtime.callback_url())
        .body(result.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(call.await.unwrap().unwrap().text.as_deref(), Some("done"));
}
