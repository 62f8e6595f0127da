//! The request span as OpenTelemetry exports it (tower-cancel's `opentelemetry` feature, through
//! tracing-opentelemetry's layer into the SDK's in-memory exporter), over a real connection: its name, kind and RPC
//! attributes, its status, the `cancel` event, the incoming trace context of `params._meta` as its parent, and the
//! same trace carried on into the child peer's requests.

use std::collections::HashMap;

use opentelemetry::{
    global,
    trace::{SpanId, SpanKind, Status, TraceId, TracerProvider as _},
    Value as OtelValue,
};
use opentelemetry_sdk::{
    propagation::TraceContextPropagator,
    trace::{InMemorySpanExporter, SdkTracerProvider, SpanData},
};
use serde_json::{json, Value};
use tests::{
    ms,
    pair::{settle, Pair},
};
use tower_cancel::{
    dialect::{Lsp, Mcp},
    CancelStack, PeerError,
};
use tower_cancel_io::Framing;
use tracing::subscriber::DefaultGuard;
use tracing_subscriber::layer::SubscriberExt;

/// The incoming trace context of the W3C spec's example.
const TRACEPARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01";
const TRACE_ID: &str = "0af7651916cd43dd8448eb211c80319c";
const REMOTE_PARENT: &str = "00f067aa0ba902b7";

/// Spans exported in memory, from the subscriber this test's thread uses (the pair's tasks run on it: tokio's
/// current-thread runtime).
struct Traces {
    exporter: InMemorySpanExporter,
    provider: SdkTracerProvider,
    _guard: DefaultGuard,
}

fn traces() -> Traces {
    // What an application does: the W3C propagator, a provider, the layer that makes tracing spans OTel spans.
    global::set_text_map_propagator(TraceContextPropagator::new());
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("tests")));
    Traces {
        exporter,
        provider,
        _guard: tracing::subscriber::set_default(subscriber),
    }
}

impl Traces {
    /// The one ended span named `name` whose request id is `id`.
    fn request(&self, name: &str, id: &str) -> SpanData {
        self.provider.force_flush().expect("flushed");
        let spans = self.exporter.get_finished_spans().expect("the spans");
        let mut found: Vec<SpanData> = spans
            .into_iter()
            .filter(|span| span.name == name && attributes(span).get("id") == Some(&text(id)))
            .collect();
        assert_eq!(found.len(), 1, "one span {name} of id {id}");
        found.pop().unwrap()
    }
}

fn attributes(span: &SpanData) -> HashMap<&str, OtelValue> {
    span.attributes
        .iter()
        .map(|kv| (kv.key.as_str(), kv.value.clone()))
        .collect()
}

fn text(value: &str) -> OtelValue {
    OtelValue::from(value.to_owned())
}

/// Assert the RPC attributes every request span has, for request `id` of `method`.
fn assert_rpc(span: &SpanData, id: &str, method: &str) {
    assert_eq!(span.name, method);
    assert_eq!(span.span_kind, SpanKind::Server);
    let attributes = attributes(span);
    for (key, value) in [
        ("id", id),
        ("method", method),
        ("rpc.system", "jsonrpc"),
        ("rpc.system.name", "jsonrpc"),
        ("rpc.method", method),
        ("rpc.jsonrpc.version", "2.0"),
        ("jsonrpc.protocol.version", "2.0"),
        ("rpc.jsonrpc.request_id", id),
        ("jsonrpc.request.id", id),
    ] {
        assert_eq!(attributes.get(key), Some(&text(value)), "{key}");
    }
}

/// Assert the reply's error code, in both names.
fn assert_error_code(span: &SpanData, code: Option<i64>) {
    let attributes = attributes(span);
    assert_eq!(
        attributes.get("rpc.jsonrpc.error_code"),
        code.map(OtelValue::I64).as_ref()
    );
    assert_eq!(
        attributes.get("rpc.response.status_code"),
        code.map(|code| text(&code.to_string())).as_ref()
    );
}

/// The span's `cancel` events, each as its attributes.
fn cancel_events(span: &SpanData) -> Vec<HashMap<String, OtelValue>> {
    span.events
        .iter()
        .filter(|event| event.name == "cancel")
        .map(|event| {
            event
                .attributes
                .iter()
                .filter(|kv| kv.key.as_str().starts_with("cancel."))
                .map(|kv| (kv.key.as_str().to_owned(), kv.value.clone()))
                .collect()
        })
        .collect()
}

fn event(fields: &[(&str, &str)]) -> HashMap<String, OtelValue> {
    fields
        .iter()
        .map(|(key, value)| ((*key).to_owned(), text(value)))
        .collect()
}

fn assert_child_of_incoming(span: &SpanData) {
    assert_eq!(
        span.span_context.trace_id(),
        TraceId::from_hex(TRACE_ID).unwrap()
    );
    assert_eq!(
        span.parent_span_id,
        SpanId::from_hex(REMOTE_PARENT).unwrap()
    );
    assert!(span.parent_span_is_remote);
}

#[tokio::test(start_paused = true)]
async fn a_timed_out_request_is_an_error_under_the_incoming_trace() {
    let traces = traces();
    let mut pair = Pair::new(
        Framing::Ndjson,
        (CancelStack::mcp(), Mcp),
        (CancelStack::mcp().timeout(ms(100)), Mcp),
    );
    let call = pair
        .client
        .peer
        .request("hang", json!({ "_meta": { "traceparent": TRACEPARENT } }));
    let Err(PeerError::Rejected(error)) = call.await else {
        panic!("the server's timeout reply");
    };
    assert_eq!(error.code, -32001);
    settle().await;

    let span = traces.request("hang", "0");
    assert_rpc(&span, "0", "hang");
    assert_error_code(&span, Some(-32001));
    let attributes = attributes(&span);
    assert_eq!(attributes.get("error.type"), Some(&text("timeout")));
    assert_eq!(attributes.get("outcome"), Some(&text("cancelled")));
    assert_eq!(attributes.get("reason"), Some(&text("timeout")));
    assert_eq!(
        span.status,
        Status::Error {
            description: "Request timed out".into()
        }
    );
    assert_eq!(
        cancel_events(&span),
        vec![event(&[
            ("cancel.reason", "timeout"),
            ("cancel.source", "local")
        ])]
    );
    assert_child_of_incoming(&span);
    pair.to_server
        .expect(&format!(r#"{{"jsonrpc":"2.0","id":0,"method":"hang","params":{{"_meta":{{"traceparent":"{TRACEPARENT}"}}}}}}"#))
        .await;
    pair.to_client
        .expect(r#"{"jsonrpc":"2.0","id":0,"error":{"code":-32001,"message":"Request timed out"}}"#)
        .await;
    pair.finish().await;
}

#[tokio::test(start_paused = true)]
async fn a_peer_cancel_is_an_event_and_no_error() {
    let traces = traces();
    let mut pair = Pair::mcp();
    let call = pair
        .client
        .peer
        .request("hang", json!({ "_meta": { "traceparent": TRACEPARENT } }));
    pair.server.probe.wait_started(0).await;
    drop(call);
    settle().await;

    let span = traces.request("hang", "0");
    assert_rpc(&span, "0", "hang");
    // MCP answers a peer's cancel with nothing: no code.
    assert_error_code(&span, None);
    let attributes = attributes(&span);
    assert_eq!(attributes.get("error.type"), Some(&text("peer")));
    assert_eq!(attributes.get("reason"), Some(&text("peer")));
    assert_eq!(span.status, Status::Unset);
    assert_eq!(
        cancel_events(&span),
        vec![event(&[
            ("cancel.reason", "peer"),
            ("cancel.source", "peer"),
            ("cancel.text", "cancelled locally: caller went away"),
        ])]
    );
    assert_child_of_incoming(&span);
    pair.to_server
        .expect(&format!(r#"{{"jsonrpc":"2.0","id":0,"method":"hang","params":{{"_meta":{{"traceparent":"{TRACEPARENT}"}}}}}}"#))
        .await;
    pair.to_server
        .expect(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":0,"reason":"cancelled locally: caller went away"}}"#)
        .await;
    pair.finish().await;
}

#[tokio::test(start_paused = true)]
async fn lsp_carries_no_trace_context_and_answers_its_cancel_code() {
    let traces = traces();
    let mut pair = Pair::new(
        Framing::ContentLength,
        (CancelStack::lsp(), Lsp),
        (CancelStack::lsp(), Lsp),
    );
    // A `_meta` in LSP params is the method's own business: no parent is read from it.
    let call = pair
        .client
        .peer
        .request("hang", json!({ "_meta": { "traceparent": TRACEPARENT } }));
    pair.server.probe.wait_started(0).await;
    drop(call);
    settle().await;

    let span = traces.request("hang", "0");
    assert_rpc(&span, "0", "hang");
    assert_error_code(&span, Some(-32800));
    assert_eq!(attributes(&span).get("error.type"), Some(&text("peer")));
    assert_eq!(span.status, Status::Unset);
    assert_ne!(
        span.span_context.trace_id(),
        TraceId::from_hex(TRACE_ID).unwrap()
    );
    assert_eq!(span.parent_span_id, SpanId::INVALID);
    pair.to_server
        .expect(&format!(r#"{{"jsonrpc":"2.0","id":0,"method":"hang","params":{{"_meta":{{"traceparent":"{TRACEPARENT}"}}}}}}"#))
        .await;
    pair.to_server
        .expect(r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":0}}"#)
        .await;
    pair.to_client
        .expect(r#"{"jsonrpc":"2.0","id":0,"error":{"code":-32800,"message":"Request cancelled"}}"#)
        .await;
    pair.finish().await;
}

#[tokio::test(start_paused = true)]
async fn a_failed_handler_is_an_error_with_its_code() {
    let traces = traces();
    let mut pair = Pair::mcp();
    let call = pair.client.peer.request("no_such_method", json!({}));
    let Err(PeerError::Rejected(error)) = call.await else {
        panic!("the handler's error");
    };
    settle().await;

    let span = traces.request("no_such_method", "0");
    assert_rpc(&span, "0", "no_such_method");
    assert_error_code(&span, Some(-32601));
    let attributes = attributes(&span);
    assert_eq!(attributes.get("error.type"), Some(&text("-32601")));
    assert_eq!(attributes.get("outcome"), Some(&text("failed")));
    assert_eq!(
        span.status,
        Status::Error {
            description: error.message.clone().into()
        }
    );
    assert!(cancel_events(&span).is_empty());
    // No incoming context: a root span of a trace of its own.
    assert_eq!(span.parent_span_id, SpanId::INVALID);
    pair.to_server
        .expect(r#"{"jsonrpc":"2.0","id":0,"method":"no_such_method","params":{}}"#)
        .await;
    let reply = json!({ "jsonrpc": "2.0", "id": 0, "error": error });
    pair.to_client.expect(&reply.to_string()).await;
    pair.finish().await;
}

#[tokio::test(start_paused = true)]
async fn the_child_peer_carries_the_trace_on() {
    let traces = traces();
    let mut pair = Pair::mcp();
    let call = pair.client.peer.request(
        "call",
        json!({
            "method": "echo",
            "params": { "x": 1 },
            "_meta": { "traceparent": TRACEPARENT },
        }),
    );
    let answer = call.await;
    settle().await;

    let parent = traces.request("call", "0");
    assert_rpc(&parent, "0", "call");
    assert_child_of_incoming(&parent);
    assert_eq!(parent.status, Status::Unset);
    assert_error_code(&parent, None);
    // The nested request on the wire: the same trace, the server's request span as its parent, no empty
    // `tracestate`.
    let expected = format!("00-{TRACE_ID}-{}-01", parent.span_context.span_id());
    pair.to_server.next().await;
    let nested: Value = serde_json::from_str(&pair.to_client.next().await).unwrap();
    assert_eq!(
        nested,
        json!({
            "jsonrpc": "2.0",
            "id": 0,
            "method": "echo",
            "params": { "x": 1, "_meta": { "traceparent": expected } },
        })
    );
    assert_eq!(
        answer,
        Ok(json!({ "nested": 0, "ok": { "x": 1, "_meta": { "traceparent": expected } } }))
    );
    // And the client serving it joins that trace under the server's span.
    let child = traces.request("echo", "0");
    assert_eq!(
        child.span_context.trace_id(),
        parent.span_context.trace_id()
    );
    assert_eq!(child.parent_span_id, parent.span_context.span_id());
    assert!(child.parent_span_is_remote);
    pair.to_server
        .expect(&format!(r#"{{"jsonrpc":"2.0","id":0,"result":{{"x":1,"_meta":{{"traceparent":"{expected}"}}}}}}"#))
        .await;
    pair.to_client.next().await; // the answer to `call`, asserted above
    pair.finish().await;
}
