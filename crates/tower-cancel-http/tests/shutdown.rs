//! A graceful shutdown of each front end over a real socket: a request in flight when it begins is answered as its
//! protocol says with reason `Shutdown` and its handler stopped, a request that comes after is refused the
//! protocol's way, and nothing is left at the end. No assertion here depends on how fast the machine is: every
//! wait is for an event, the handlers sleep for a minute, and the bounds are hang guards.

mod support;

#[path = "support/abp.rs"]
// Only its raw peer is used here.
#[allow(dead_code)]
mod abp_support;

use std::{
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use http::StatusCode;
use serde_json::{json, Value};
use support::{
    handle, mcp_handle,
    rap::{end, result, Harness},
    serve, Probe,
};
use tokio::sync::Notify;
use tower::{service_fn, ServiceBuilder};
use tower_cancel::{BoxError, CancelReason, CancelStack, ErrorObject, Request};
use tower_cancel_http::{abp::AbpApp, front::Front, JsonRpc, McpHttp};

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

#[tokio::test]
async fn mcp_answers_its_requests_minus_32603_ends_its_sessions_and_refuses_the_revisions_way() {
    let probe = Probe::default();
    let handler = probe.clone();
    let stack = ServiceBuilder::new()
        .layer(CancelStack::mcp())
        .service(service_fn(move |req| mcp_handle(handler.clone(), req)));
    let mcp = McpHttp::new(stack);
    let url = format!("http://{}/mcp", serve(mcp.router()).await);
    // JSON only: a reply never turns into a stream, whatever the time it takes.
    const JSON: (&str, &str) = ("accept", "application/json");

    let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}});
    let response = reqwest::Client::new()
        .post(&url)
        .header("content-type", "application/json")
        .header(JSON.0, JSON.1)
        .body(initialize.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let session = response.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let sleep = |id: u64| json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "sleep", "arguments": {"ms": 60_000}}});
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {}
    });
    let stateless = |id: u64| {
        let mut call = sleep(id);
        call["params"]["_meta"] = meta.clone();
        call
    };
    let stateless_headers = [
        JSON,
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "sleep"),
    ];

    let in_session = tokio::spawn({
        let (url, session, body) = (url.clone(), session.clone(), sleep(1));
        async move { post_json(&url, &[JSON, ("mcp-session-id", &session)], body).await }
    });
    let alone = tokio::spawn({
        let (url, body) = (url.clone(), stateless(2));
        async move { post_json(&url, &stateless_headers, body).await }
    });
    probe.started(2).await;
    assert_eq!(mcp.shutdown(), 2, "the two requests in flight");
    let cancelled = |id: u64| {
        json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32603,
        "message": "Internal error: request cancelled (server shutting down)"}})
    };
    for (reply, id) in [(in_session.await.unwrap(), 1), (alone.await.unwrap(), 2)] {
        assert_eq!(reply.0, 200);
        assert_eq!(json(&reply.1), cancelled(id));
    }
    let mut ends = probe.ended(2).await;
    ends.sort();
    assert_eq!(
        ends,
        [
            ("1".into(), "shutdown".into()),
            ("2".into(), "shutdown".into())
        ]
    );
    assert_eq!(mcp.sessions(), 0, "the server ended its sessions");

    // After the shutdown: the session is gone (404), no new one opens (503), and a stateless request never runs.
    let (status, body) = post_json(&url, &[JSON, ("mcp-session-id", &session)], sleep(3)).await;
    assert_eq!(status, 404);
    assert_eq!(json(&body)["error"]["code"], -32001);
    let (status, _) = post_json(&url, &[JSON], initialize).await;
    assert_eq!(status, 503);
    let (status, body) = post_json(&url, &stateless_headers, stateless(4)).await;
    assert_eq!(status, 200);
    assert_eq!(json(&body), cancelled(4));
    drained(&mcp.front()).await;
    assert_eq!(probe.ends().len(), 2, "no request ran after the shutdown");
    assert_eq!(mcp.sessions(), 0);
}

#[tokio::test]
async fn rap_answers_its_calls_with_an_error_result_and_refuses_invocations_with_503() {
    let h = Harness::start().await;
    h.invoke("t1", "c1", 60_000).await;
    h.probe.started(1).await;
    assert_eq!(h.server.shutdown(), 1, "the one call in flight");
    // The runtime is still waiting for the call: it gets an error result, and the handler is stopped.
    assert_eq!(
        h.callback.results(1).await,
        [result(
            "t1",
            "c1",
            "Error: the tool server is shutting down"
        )]
    );
    assert_eq!(h.probe.ended(1).await, [end("c1", "shutdown")]);

    // After the shutdown: refused, so that the runtime records the refusal as the call's error at once.
    let body = h.invocation("t1", "c2", "sleep", json!({"ms": 1}));
    assert_eq!(
        h.post("/invoke", body).await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );
    drained(&h.server.front()).await;
    let stats = h.stats();
    assert_eq!((stats.accepted, stats.refused, stats.delivered), (1, 1, 1));
    assert_eq!(h.probe.ends().len(), 1, "the late call never ran");
    assert_eq!(h.callback.received().len(), 1);
}

/// An ABP capability that, once stopped, holds its call open until the test lets it go: the session is still
/// draining when the late call comes, whatever the time things take.
#[derive(Clone, Default)]
struct Held {
    started: Arc<AtomicUsize>,
    stopped: Arc<Mutex<Vec<Option<CancelReason>>>>,
    stop_seen: Arc<Notify>,
    release: Arc<Notify>,
}

impl Held {
    async fn call(self, req: Request) -> Result<Value, BoxError> {
        self.started.fetch_add(1, Ordering::SeqCst);
        let ctx = req.context().expect("set by the stack").clone();
        ctx.token().cancelled().await;
        self.stopped.lock().unwrap().push(ctx.reason());
        self.stop_seen.notify_one();
        self.release.notified().await;
        Err(ErrorObject::internal_error("stopped").into())
    }
}

#[tokio::test]
async fn abp_answers_its_calls_cancelled_answers_later_calls_the_same_and_closes() {
    let held = Held::default();
    let handler = held.clone();
    // Cooperative, with a grace that never runs out here: the handler decides when its call ends.
    let stack = ServiceBuilder::new()
        .layer(CancelStack::abp().cooperative(Duration::from_secs(3600)))
        .service(service_fn(move |req| handler.clone().call(req)));
    let app = AbpApp::new(stack).capabilities(["hold"]);
    let url = format!("ws://{}/abp", serve(app.router()).await);
    let mut wire = abp_support::Wire::session(&url).await;
    let first = wire.call("a", "hold", json!({})).await;
    support::eventually("the call started", || {
        held.started.load(Ordering::SeqCst) == 1
    })
    .await;

    assert_eq!(app.shutdown(), 1, "the one call in flight");
    tokio::time::timeout(Duration::from_secs(10), held.stop_seen.notified())
        .await
        .expect("the handler told to stop");
    assert_eq!(
        *held.stopped.lock().unwrap(),
        [Some(CancelReason::Shutdown)]
    );

    // The session drains (its call is not answered yet): a call it reads now is answered cancelled at once.
    let late = wire.call("b", "hold", json!({})).await;
    let cancelled = |reply: Value| {
        let payload = &reply["payload"];
        assert_eq!(reply["type"], "capabilities/call-result", "{reply}");
        assert_eq!(payload["success"], false, "{reply}");
        assert_eq!(payload["cancelled"], true, "{reply}");
        assert_eq!(payload["error"]["code"], "CANCELLED", "{reply}");
        assert_eq!(payload["error"]["retryable"], true, "{reply}");
    };
    cancelled(wire.reply_to(&late).await);
    assert_eq!(
        held.started.load(Ordering::SeqCst),
        1,
        "the late call never ran"
    );

    held.release.notify_one();
    cancelled(wire.reply_to(&first).await);
    assert!(
        wire.closed().await,
        "every call answered: the app closes the session"
    );

    // No session opens after the shutdown.
    match tokio_tungstenite::connect_async(&url).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        }
        other => panic!("not refused: {:?}", other.map(|_| "a WebSocket")),
    }
    drained(&app.front()).await;
    let stats = app.stats();
    assert_eq!((stats.sessions, stats.in_flight, stats.calls), (0, 0, 2));
}
