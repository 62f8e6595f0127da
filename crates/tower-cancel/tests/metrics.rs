//! What the `metrics` feature records, counted exactly: real requests through `CancelStack`s over connections of
//! a scope, every way a request can end, into a recorder of the test's own (set for the test's thread only, so
//! tests running side by side do not see each other's metrics). Every test runs on tokio's paused clock.

use std::{
    collections::{BTreeMap, HashMap},
    convert::Infallible,
    future::Future,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use metrics::{Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, SharedString, Unit};
use serde_json::{json, Value};
use tower::{service_fn, util::BoxCloneService, Layer, ServiceExt};
use tower_cancel::{
    metrics::{
        CANCEL_TO_SETTLE_SECONDS, EARLY_CANCELS_DROPPED, EARLY_CANCELS_REMEMBERED,
        REQUESTS_CANCELLED, REQUESTS_COMPLETED, REQUESTS_REGISTERED,
    },
    CancelReason, CancelStack, Connection, Dialect, ErrorObject, Outbox, Registry, Request,
    Response, Scope, TimeoutLayer,
};

/// A recorder keeping every counter and every histogram sample, keyed `name{label=value,...}` (labels sorted).
#[derive(Default)]
struct Recorded {
    counters: Mutex<HashMap<String, Arc<AtomicU64>>>,
    histograms: Mutex<HashMap<String, Arc<Samples>>>,
}

#[derive(Default)]
struct Samples(Mutex<Vec<f64>>);

impl HistogramFn for Samples {
    fn record(&self, value: f64) {
        self.0.lock().unwrap().push(value);
    }
}

fn series(key: &Key) -> String {
    let mut labels: Vec<_> = key
        .labels()
        .map(|label| format!("{}={}", label.key(), label.value()))
        .collect();
    labels.sort();
    if labels.is_empty() {
        key.name().to_owned()
    } else {
        format!("{}{{{}}}", key.name(), labels.join(","))
    }
}

impl metrics::Recorder for Recorded {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let mut counters = self.counters.lock().unwrap();
        Counter::from_arc(counters.entry(series(key)).or_default().clone())
    }

    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        let mut histograms = self.histograms.lock().unwrap();
        Histogram::from_arc(histograms.entry(series(key)).or_default().clone())
    }
}

impl Recorded {
    fn counters(&self) -> BTreeMap<String, u64> {
        let counters = self.counters.lock().unwrap();
        counters
            .iter()
            .map(|(series, value)| (series.clone(), value.load(Ordering::SeqCst)))
            .collect()
    }

    fn samples(&self) -> BTreeMap<String, Vec<f64>> {
        let histograms = self.histograms.lock().unwrap();
        histograms
            .iter()
            .map(|(series, samples)| (series.clone(), samples.0.lock().unwrap().clone()))
            .collect()
    }
}

/// Run `test` on a paused clock with a fresh recorder set for this thread, and give back what it recorded.
fn record(test: impl Future<Output = ()>) -> Recorded {
    let recorded = Recorded::default();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    metrics::with_local_recorder(&recorded, || {
        runtime.block_on(test);
        // Whatever the test left running settles here, still into this recorder.
        drop(runtime);
    });
    recorded
}

/// The handler: `echo` answers its params, `fail` its own error, `panic` panics, anything else never answers
/// (it ends only when its future is dropped).
async fn handle(req: Request) -> Result<Value, ErrorObject> {
    match req.method() {
        "echo" | "initialize" => Ok(req.params_as::<Value>().unwrap_or(Value::Null)),
        "fail" => Err(ErrorObject::new(-32001, "no")),
        "panic" => panic!("the test handler panics on purpose"),
        _ => std::future::pending().await,
    }
}

type Stack = BoxCloneService<Request, Option<Response>, Infallible>;

fn stack<D: Dialect + Clone>(stack: CancelStack<D>) -> Stack {
    BoxCloneService::new(stack.layer(service_fn(handle)))
}

/// Send one message through `service` as `connection`'s transport would.
fn send(
    service: &Stack,
    connection: &Connection,
    mut req: Request,
) -> impl Future<Output = Option<Response>> + Send + 'static {
    connection.prepare(&mut req);
    let reply = service.clone().oneshot(req);
    async move {
        match reply.await {
            Ok(reply) => reply,
            Err(never) => match never {},
        }
    }
}

/// Start a request and let it reach its handler; its reply comes from the task.
async fn start(
    service: &Stack,
    connection: &Connection,
    req: Request,
) -> tokio::task::JoinHandle<Option<Response>> {
    let task = tokio::spawn(send(service, connection, req));
    tokio::task::yield_now().await;
    task
}

fn lsp_cancel(id: i64) -> Request {
    Request::notification("$/cancelRequest", json!({ "id": id }))
}

fn code(reply: Option<Response>) -> i64 {
    reply.expect("a reply").outcome.expect_err("an error").code
}

fn labels(name: &str, labels: &str) -> String {
    format!("{name}{{{labels}}}")
}

#[test]
fn every_outcome_is_counted_once_by_dialect_and_reason() {
    let registries: Arc<Mutex<Vec<Registry>>> = Arc::default();
    let kept = registries.clone();
    let recorded = record(async move {
        // An early-cancel window of two, so that a third cancel for an unknown id pushes the oldest out.
        let scope = Scope::new().with_registry(Registry::with_early_cancel_capacity(2));
        let lsp = stack(
            CancelStack::lsp()
                .timeouts(TimeoutLayer::none().method("slow", Duration::from_millis(50))),
        );
        let conn = scope.connect(Outbox::closed());
        kept.lock().unwrap().push(scope.registry().clone());

        // Never cancellable, so never counted.
        let init = send(&lsp, &conn, Request::new(0, "initialize", json!({}))).await;
        assert!(init.unwrap().outcome.is_ok());

        // Completed: a result, the handler's own error, a panic before any cancel.
        for id in 1..=2 {
            let reply = send(&lsp, &conn, Request::new(id, "echo", json!(id))).await;
            assert_eq!(reply.unwrap().outcome, Ok(json!(id)));
        }
        assert_eq!(
            code(send(&lsp, &conn, Request::new(3, "fail", ())).await),
            -32001
        );
        assert_eq!(
            code(send(&lsp, &conn, Request::new(4, "panic", ())).await),
            -32603
        );

        // A peer's cancel while the handler runs.
        let running = start(&lsp, &conn, Request::new(10, "hang", ())).await;
        assert_eq!(send(&lsp, &conn, lsp_cancel(10)).await, None);
        assert_eq!(code(running.await.unwrap()), -32800);

        // A deadline (the paused clock jumps to it).
        assert_eq!(
            code(send(&lsp, &conn, Request::new(11, "slow", ())).await),
            -32800
        );

        // An early cancel, remembered, and its request starting out cancelled.
        send(&lsp, &conn, lsp_cancel(12)).await;
        assert_eq!(
            code(send(&lsp, &conn, Request::new(12, "hang", ())).await),
            -32800
        );

        // Three cancels for ids never sent into a window of two: one is dropped.
        for id in 20..=22 {
            send(&lsp, &conn, lsp_cancel(id)).await;
        }

        // A duplicate is refused and not counted; the original goes on.
        let original = start(&lsp, &conn, Request::new(13, "hang", ())).await;
        assert_eq!(
            code(send(&lsp, &conn, Request::new(13, "hang", ())).await),
            -32600
        );

        // A response future dropped before its request settled: a local cancel.
        let dropped = start(&lsp, &conn, Request::new(14, "hang", ())).await;
        dropped.abort();
        assert!(dropped.await.unwrap_err().is_cancelled());

        // The connection closes with request 13 in flight.
        assert_eq!(conn.close(CancelReason::Disconnect), 1);
        assert_eq!(code(original.await.unwrap()), -32800);

        // A second connection stops taking work: its next request starts out cancelled.
        let draining = scope.connect(Outbox::closed());
        draining.refuse_new(CancelReason::Shutdown);
        assert_eq!(
            code(send(&lsp, &draining, Request::new(30, "echo", ())).await),
            -32800
        );

        // Another dialect, on a scope of its own: MCP answers a peer's cancel with nothing at all.
        let mcp_scope = Scope::new();
        let mcp = stack(CancelStack::mcp());
        let mcp_conn = mcp_scope.connect(Outbox::closed());
        kept.lock().unwrap().push(mcp_scope.registry().clone());
        send(&mcp, &mcp_conn, Request::new(1, "echo", ()))
            .await
            .unwrap();
        let running = start(&mcp, &mcp_conn, Request::new(2, "hang", ())).await;
        let cancel = Request::notification(
            "notifications/cancelled",
            json!({ "requestId": 2, "reason": "user" }),
        );
        assert_eq!(send(&mcp, &mcp_conn, cancel).await, None);
        assert_eq!(running.await.unwrap(), None);
    });

    let lsp = |name| labels(name, "dialect=lsp");
    let lsp_cancelled =
        |reason: &str| labels(REQUESTS_CANCELLED, &format!("dialect=lsp,reason={reason}"));
    let expected: BTreeMap<String, u64> = [
        (lsp(REQUESTS_REGISTERED), 10),
        (lsp(REQUESTS_COMPLETED), 4),
        (lsp_cancelled("peer"), 2),
        (lsp_cancelled("timeout"), 1),
        (lsp_cancelled("local"), 1),
        (lsp_cancelled("disconnect"), 1),
        (lsp_cancelled("shutdown"), 1),
        (labels(REQUESTS_REGISTERED, "dialect=mcp"), 2),
        (labels(REQUESTS_COMPLETED, "dialect=mcp"), 1),
        (labels(REQUESTS_CANCELLED, "dialect=mcp,reason=peer"), 1),
        (EARLY_CANCELS_REMEMBERED.to_owned(), 4),
        (EARLY_CANCELS_DROPPED.to_owned(), 1),
    ]
    .into_iter()
    .collect();
    assert_eq!(recorded.counters(), expected);

    // The same figures as the registries' own counters.
    let registries = registries.lock().unwrap();
    let (lsp_stats, mcp_stats) = (registries[0].stats(), registries[1].stats());
    assert_eq!(
        (
            lsp_stats.registered,
            lsp_stats.completed,
            lsp_stats.cancelled
        ),
        (10, 4, 6)
    );
    assert_eq!((lsp_stats.early_cancels, lsp_stats.early_dropped), (4, 1));
    assert_eq!(
        (
            mcp_stats.registered,
            mcp_stats.completed,
            mcp_stats.cancelled
        ),
        (2, 1, 1)
    );
    assert!(registries.iter().all(Registry::is_empty));

    // One histogram sample per cancelled request, under the same labels as its counter.
    let samples_per_series: BTreeMap<String, u64> = recorded
        .samples()
        .into_iter()
        .map(|(series, samples)| {
            let series = series.replace(CANCEL_TO_SETTLE_SECONDS, REQUESTS_CANCELLED);
            (series, samples.len() as u64)
        })
        .collect();
    let cancelled: BTreeMap<String, u64> = expected
        .into_iter()
        .filter(|(series, _)| series.starts_with(REQUESTS_CANCELLED))
        .collect();
    assert_eq!(samples_per_series, cancelled);
}

#[test]
fn the_histogram_measures_from_the_cancel_to_the_settling() {
    let recorded = record(async {
        // A cooperative handler that ignores its token settles when its grace runs out, 30 ms after the cancel;
        // the deadline of the other one settles it at once.
        let scope = Scope::new();
        let conn = scope.connect(Outbox::closed());
        let cooperative = stack(CancelStack::lsp().cooperative(Duration::from_millis(30)));
        let running = start(&cooperative, &conn, Request::new(1, "hang", ())).await;
        tokio::time::sleep(Duration::from_millis(5)).await;
        send(&cooperative, &conn, lsp_cancel(1)).await;
        assert_eq!(code(running.await.unwrap()), -32800);

        let timed = stack(CancelStack::lsp().timeout(Duration::from_millis(40)));
        assert_eq!(
            code(send(&timed, &conn, Request::new(2, "hang", ())).await),
            -32800
        );
        assert!(scope.registry().is_empty());
    });
    let samples = recorded.samples();
    assert_eq!(
        samples[&labels(CANCEL_TO_SETTLE_SECONDS, "dialect=lsp,reason=peer")],
        [0.030]
    );
    assert_eq!(
        samples[&labels(CANCEL_TO_SETTLE_SECONDS, "dialect=lsp,reason=timeout")],
        [0.0]
    );
}
