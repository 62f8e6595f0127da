//! A graceful shutdown of each front end over a real socket: a request in flight when it begins is answered as its
//! protocol says with reason `Shutdown` and its handler stopped, a request that comes after is refused the
//! protocol's way, and nothing is left at the end. No assertion here depends on how fast the machine is: every
//! wait is for an event, the handlers sleep for a minute, and the bounds are hang guards.

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::{handle, serve, Probe};
use tower::{service_fn, ServiceBuilder};
use tower_cancel::CancelStack;
use tower_cancel_http::{front::Front, JsonRpc};

/// Wait (bounded: a hang guard, never a measure) for the front end to drain, and check that nothing is left.
async fn drained(front: &Front) {
    tokio::time::timeout(Duration::from_secs(10), front.drained())
        .await
        .expect("drained");
    let stats = front.stats();
    assert!(stats.shutting_down);
    assert_eq!((stats.in_flight, stats.open), (0, 0), "{stats:?}");
}

async fn post_json(url: &str, headers: &[(&str, &str)], body: Value) -> (u16, String) {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_string());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text:?}"))
}

#[tokio::test]
async fn jsonrpc_answers_its_requests_with_the_dialects_shutdown_reply_and_runs_no_more() {
    let probe = Probe::default();
    let handler = probe.clone();
    let stack = ServiceBuilder::new()
        .layer(CancelStack::lsp())
        .service(service_fn(move |req| handle(handler.clone(), req)));
    let rpc = JsonRpc::new(stack);
    let url = format!("http://{}/rpc", serve(rpc.router()).await);

    let sleep = |id: u64| json!({"jsonrpc": "2.0", "id": id, "method": "demo/sleep", "params": {"ms": 60_000}});
    let held = tokio::spawn({
        let url = url.clone();
        async move { post_json(&url, &[], sleep(1)).await }
    });
    probe.started(1).await;
    assert_eq!(rpc.shutdown(), 1, "the one request in flight");
    let (status, body) = held.await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(
        json(&body),
        json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32800, "message": "Request cancelled"}})
    );
    assert_eq!(probe.ended(1).await, [("1".into(), "shutdown".into())]);

    // After the shutdown: the same reply, and the handler never runs.
    let (status, body) = post_json(&url, &[], sleep(2)).await;
    assert_eq!(status, 200);
    assert_eq!(
        json(&body),
        json!({"jsonrpc": "2.0", "id": 2, "error": {"code": -32800, "message": "Request cancelled"}})
    );
    drained(&rpc.front()).await;
    assert_eq!(probe.ends().len(), 1, "the late request never ran");
    assert_eq!(rpc.stats().requests, 2);
}
