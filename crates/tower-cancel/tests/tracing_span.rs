//! The span each request gets: its `id` and `method`, the `outcome` recorded when it ends (and the `reason` of a
//! cancel), the OpenTelemetry fields of its reply, its `cancel` event, and the handler's own events inside it. A subscriber of the test's own captures the spans, set for the
//! test's thread only; the test runs on tokio's paused clock.

use std::{
    collections::HashMap,
    fmt,
    future::Future,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use serde_json::{json, Value};
use tower::{service_fn, Layer, ServiceExt};
use tower_cancel::{CancelReason, CancelStack, ErrorObject, Outbox, Request, Scope, TimeoutLayer};
use tracing::{
    field::{Field, Visit},
    span::{Attributes, Id, Record},
    Event, Metadata, Subscriber,
};

/// Every span's name and fields, and every event's message with the span it happened in and its fields.
#[derive(Default)]
struct Captured {
    next_id: AtomicU64,
    spans: Mutex<HashMap<u64, Span>>,
    entered: Mutex<Vec<u64>>,
    events: Mutex<Vec<CapturedEvent>>,
}

type CapturedEvent = (String, Option<u64>, HashMap<&'static str, String>);

#[derive(Clone, Debug, Default)]
struct Span {
    name: &'static str,
    fields: HashMap<&'static str, String>,
}

struct Fields<'a>(&'a mut HashMap<&'static str, String>);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name(), value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name(), format!("{value:?}"));
    }
}

#[derive(Clone, Default)]
struct Capture(Arc<Captured>);

impl Subscriber for Capture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let id = self.0.next_id.fetch_add(1, Ordering::SeqCst) + 1;
        let mut fields = HashMap::new();
        span.record(&mut Fields(&mut fields));
        let name = span.metadata().name();
        self.0
            .spans
            .lock()
            .unwrap()
            .insert(id, Span { name, fields });
        Id::from_u64(id)
    }

    fn record(&self, span: &Id, values: &Record<'_>) {
        if let Some(span) = self.0.spans.lock().unwrap().get_mut(&span.into_u64()) {
            values.record(&mut Fields(&mut span.fields));
        }
    }

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut fields = HashMap::new();
        event.record(&mut Fields(&mut fields));
        let message = fields.remove("message").unwrap_or_default();
        // Its explicit parent, else the span it happened in.
        let span = event
            .parent()
            .map(Id::into_u64)
            .or_else(|| self.0.entered.lock().unwrap().last().copied());
        self.0.events.lock().unwrap().push((message, span, fields));
    }

    fn enter(&self, span: &Id) {
        self.0.entered.lock().unwrap().push(span.into_u64());
    }

    fn exit(&self, _: &Id) {
        self.0.entered.lock().unwrap().pop();
    }
}

/// `echo` answers after logging an event, `fail` with its own error, `panic` panics, anything else never answers.
async fn handle(req: Request) -> Result<Value, ErrorObject> {
    match req.method() {
        "echo" => {
            tracing::info!("handling echo");
            Ok(json!("echoed"))
        }
        "fail" => Err(ErrorObject::new(-32001, "no")),
        "panic" => panic!("the test handler panics on purpose"),
        _ => std::future::pending().await,
    }
}

fn on_paused_clock(test: impl Future<Output = ()>) {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
        .block_on(test);
}

#[test]
fn each_request_has_a_span_with_its_id_method_and_outcome() {
    let capture = Capture::default();
    tracing::subscriber::with_default(capture.clone(), || {
        on_paused_clock(async {
            let service = CancelStack::lsp()
                .timeouts(TimeoutLayer::none().method("slow", Duration::from_millis(50)))
                .layer(service_fn(handle));
            let connection = Scope::new().connect(Outbox::closed());
            let send = |mut req: Request| {
                connection.prepare(&mut req);
                let reply = service.clone().oneshot(req);
                async move { reply.await.unwrap() }
            };
            let cancel = |id: i64| {
                send(Request::notification(
                    "$/cancelRequest",
                    json!({ "id": id }),
                ))
            };

            send(Request::new(1, "echo", ())).await;
            send(Request::new(2, "fail", ())).await;
            send(Request::new(3, "panic", ())).await;
            let running = tokio::spawn(send(Request::new(4, "hang", ())));
            tokio::task::yield_now().await;
            cancel(4).await;
            running.await.unwrap();
            send(Request::new("five", "slow", ())).await;
            let running = tokio::spawn(send(Request::new(6, "hang", ())));
            tokio::task::yield_now().await;
            send(Request::new(6, "hang", ())).await;
            connection.close(CancelReason::Disconnect);
            running.await.unwrap();
            // A future dropped before it saw its cancel: the cancel its drop makes is told at its end.
            let connection = Scope::new().connect(Outbox::closed());
            let mut req = Request::new(7, "hang", ());
            connection.prepare(&mut req);
            let mut reply = Box::pin(service.clone().oneshot(req));
            assert!(futures_poll_once(reply.as_mut()).is_pending());
            drop(reply);
            assert!(connection.registry().is_empty());
        });
    });

    let spans = capture.0.spans.lock().unwrap().clone();
    let field = |span: &Span, name: &str| span.fields.get(name).cloned().unwrap_or_default();
    let mut requests: Vec<[String; 4]> = spans
        .values()
        .filter(|span| span.name == "request")
        .map(|span| ["id", "method", "outcome", "reason"].map(|name| field(span, name)))
        .collect();
    requests.sort();
    // Sorted: a string id shows with its quotes, as on the wire.
    let expected = [
        ["\"five\"", "slow", "cancelled", "timeout"],
        ["1", "echo", "completed", ""],
        ["2", "fail", "failed", ""],
        ["3", "panic", "panicked", ""],
        ["4", "hang", "cancelled", "peer"],
        ["6", "hang", "cancelled", "disconnect"],
        ["6", "hang", "duplicate", ""],
        ["7", "hang", "cancelled", "local"],
    ];
    assert_eq!(requests, expected.map(|row| row.map(str::to_owned)));

    // The OpenTelemetry fields: the RPC ones from the start, the reply's code (LSP answers every cancel -32800),
    // `error.type` (the cancel's reason, or the handler's error code) and the status (an error for a timeout and
    // a failed handler, unset for the other cancels).
    let fixed = [
        ("otel.kind", "server"),
        ("rpc.system", "jsonrpc"),
        ("rpc.system.name", "jsonrpc"),
        ("rpc.jsonrpc.version", "2.0"),
        ("jsonrpc.protocol.version", "2.0"),
    ];
    let mut otel: Vec<[String; 6]> = spans
        .values()
        .filter(|span| span.name == "request" && field(span, "outcome") != "duplicate")
        .inspect(|span| {
            for (name, value) in fixed {
                assert_eq!(field(span, name), value, "{name}");
            }
            let method = field(span, "method");
            assert_eq!(field(span, "otel.name"), method);
            assert_eq!(field(span, "rpc.method"), method);
            let id = field(span, "id");
            assert_eq!(field(span, "rpc.jsonrpc.request_id"), id);
            assert_eq!(field(span, "jsonrpc.request.id"), id);
            assert_eq!(
                field(span, "rpc.response.status_code"),
                field(span, "rpc.jsonrpc.error_code")
            );
        })
        .map(|span| {
            [
                "id",
                "rpc.jsonrpc.error_code",
                "error.type",
                "otel.status_code",
                "otel.status_description",
                "outcome",
            ]
            .map(|name| field(span, name))
        })
        .collect();
    otel.sort();
    let expected = [
        [
            "\"five\"",
            "-32800",
            "timeout",
            "error",
            "Request cancelled",
            "cancelled",
        ],
        ["1", "", "", "", "", "completed"],
        ["2", "-32001", "-32001", "error", "no", "failed"],
        [
            "3",
            "-32603",
            "-32603",
            "error",
            "Internal error: handler panicked",
            "panicked",
        ],
        ["4", "-32800", "peer", "", "", "cancelled"],
        ["6", "-32800", "disconnect", "", "", "cancelled"],
        ["7", "", "local", "", "", "cancelled"],
    ];
    assert_eq!(otel, expected.map(|row| row.map(str::to_owned)));

    // One `cancel` event in the span of each cancelled request, with its reason and who decided it.
    let events = capture.0.events.lock().unwrap().clone();
    let mut cancels: Vec<[String; 3]> = events
        .iter()
        .filter(|(message, _, _)| message == "cancel")
        .map(|(_, span, fields)| {
            let span = &spans[&span.expect("in a request's span")];
            let get = |name: &str| fields.get(name).cloned().unwrap_or_default();
            [
                field(span, "id"),
                get("cancel.reason"),
                get("cancel.source"),
            ]
        })
        .collect();
    cancels.sort();
    let expected = [
        ["\"five\"", "timeout", "local"],
        ["4", "peer", "peer"],
        ["6", "disconnect", "peer"],
        ["7", "local", "local"],
    ];
    assert_eq!(cancels, expected.map(|row| row.map(str::to_owned)));

    // The handler's event is inside its request's span.
    let (_, inside, _) = events
        .iter()
        .find(|(message, _, _)| message == "handling echo")
        .expect("the handler's event");
    let span = &spans[&inside.expect("inside a span")];
    assert_eq!((span.name, field(span, "id").as_str()), ("request", "1"));
}

/// Poll `future` once, with a waker that does nothing.
fn futures_poll_once<F: Future + ?Sized>(
    future: std::pin::Pin<&mut F>,
) -> std::task::Poll<F::Output> {
    future.poll(&mut std::task::Context::from_waker(
        futures_util::task::noop_waker_ref(),
    ))
}
