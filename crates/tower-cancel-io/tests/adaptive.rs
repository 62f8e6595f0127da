//! `Server::adaptive_requests(true)` over a real in-memory duplex: a request is polled first on the connection's
//! task and moved to a task of its own only if still pending. The handlers report the task each of their polls ran
//! on (`tokio::task::try_id()`), which is what a user can see of where a request runs.

use std::{
    collections::HashMap,
    future::Future,
    io,
    sync::{Arc, Mutex, OnceLock},
    task::{Context, Poll},
    time::Duration,
};

use serde_json::{json, Value};
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines, ReadHalf, WriteHalf},
    sync::Notify,
    task::{self, JoinHandle},
};
use tower::{service_fn, Layer};
use tower_cancel::{BoxError, CancelStack, Id, Registry, Request, Response};
use tower_cancel_io::{Framing, Server, ShutdownHandle};

/// How long a test waits for anything before it fails: never what ends a passing test.
const PATIENCE: Duration = Duration::from_secs(10);

const PANICKED: &str = "Internal error: handler panicked";

/// Where a request's polls ran.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Ran {
    /// The task of its first poll.
    first: Option<task::Id>,
    /// The task of its poll after its first await, once it got there.
    later: Option<task::Id>,
}

#[derive(Default)]
struct State {
    ran: HashMap<i64, Ran>,
    /// Requests whose handler stopped (its future dropped) before it finished.
    stopped: Vec<i64>,
    /// Notifications in the order they took effect (in their first poll), with the task of that poll.
    notified: Vec<(i64, Option<task::Id>)>,
    /// The tasks of the notifications' polls after their first await.
    notified_later: Vec<Option<task::Id>>,
}

/// The handlers and what they saw.
#[derive(Clone, Default)]
struct Probe {
    state: Arc<Mutex<State>>,
    changed: Arc<Notify>,
}

/// Records that its handler stopped unless disarmed by finishing.
struct StopGuard {
    id: i64,
    probe: Probe,
    finished: bool,
}

impl Drop for StopGuard {
    fn drop(&mut self) {
        if !self.finished {
            self.probe.update(|state| state.stopped.push(self.id));
        }
    }
}

impl Probe {
    fn update(&self, change: impl FnOnce(&mut State)) {
        change(&mut self.state.lock().unwrap());
        self.changed.notify_waiters();
    }

    fn read<T>(&self, look: impl FnOnce(&State) -> T) -> T {
        look(&self.state.lock().unwrap())
    }

    fn ran(&self, id: i64) -> Ran {
        self.read(|state| state.ran.get(&id).copied().unwrap_or_default())
    }

    /// Wait until `condition` holds, at most [`PATIENCE`].
    async fn wait_for(&self, what: &str, condition: impl Fn(&State) -> bool) {
        let wait = async {
            loop {
                let changed = self.changed.notified();
                if self.read(&condition) {
                    return;
                }
                changed.await;
            }
        };
        if tokio::time::timeout(PATIENCE, wait).await.is_err() {
            panic!("waited {PATIENCE:?} for {what}");
        }
    }

    /// The handler: `ready` answers in its first poll, `wait` after an await, `hang` never, `slow` after computing
    /// 2 ms in its first poll; `panic` panics in its first poll, `panic_later` after an await. A notification
    /// `edit` takes effect (records its version) in its first poll, and awaits once after.
    fn handle(
        &self,
        req: Request,
    ) -> impl Future<Output = Result<Value, BoxError>> + Send + 'static {
        let probe = self.clone();
        let id = match req.id() {
            Some(Id::Number(n)) => Some(*n),
            _ => None,
        };
        let method = req.method().to_owned();
        let params = req.params_as::<Value>().unwrap_or(Value::Null);
        async move {
            let first = task::try_id();
            match id {
                Some(id) => probe.update(|state| {
                    state.ran.insert(id, Ran { first, later: None });
                }),
                None => probe.update(|state| {
                    let version = params["version"].as_i64().unwrap_or(-1);
                    state.notified.push((version, first));
                }),
            }
            let mut guard = StopGuard {
                id: id.unwrap_or(-1),
                probe: probe.clone(),
                finished: false,
            };
            match method.as_str() {
                "ready" => {}
                "slow" => std::thread::sleep(Duration::from_millis(2)),
                "panic" => panic!("the test handler panics in its first poll"),
                _ => {
                    task::yield_now().await;
                    let later = task::try_id();
                    match id {
                        Some(id) => probe.update(|state| {
                            state.ran.entry(id).or_default().later = later;
                        }),
                        None => probe.update(|state| state.notified_later.push(later)),
                    }
                    match method.as_str() {
                        "hang" => std::future::pending::<()>().await,
                        "panic_later" => panic!("the test handler panics after an await"),
                        _ => {}
                    }
                }
            }
            guard.finished = true;
            Ok(json!({ "method": method }))
        }
    }
}

/// The client's end of a connection, and the server's task.
struct Conn {
    write: WriteHalf<DuplexStream>,
    lines: Lines<BufReader<ReadHalf<DuplexStream>>>,
    serve: JoinHandle<io::Result<()>>,
    registry: Registry,
}

impl Conn {
    /// `server` serving one end of a duplex, on a task of its own.
    fn start<S>(server: Server<S>) -> Self
    where
        S: tower::Service<Request, Response = Option<Response>> + Send + 'static,
        S::Error: Into<BoxError>,
        S::Future: Send + 'static,
    {
        let registry = server.registry().clone();
        let (client, server_end) = tokio::io::duplex(64 * 1024);
        let (read, write) = tokio::io::split(server_end);
        let serve = tokio::spawn(server.serve(read, write, Framing::Ndjson));
        let (client_read, write) = tokio::io::split(client);
        Self {
            write,
            lines: BufReader::new(client_read).lines(),
            serve,
            registry,
        }
    }

    /// The LSP stack over `probe`'s handler, requests adaptive.
    fn adaptive(probe: &Probe) -> Self {
        let probe = probe.clone();
        let handler = service_fn(move |req| probe.handle(req));
        Self::start(Server::with_stack(CancelStack::lsp(), handler).adaptive_requests(true))
    }

    /// The task that serves the connection: the connection's own task.
    fn task(&self) -> Option<task::Id> {
        Some(self.serve.id())
    }

    async fn send(&mut self, message: Value) {
        let mut line = message.to_string();
        line.push('\n');
        self.write.write_all(line.as_bytes()).await.unwrap();
    }

    async fn request(&mut self, id: i64, method: &str) {
        self.send(json!({ "jsonrpc": "2.0", "id": id, "method": method }))
            .await;
    }

    async fn cancel(&mut self, id: i64) {
        self.send(json!({ "jsonrpc": "2.0", "method": "$/cancelRequest", "params": { "id": id } }))
            .await;
    }

    async fn reply(&mut self) -> Value {
        let line = tokio::time::timeout(PATIENCE, self.lines.next_line())
            .await
            .expect("a reply in time")
            .expect("the connection reads")
            .expect("a reply before the end");
        serde_json::from_str(&line).unwrap()
    }

    /// Close the client's side, and return what the server still wrote; `serve` must return `Ok`.
    async fn close(mut self) -> Vec<Value> {
        self.write.shutdown().await.unwrap();
        self.closed_by_server().await
    }

    /// What the server still writes until it closes the connection, the client's side still open; `serve` must
    /// return `Ok`, with the registry empty.
    async fn closed_by_server(mut self) -> Vec<Value> {
        let mut rest = Vec::new();
        loop {
            let line = tokio::time::timeout(PATIENCE, self.lines.next_line())
                .await
                .expect("the server closes in time")
                .expect("the connection reads");
            match line {
                Some(line) => rest.push(serde_json::from_str(&line).unwrap()),
                None => break,
            }
        }
        tokio::time::timeout(PATIENCE, self.serve)
            .await
            .expect("serve returns")
            .expect("serve does not panic")
            .expect("serve returns Ok");
        assert!(self.registry.is_empty(), "{:?}", self.registry);
        rest
    }
}

fn ok(id: i64, method: &str) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "result": { "method": method } })
}

fn error(id: i64, code: i64, message: &str) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } })
}

fn cancelled(id: i64) -> Value {
    error(id, -32800, "Request cancelled")
}

#[tokio::test]
async fn a_ready_handler_is_answered_on_the_connections_task_and_a_pending_one_moves() {
    let probe = Probe::default();
    let mut conn = Conn::adaptive(&probe);
    conn.request(1, "ready").await;
    assert_eq!(conn.reply().await, ok(1, "ready"));
    assert_eq!(probe.ran(1).first, conn.task(), "answered where it arrived");

    conn.request(2, "wait").await;
    assert_eq!(conn.reply().await, ok(2, "wait"));
    let ran = probe.ran(2);
    assert_eq!(
        ran.first,
        conn.task(),
        "its first poll on the connection's task"
    );
    assert!(ran.later.is_some());
    assert_ne!(ran.later, conn.task(), "the rest on a task of its own");
    assert!(conn.close().await.is_empty());
}

#[tokio::test]
async fn the_inline_default_polls_everything_on_the_connections_task() {
    // The contrast that makes the test above mean something: the same handler, without the adaptive mode.
    let probe = Probe::default();
    let handler = {
        let probe = probe.clone();
        service_fn(move |req| probe.handle(req))
    };
    let mut conn = Conn::start(Server::with_stack(CancelStack::lsp(), handler));
    conn.request(2, "wait").await;
    assert_eq!(conn.reply().await, ok(2, "wait"));
    let ran = probe.ran(2);
    assert_eq!((ran.first, ran.later), (conn.task(), conn.task()));
    assert!(conn.close().await.is_empty());
}

#[tokio::test]
async fn a_cancel_reaches_a_moved_request_and_stops_its_handler() {
    let probe = Probe::default();
    let mut conn = Conn::adaptive(&probe);
    conn.request(1, "hang").await;
    probe
        .wait_for("1 on its task", |state| {
            state.ran.get(&1).is_some_and(|ran| ran.later.is_some())
        })
        .await;
    assert_ne!(probe.ran(1).later, conn.task());
    assert_eq!(conn.registry.len(), 1);

    conn.cancel(1).await;
    assert_eq!(conn.reply().await, cancelled(1));
    probe
        .wait_for("1 stopped", |state| state.stopped == [1])
        .await;
    assert!(conn.registry.is_empty());
    // The connection goes on.
    conn.request(2, "ready").await;
    assert_eq!(conn.reply().await, ok(2, "ready"));
    assert!(conn.close().await.is_empty());
}

#[tokio::test]
async fn a_close_cancels_and_stops_every_moved_request() {
    let probe = Probe::default();
    let mut conn = Conn::adaptive(&probe);
    for id in 1..=3 {
        conn.request(id, "hang").await;
    }
    probe
        .wait_for("1 to 3 on their tasks", |state| {
            (1..=3).all(|id| state.ran.get(&id).is_some_and(|ran| ran.later.is_some()))
        })
        .await;
    assert_eq!(conn.registry.len(), 3);

    // `close` asserts that `serve` returned Ok with the registry empty.
    let mut rest = conn.close().await;
    rest.sort_by_key(|reply| reply["id"].as_i64());
    assert_eq!(rest, (1..=3).map(cancelled).collect::<Vec<_>>());
    let mut stopped = probe.read(|state| state.stopped.clone());
    stopped.sort_unstable();
    assert_eq!(
        stopped,
        [1, 2, 3],
        "every handler stopped before serve returned"
    );
}

#[tokio::test]
async fn panics_in_the_first_poll_and_in_a_later_one_are_answered_and_the_connection_goes_on() {
    // No cancel layer, which would catch the panics itself: the driver's own net answers them.
    let probe = Probe::default();
    let service = service_fn(move |req: Request| {
        let id = req.id().cloned();
        let handled = probe.handle(req);
        async move {
            let result = handled.await?;
            Ok::<_, BoxError>(id.map(|id| Response::ok(id, result)))
        }
    });
    let mut conn = Conn::start(Server::new(service).adaptive_requests(true));
    conn.request(1, "panic").await;
    assert_eq!(conn.reply().await, error(1, -32603, PANICKED));
    conn.request(2, "panic_later").await;
    assert_eq!(conn.reply().await, error(2, -32603, PANICKED));
    conn.request(3, "wait").await;
    assert_eq!(conn.reply().await, ok(3, "wait"));
    assert!(conn.close().await.is_empty());
}

#[tokio::test]
async fn panics_behind_the_stack_are_answered_and_their_entries_removed() {
    let probe = Probe::default();
    let mut conn = Conn::adaptive(&probe);
    for (id, method) in [(1, "panic"), (2, "panic_later")] {
        conn.request(id, method).await;
        assert_eq!(conn.reply().await, error(id, -32603, PANICKED));
        assert!(conn.registry.is_empty());
    }
    conn.request(3, "wait").await;
    assert_eq!(conn.reply().await, ok(3, "wait"));
    assert!(conn.close().await.is_empty());
}

/// Notifications are never moved: on two workers, a hundred of them still take effect in the order they were sent
/// (an editor's edits), each on the connection's task, after their first await too, while the requests around
/// them move.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_stay_on_the_connections_task_in_order() {
    let probe = Probe::default();
    let mut conn = Conn::adaptive(&probe);
    conn.request(1, "hang").await;
    for version in 0..100 {
        conn.send(json!({ "jsonrpc": "2.0", "method": "edit", "params": { "version": version } }))
            .await;
    }
    conn.request(2, "wait").await;
    assert_eq!(conn.reply().await, ok(2, "wait"));
    probe
        .wait_for("100 edits done", |state| state.notified_later.len() == 100)
        .await;
    let (notified, later) =
        probe.read(|state| (state.notified.clone(), state.notified_later.clone()));
    let versions: Vec<i64> = notified.iter().map(|(version, _)| *version).collect();
    assert_eq!(versions, (0..100).collect::<Vec<_>>());
    assert!(notified.iter().all(|(_, task)| *task == conn.task()));
    assert!(later.iter().all(|task| *task == conn.task()));
    assert_ne!(
        probe.ran(1).later,
        conn.task(),
        "the request around them moved"
    );
    assert_eq!(conn.close().await, [cancelled(1)]);
}

/// After three requests whose first poll computes (2 ms each, far over the 10 µs the driver allows on average),
/// requests are spawned without a first poll in place, but for one in 64, the probe.
#[tokio::test]
async fn slow_first_polls_make_requests_spawn_from_the_start() {
    let probe = Probe::default();
    let mut conn = Conn::adaptive(&probe);
    for id in 1..=3 {
        conn.request(id, "slow").await;
        assert_eq!(conn.reply().await, ok(id, "slow"));
        assert_eq!(probe.ran(id).first, conn.task(), "{id} polled in place");
    }
    for id in 4..=66 {
        conn.request(id, "ready").await;
        assert_eq!(conn.reply().await, ok(id, "ready"));
        let first = probe.ran(id).first;
        assert!(first.is_some());
        assert_ne!(first, conn.task(), "{id} spawned from the start");
    }
    conn.request(67, "ready").await;
    assert_eq!(conn.reply().await, ok(67, "ready"));
    assert_eq!(
        probe.ran(67).first,
        conn.task(),
        "the probe, polled in place"
    );
    assert!(conn.close().await.is_empty());
}

/// A service that, the first time it is asked whether it is ready, starts the connection's graceful shutdown and
/// says not yet: the request it was asked for is then read before, and taken during, the drain.
struct ShutsDownWhenAsked<S> {
    inner: S,
    handle: Arc<OnceLock<ShutdownHandle>>,
    asked: bool,
}

impl<S: tower::Service<Request>> tower::Service<Request> for ShutsDownWhenAsked<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        if !self.asked {
            self.asked = true;
            self.handle.get().expect("set before serving").shutdown();
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> S::Future {
        self.inner.call(req)
    }
}

#[tokio::test]
async fn a_drain_ends_with_a_request_refused_in_its_first_poll() {
    // The request read as the drain begins starts out cancelled (reason Shutdown) and is answered in its first
    // poll, never entering the set of requests in flight: with nothing else in flight, the drain ends there, not at
    // its timeout (an hour: the test's patience would run out first).
    let probe = Probe::default();
    let stack = CancelStack::lsp();
    let handle = Arc::new(OnceLock::new());
    let service = ShutsDownWhenAsked {
        inner: stack.layer(service_fn({
            let probe = probe.clone();
            move |req| probe.handle(req)
        })),
        handle: handle.clone(),
        asked: false,
    };
    let server = Server::new(service)
        .in_scope(stack.scope())
        .adaptive_requests(true)
        .drain_timeout(Duration::from_secs(3600));
    handle.set(server.shutdown_handle()).expect("set once");
    let mut conn = Conn::start(server);
    conn.request(1, "ready").await;
    assert_eq!(conn.reply().await, cancelled(1));
    assert_eq!(probe.ran(1), Ran::default(), "the handler never ran");
    assert!(conn.closed_by_server().await.is_empty());
}
