//! The shared harness of the cross-crate integration tests.
//!
//! Every test drives a real connection: a [`Server`] serving a [`CancelStack`] over in-memory pipes (or a Unix
//! socket pair), and a client ([`Conn`]) that writes raw frames, byte for byte as a peer would, and reads the
//! replies off the wire, checking their framing. The handler behind the stack is a [`Probe`]: it reports which
//! requests started, how each one ended (finished, or stopped by having its future dropped) and the cancel reason
//! it saw, so a test can assert what a user sees: the exact reply, the handler stopped, the tables empty.
//!
//! Where both ends send requests (a `Peer` on each side, cascades), [`pair::Pair`] connects two such servers back
//! to back, each with its own stack, probe and `server.peer(dialect)`, and records the frames between them.
//!
//! Where the same scenario runs in several dialects, it is written once in [`scenarios`], generic over the
//! dialect: [`Spoken`] gives each dialect's framing and its cancel and cancelled frames, byte for byte, and each
//! dialect's test calls the scenario with its [`CancelStack`] and the frames that differ. Every test ends the same
//! way, [`Conn::finish_counting`]: no reply left, `serve` returned, the registry empty, its counters as expected.
//!
//! All tests run on tokio's paused clock (`#[tokio::test(start_paused = true)]`): time only moves when every task
//! is idle, straight to the next timer, so timings are exact and nothing waits on the wall clock.
//!
//! # The probe's methods
//!
//! | method | what the handler does |
//! |---|---|
//! | `initialize` | sleeps `params.ms` milliseconds (0 if absent), panics if `params.panic` is `true`, else answers `params.result` if given (an ACP agent's capabilities), else `{"capabilities":{}}` |
//! | `echo` | answers its params (`null` if none) |
//! | `sleep` | sleeps `params.ms` milliseconds, answers `{"slept":ms}` |
//! | `hang` | never answers; it ends only when its future is dropped |
//! | `partial` | waits for its token, answers `{"partial":true}` (a cooperative handler) |
//! | `wind_down_error` | waits for its token, answers the error -32801 "Content modified" |
//! | `panic` | panics |
//! | `deadline` | answers `{"deadline_ms": n}`: the milliseconds from now to its context's deadline (`null` if none) |
//! | `progress` | `params.steps` times (default 3): sleeps `params.every` ms, then reports progress `step` of `steps` with the message `"step <step>"` through [`Request::progress`]; if the request carried no progress token and `params.touch` is `true` it calls [`RequestContext::touch`] instead; drops its progress handle, then answers `{"token": <the handle's token or null>, "reports": <reports sent>}` |
//! | `session/prompt` | an ACP prompt turn: sleeps `params.ms` milliseconds (0 if absent), answers `{"stopReason":"end_turn"}` |
//! | `group` | answers `{"group": <its context's group, or null>}` ([`RequestContext::group`]) |
//! | `call` | sends the request `params.method` (with `params.params`) to the other side through its request's [`Peer`](Request::peer) (see [`Probe::nested`]) and answers how that call ended (see below) |
//! | anything else | never answers if `params.hang` is `true` (a hanging request of any method), else -32601 |
//!
//! `call` takes these options: `timeout_ms` ([`PeerCall::timeout`]), `no_timeout` (`true`:
//! [`PeerCall::no_timeout`]), `wait` ([`PeerCall::wait_after_cancel`]),
//! `spawn` (`true`: the call runs in a task of its own, which outlives a handler that is stopped, and the handler
//! waits for it), `after_cancel` (`true`: the handler first waits for its own request to be cancelled, as a
//! cooperative handler winding down would, then makes the call). It answers `{"nested": <id>, "ok": <result>}`,
//! `{"nested": <id>, "error": <the peer's error object>}` or `{"nested": <id>, "failed": <PeerError as text>}`.
//! Every call's outcome is recorded too ([`Probe::wait_outcome`]); a call whose future was dropped has none.
//!
//! Notifications that reach the handler are recorded ([`Probe::notifications`]) and never answered; the
//! notification `panic` panics; a notification with `params.ms` then sleeps that long and is recorded again when
//! done ([`Probe::notifications_done`]).
//!
//! Each handler also records, when it starts, the deadline its context shows ([`Probe::deadline_of`]).

use std::{
    collections::BTreeSet,
    io,
    sync::{Arc, Mutex, MutexGuard},
    time::Duration,
};

use serde_json::{json, Value};
use tokio::{
    io::{
        AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt,
        BufReader,
    },
    sync::mpsc,
    task::JoinHandle,
    time::Instant,
};
use tower::{service_fn, util::BoxCloneService, Service, ServiceBuilder};
use tower_cancel::{
    dialect::{Acp, AcpDraft, Lsp, Mcp},
    progress::ProgressUpdate,
    BoxError, CancelReason, CancelStack, Dialect, ErrorObject, Id, Peer, PeerCall, PeerError,
    Registry, Request, RequestContext, Response,
};
use tower_cancel::{scope::SessionState, Connection, Scope};
use tower_cancel_io::{Framing, Server};

pub mod pair;
pub mod scenarios;

/// How long (virtual time) the client waits for a frame before the test fails. Longer than any handler of the
/// suite sleeps, so it only fires when a reply is really missing; on the paused clock it costs nothing.
pub const PATIENCE: Duration = Duration::from_secs(3600);

/// The size of each in-memory pipe.
const PIPE_SIZE: usize = 64 * 1024;

/// The handler service the probe builds.
pub type Handler = BoxCloneService<Request, Value, BoxError>;

/// How a handler's request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// The handler returned.
    Finished,
    /// The handler's future was dropped before it returned (or it panicked).
    Stopped,
}

/// What the probe saw of one request: how it ended and the cancel reason its context held at that moment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ended {
    /// The request's id.
    pub id: Id,
    /// The request's method.
    pub method: String,
    /// Whether the handler returned or was stopped.
    pub end: End,
    /// The request's cancel reason when it ended (`None` if it was not cancelled).
    pub reason: Option<CancelReason>,
}

impl Ended {
    /// A handler that was stopped for `reason`.
    pub fn stopped(id: impl Into<Id>, method: &str, reason: Option<CancelReason>) -> Self {
        Self {
            id: id.into(),
            method: method.to_owned(),
            end: End::Stopped,
            reason,
        }
    }

    /// A handler that returned, its request cancelled for `reason` (or not cancelled: `None`).
    pub fn finished(id: impl Into<Id>, method: &str, reason: Option<CancelReason>) -> Self {
        Self {
            id: id.into(),
            method: method.to_owned(),
            end: End::Finished,
            reason,
        }
    }
}

/// A handler started: its id and method.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Started {
    /// The request's id.
    pub id: Id,
    /// The request's method.
    pub method: String,
}

/// The test handler and what it observed. Cloning gives another handle to the same observations.
#[derive(Clone, Debug)]
pub struct Probe {
    inner: Arc<ProbeInner>,
}

#[derive(Debug)]
struct ProbeInner {
    log: Mutex<Log>,
    started_tx: mpsc::UnboundedSender<Started>,
    started_rx: tokio::sync::Mutex<mpsc::UnboundedReceiver<Started>>,
    notified_tx: mpsc::UnboundedSender<(String, Value)>,
    notified_rx: tokio::sync::Mutex<mpsc::UnboundedReceiver<(String, Value)>>,
    outcome_tx: mpsc::UnboundedSender<(Id, Result<Value, PeerError>)>,
    outcome_rx: tokio::sync::Mutex<mpsc::UnboundedReceiver<(Id, Result<Value, PeerError>)>>,
}

/// A request a `call` handler sent to the other side.
#[derive(Clone, Debug, PartialEq)]
pub struct Nested {
    /// The id of the handler's own request (in the other side's id space).
    pub parent: Id,
    /// The id of the request it sent (in this side's peer's id space).
    pub id: Id,
    /// The method it sent.
    pub method: String,
    /// How the call ended: `None` while it runs, and for good if its future was dropped.
    pub outcome: Option<Result<Value, PeerError>>,
}

#[derive(Debug, Default)]
struct Log {
    started: Vec<Started>,
    ended: Vec<Ended>,
    notifications: Vec<(String, Value)>,
    notifications_done: Vec<(String, Value)>,
    deadlines: Vec<(Id, Option<Instant>)>,
    nested: Vec<Nested>,
}

impl Default for Probe {
    fn default() -> Self {
        Self::new()
    }
}

impl Probe {
    /// A probe that has seen nothing yet.
    pub fn new() -> Self {
        let (started_tx, started_rx) = mpsc::unbounded_channel();
        let (notified_tx, notified_rx) = mpsc::unbounded_channel();
        let (outcome_tx, outcome_rx) = mpsc::unbounded_channel();
        Self {
            inner: Arc::new(ProbeInner {
                log: Mutex::default(),
                started_tx,
                started_rx: tokio::sync::Mutex::new(started_rx),
                notified_tx,
                notified_rx: tokio::sync::Mutex::new(notified_rx),
                outcome_tx,
                outcome_rx: tokio::sync::Mutex::new(outcome_rx),
            }),
        }
    }

    /// The handler service (see the [crate docs](crate) for its methods).
    pub fn service(&self) -> Handler {
        let probe = self.clone();
        BoxCloneService::new(service_fn(move |req: Request| {
            let probe = probe.clone();
            // Everything happens inside the future: a handler "starts" when its future is first polled, which for
            // a request queued behind backpressure is only once the inner service was ready and called.
            async move { probe.handle(req).await }
        }))
    }

    async fn handle(self, req: Request) -> Result<Value, BoxError> {
        let params: Value = req.params_as().unwrap_or(Value::Null);
        let Some(id) = req.id().cloned() else {
            assert_ne!(req.method(), "panic", "the test handler panics on purpose");
            let note = (req.method().to_owned(), params);
            self.log().notifications.push(note.clone());
            let _ = self.inner.notified_tx.send(note.clone());
            if let Some(ms) = note.1.get("ms").and_then(Value::as_u64) {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                self.log().notifications_done.push(note);
            }
            return Ok(Value::Null);
        };
        let ctx = req.context().cloned();
        let mut guard = Guard {
            probe: self.clone(),
            id: id.clone(),
            method: req.method().to_owned(),
            ctx: ctx.clone(),
            finished: false,
        };
        let started = Started {
            id,
            method: req.method().to_owned(),
        };
        {
            let mut log = self.log();
            log.started.push(started.clone());
            let deadline = ctx.as_ref().and_then(RequestContext::deadline);
            log.deadlines.push((started.id.clone(), deadline));
        }
        let _ = self.inner.started_tx.send(started);

        let ms = params.get("ms").and_then(Value::as_u64).unwrap_or(0);
        let result: Result<Value, BoxError> = match req.method() {
            "initialize" => {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                assert_ne!(params["panic"], true, "the test handler panics on purpose");
                Ok(params
                    .get("result")
                    .cloned()
                    .unwrap_or_else(|| json!({ "capabilities": {} })))
            }
            "echo" => Ok(params),
            "session/prompt" => {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                Ok(json!({ "stopReason": "end_turn" }))
            }
            "group" => Ok(json!({ "group": ctx.as_ref().and_then(RequestContext::group) })),
            "sleep" => {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                Ok(json!({ "slept": ms }))
            }
            "hang" => std::future::pending().await,
            // MCP's subscription: open until the client cancels it, or `ms` if given (the server ends it); refused
            // with an error if asked to (`refuse`).
            "subscriptions/listen" if params["refuse"] == true => {
                Err(ErrorObject::internal_error("subscription refused").into())
            }
            "subscriptions/listen" if ms > 0 => {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                Ok(json!({ "resultType": "complete" }))
            }
            "subscriptions/listen" => std::future::pending().await,
            "partial" => {
                ctx.as_ref()
                    .expect("behind a CancelLayer")
                    .cancelled()
                    .await;
                Ok(json!({ "partial": true }))
            }
            "wind_down_error" => {
                ctx.as_ref()
                    .expect("behind a CancelLayer")
                    .cancelled()
                    .await;
                Err(ErrorObject::new(-32801, "Content modified").into())
            }
            "panic" => panic!("the test handler panics on purpose"),
            "deadline" => {
                let ctx = ctx.as_ref().expect("behind a CancelLayer");
                let ms = ctx.deadline().map(|deadline| {
                    u64::try_from((deadline - Instant::now()).as_millis()).expect("a sane deadline")
                });
                Ok(json!({ "deadline_ms": ms }))
            }
            "progress" => Ok(progress(&req, ctx.as_ref(), &params).await),
            "call" => {
                let ctx = ctx.as_ref().expect("behind a CancelLayer");
                let peer = req
                    .peer()
                    .expect("a connection with a peer, and a CascadeLayer in the stack");
                Ok(self.call(guard.id.clone(), ctx, peer, &params).await)
            }
            _ if params["hang"] == true => std::future::pending().await,
            other => Err(ErrorObject::method_not_found(other).into()),
        };
        guard.finished = true;
        result
    }

    /// The `call` method: one request to the other side through the request's peer.
    async fn call(&self, parent: Id, ctx: &RequestContext, peer: Peer, params: &Value) -> Value {
        if params["after_cancel"] == true {
            ctx.cancelled().await;
        }
        let method = params["method"]
            .as_str()
            .expect("call: params.method")
            .to_owned();
        let mut call = peer.request(
            method.clone(),
            params.get("params").cloned().unwrap_or(Value::Null),
        );
        if let Some(ms) = params.get("timeout_ms").and_then(Value::as_u64) {
            call = call.timeout(Duration::from_millis(ms));
        }
        if params["no_timeout"] == true {
            call = call.no_timeout();
        }
        if let Some(wait) = params.get("wait").and_then(Value::as_bool) {
            call = call.wait_after_cancel(wait);
        }
        let id = call.id().clone();
        self.log().nested.push(Nested {
            parent,
            id: id.clone(),
            method,
            outcome: None,
        });
        let outcome = if params["spawn"] == true {
            let probe = self.clone();
            let id = id.clone();
            tokio::spawn(async move { probe.await_call(id, call).await })
                .await
                .expect("the call's task does not panic")
        } else {
            self.await_call(id.clone(), call).await
        };
        match outcome {
            Ok(result) => json!({ "nested": id, "ok": result }),
            Err(PeerError::Rejected(error)) => json!({ "nested": id, "error": error }),
            Err(other) => json!({ "nested": id, "failed": other.to_string() }),
        }
    }

    async fn await_call(&self, id: Id, call: PeerCall) -> Result<Value, PeerError> {
        let outcome = call.await;
        if let Some(nested) = self.log().nested.iter_mut().find(|n| n.id == id) {
            nested.outcome = Some(outcome.clone());
        }
        let _ = self.inner.outcome_tx.send((id, outcome.clone()));
        outcome
    }

    /// The requests `call` handlers sent to the other side, in the order they were sent.
    pub fn nested(&self) -> Vec<Nested> {
        self.log().nested.clone()
    }

    /// Wait until the call `id` (in this side's peer's id space) made by a `call` handler has ended, and give its
    /// outcome. Outcomes of other calls met on the way are consumed.
    pub async fn wait_outcome(&self, id: impl Into<Id>) -> Result<Value, PeerError> {
        let id = id.into();
        let mut rx = self.inner.outcome_rx.lock().await;
        let wait = async {
            while let Some((of, outcome)) = rx.recv().await {
                if of == id {
                    return outcome;
                }
            }
            panic!("the probe is alive");
        };
        tokio::time::timeout(PATIENCE, wait)
            .await
            .unwrap_or_else(|_| panic!("call {id} never ended"))
    }

    /// The deadline the context of request `id` showed when its handler started (`None` if it had none);
    /// `None` too if the handler never started.
    pub fn deadline_of(&self, id: impl Into<Id>) -> Option<Instant> {
        let id = id.into();
        self.log()
            .deadlines
            .iter()
            .find(|(of, _)| *of == id)
            .and_then(|(_, deadline)| *deadline)
    }

    /// The notifications whose handler slept `params.ms` and then finished, in the order they finished.
    pub fn notifications_done(&self) -> Vec<(String, Value)> {
        self.log().notifications_done.clone()
    }

    fn log(&self) -> MutexGuard<'_, Log> {
        self.inner.log.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many handlers started.
    pub fn started(&self) -> usize {
        self.log().started.len()
    }

    /// The handlers that started, in order.
    pub fn started_list(&self) -> Vec<Started> {
        self.log().started.clone()
    }

    /// How every handler that started has ended so far, in the order they ended.
    pub fn ended(&self) -> Vec<Ended> {
        self.log().ended.clone()
    }

    /// How the handler of request `id` ended, if it did.
    pub fn ended_of(&self, id: impl Into<Id>) -> Option<Ended> {
        let id = id.into();
        self.log().ended.iter().find(|e| e.id == id).cloned()
    }

    /// How many handlers started and have not ended.
    pub fn running(&self) -> usize {
        let log = self.log();
        log.started.len() - log.ended.len()
    }

    /// The notifications that reached the handler, in order.
    pub fn notifications(&self) -> Vec<(String, Value)> {
        self.log().notifications.clone()
    }

    /// Wait until the handler of request `id` has started (the deterministic signal to send a cancel on).
    /// Start signals of other requests met on the way are consumed.
    pub async fn wait_started(&self, id: impl Into<Id>) {
        let id = id.into();
        let mut rx = self.inner.started_rx.lock().await;
        let wait = async {
            while let Some(started) = rx.recv().await {
                if started.id == id {
                    return;
                }
            }
            panic!("the probe is alive");
        };
        tokio::time::timeout(PATIENCE, wait)
            .await
            .unwrap_or_else(|_| panic!("handler {id} never started"));
    }

    /// Wait until the next notification reaches the handler.
    pub async fn wait_notification(&self) -> (String, Value) {
        let mut rx = self.inner.notified_rx.lock().await;
        tokio::time::timeout(PATIENCE, rx.recv())
            .await
            .expect("no notification reached the handler")
            .expect("the probe is alive")
    }
}

/// The `progress` method: report `steps` times, every `every` ms, through the request's progress handle.
async fn progress(req: &Request, ctx: Option<&RequestContext>, params: &Value) -> Value {
    let steps = params.get("steps").and_then(Value::as_u64).unwrap_or(3);
    let every = params.get("every").and_then(Value::as_u64).unwrap_or(0);
    let touch = params["touch"] == true;
    let handle = req.progress();
    let token = handle.as_ref().map(|h| h.token().clone());
    let mut reports = 0u64;
    for step in 1..=steps {
        tokio::time::sleep(Duration::from_millis(every)).await;
        match &handle {
            Some(handle) => {
                let update = ProgressUpdate::new(step as f64)
                    .total(steps as f64)
                    .message(format!("step {step}"));
                if handle.report(update) {
                    reports += 1;
                }
            }
            None if touch => ctx.expect("behind a CancelLayer").touch(),
            None => {}
        }
    }
    // Dropped before the answer: LSP's `end` goes out before the reply.
    drop(handle);
    json!({ "token": token, "reports": reports })
}

/// Records how a handler ended, whichever way it ends: returning, its future dropped, or a panic.
struct Guard {
    probe: Probe,
    id: Id,
    method: String,
    ctx: Option<RequestContext>,
    finished: bool,
}

impl Drop for Guard {
    fn drop(&mut self) {
        let ended = Ended {
            id: self.id.clone(),
            method: std::mem::take(&mut self.method),
            end: if self.finished {
                End::Finished
            } else {
                End::Stopped
            },
            reason: self.ctx.as_ref().and_then(RequestContext::reason),
        };
        self.probe.log().ended.push(ended);
    }
}

/// A registry's counters, minus the in-flight count (which must be 0 at the end of every test, and is checked by
/// [`Conn::finish`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Requests registered.
    pub registered: u64,
    /// Registered requests whose handler's outcome was the reply.
    pub completed: u64,
    /// Registered requests that ended cancelled.
    pub cancelled: u64,
    /// Cancels that arrived for an id not in flight.
    pub early_cancels: u64,
    /// Early cancels remembered now.
    pub remembered: usize,
}

impl Counts {
    /// The counters of `registry` now.
    pub fn of(registry: &Registry) -> Self {
        let stats = registry.stats();
        Self {
            registered: stats.registered,
            completed: stats.completed,
            cancelled: stats.cancelled,
            early_cancels: stats.early_cancels,
            remembered: stats.remembered,
        }
    }
}

impl Counts {
    /// `registered` requests, `completed` of them answered by their handler's outcome, `cancelled` ended
    /// cancelled; no early cancels.
    pub fn new(registered: u64, completed: u64, cancelled: u64) -> Self {
        Self {
            registered,
            completed,
            cancelled,
            ..Self::default()
        }
    }

    /// These counters, with `early_cancels` cancels for ids not in flight, `remembered` of them remembered now.
    pub fn early(self, early_cancels: u64, remembered: usize) -> Self {
        Self {
            early_cancels,
            remembered,
            ..self
        }
    }
}

/// A connection to a [`Server`] running in its own task, seen from the peer's side.
pub struct Conn {
    framing: Framing,
    writer: Option<Box<dyn AsyncWrite + Send + Unpin>>,
    reader: Option<BufReader<Box<dyn AsyncRead + Send + Unpin>>>,
    registry: Registry,
    connection: Connection,
    // Set when other connections share the registry: the end checks only this connection's requests.
    shares_scope: bool,
    server: Option<JoinHandle<io::Result<()>>>,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("framing", &self.framing)
            .field("registry", &self.registry)
            .finish()
    }
}

/// The bounds a service needs to be served in a spawned task.
pub trait Served:
    Service<Request, Response = Option<Response>, Error = Self::E, Future = Self::F> + Send + 'static
{
    /// The service's error.
    type E: Into<BoxError> + Send + 'static;
    /// The service's future.
    type F: Send + 'static;
}

impl<S> Served for S
where
    S: Service<Request, Response = Option<Response>> + Send + 'static,
    S::Error: Into<BoxError> + Send + 'static,
    S::Future: Send + 'static,
{
    type E = S::Error;
    type F = S::Future;
}

impl Conn {
    /// Serve `server` over a pair of in-memory pipes (one per direction, so the client can close its sending side
    /// alone, as a peer closing its stdout does).
    pub fn start<S: Served>(server: Server<S>, framing: Framing) -> Self {
        let (client_out, server_in) = tokio::io::duplex(PIPE_SIZE);
        let (server_out, client_in) = tokio::io::duplex(PIPE_SIZE);
        Self::over(
            server,
            framing,
            (server_in, server_out),
            (client_in, client_out),
        )
    }

    /// Serve `server` over any pair of streams: the server reads `server_io.0` and writes `server_io.1`; the client
    /// reads `client_io.0` and writes `client_io.1`.
    pub fn over<S, SR, SW, CR, CW>(
        server: Server<S>,
        framing: Framing,
        server_io: (SR, SW),
        client_io: (CR, CW),
    ) -> Self
    where
        S: Served,
        SR: AsyncRead + Unpin + Send + 'static,
        SW: AsyncWrite + Unpin + Send + 'static,
        CR: AsyncRead + Unpin + Send + 'static,
        CW: AsyncWrite + Unpin + Send + 'static,
    {
        let registry = server.registry().clone();
        let connection = server.connection().clone();
        let (server_reader, server_writer) = server_io;
        let task = tokio::spawn(server.serve(server_reader, server_writer, framing));
        let (client_reader, client_writer) = client_io;
        let reader: Box<dyn AsyncRead + Send + Unpin> = Box::new(client_reader);
        Self {
            framing,
            writer: Some(Box::new(client_writer)),
            reader: Some(BufReader::new(reader)),
            registry,
            connection,
            shares_scope: false,
            server: Some(task),
        }
    }

    /// The LSP stack (`Content-Length` framing) over `probe`'s handler.
    pub fn lsp(probe: &Probe) -> Self {
        Self::serve(CancelStack::lsp(), probe, Framing::ContentLength)
    }

    /// The ACP stack (NDJSON) over `probe`'s handler.
    pub fn acp(probe: &Probe) -> Self {
        Self::serve(CancelStack::acp(), probe, Framing::Ndjson)
    }

    /// The ACP draft stack, declared (NDJSON), over `probe`'s handler.
    pub fn acp_draft(probe: &Probe) -> Self {
        Self::serve(CancelStack::acp_draft(), probe, Framing::Ndjson)
    }

    /// The ACP draft stack with this side's declaration given (NDJSON), over `probe`'s handler.
    pub fn acp_draft_declared(probe: &Probe, declared: bool) -> Self {
        let stack = CancelStack::new(AcpDraft::new().declared(declared));
        Self::serve(stack, probe, Framing::Ndjson)
    }

    /// The MCP stack (NDJSON) over `probe`'s handler.
    pub fn mcp(probe: &Probe) -> Self {
        Self::serve(CancelStack::mcp(), probe, Framing::Ndjson)
    }

    /// `stack` over `probe`'s handler, served with a default [`Server`].
    pub fn serve<L>(stack: L, probe: &Probe, framing: Framing) -> Self
    where
        L: tower::Layer<Handler>,
        L::Service: Served,
    {
        let service = ServiceBuilder::new().layer(stack).service(probe.service());
        Self::start(Server::new(service), framing)
    }

    /// `stack` over `probe`'s handler, served by a [`Server`] that `configure` sets up (a drain timeout, a close
    /// grace, ...). `configure` may also keep what it needs, such as the server's
    /// [`shutdown_handle`](Server::shutdown_handle).
    pub fn serve_configured<L>(
        stack: L,
        probe: &Probe,
        framing: Framing,
        configure: impl FnOnce(Server<L::Service>) -> Server<L::Service>,
    ) -> Self
    where
        L: tower::Layer<Handler>,
        L::Service: Served,
    {
        let service = ServiceBuilder::new().layer(stack).service(probe.service());
        Self::start(configure(Server::new(service)), framing)
    }

    /// `stack` over `probe`'s handler, served by a [`Server`] whose scope speaks `dialect`, so that its connection
    /// has a [`Peer`], which the test uses to send requests to this raw client, frames it reads off the wire with
    /// [`Conn::recv`].
    pub fn with_peer<L, D>(stack: L, probe: &Probe, framing: Framing, dialect: D) -> (Self, Peer)
    where
        L: tower::Layer<Handler>,
        L::Service: Served,
        D: tower_cancel::Dialect,
    {
        let service = ServiceBuilder::new().layer(stack).service(probe.service());
        let server = Server::new(service).in_scope(Scope::with_dialect(dialect));
        let peer = server.peer().expect("a scope with a dialect gives a peer");
        (Self::start(server, framing), peer)
    }

    /// The connection's registry.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// This connection shares its registry with others: when it ends, check that none of *its* requests is left
    /// (the others' may still run), not that the registry is empty.
    pub fn sharing_scope(mut self) -> Self {
        self.shares_scope = true;
        self
    }

    /// The connection's session state (the dialect's per-conversation facts).
    pub fn session(&self) -> &SessionState {
        self.connection.session()
    }

    /// The registry's counters now.
    pub fn counts(&self) -> Counts {
        Counts::of(&self.registry)
    }

    /// Send one message, framed exactly as a peer frames it: `Content-Length: N\r\n\r\n` + the bytes, or the bytes
    /// and a newline.
    pub async fn send(&mut self, message: &str) {
        let frame = self.frame(message);
        self.send_raw(frame.as_bytes()).await;
    }

    /// Send several messages in one write, so the server reads them back to back.
    pub async fn send_together(&mut self, messages: &[&str]) {
        let frames: String = messages.iter().map(|m| self.frame(m)).collect();
        self.send_raw(frames.as_bytes()).await;
    }

    /// `message` framed for this connection.
    pub fn frame(&self, message: &str) -> String {
        frame(message, self.framing)
    }

    /// Write raw bytes, exactly as given.
    pub async fn send_raw(&mut self, bytes: &[u8]) {
        let writer = self.writer.as_mut().expect("the sending side is open");
        writer.write_all(bytes).await.expect("the server reads");
        writer.flush().await.expect("the server reads");
    }

    /// The next reply on the wire, as its exact JSON text. Fails the test if none comes within [`PATIENCE`] or
    /// the server closed the connection.
    pub async fn recv(&mut self) -> String {
        tokio::time::timeout(PATIENCE, self.read_frame())
            .await
            .expect("no reply within the patience")
            .expect("the server closed the connection instead of replying")
    }

    /// The next reply, parsed.
    pub async fn recv_json(&mut self) -> Value {
        let text = self.recv().await;
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("reply is not JSON ({e}): {text}"))
    }

    /// Assert that the next reply on the wire is exactly `reply`, but for the order of objects' keys
    /// ([`same_json`]).
    pub async fn expect(&mut self, reply: &str) {
        assert_same_json(&self.recv().await, reply);
    }

    /// Read one frame and check its framing; `None` at the end of the stream.
    async fn read_frame(&mut self) -> Option<String> {
        let reader = self.reader.as_mut().expect("the receiving side is open");
        read_frame(reader, self.framing).await
    }

    /// Close the client's sending side: the server reads the end of the stream (the peer hung up).
    pub fn close(&mut self) {
        self.writer = None;
    }

    /// Close the sending side, read every reply the server still writes until it closes the connection, wait for
    /// `serve` to return `Ok`, and check that the registry is empty. Returns the replies read.
    pub async fn finish(mut self) -> Vec<String> {
        self.close();
        let mut rest = Vec::new();
        loop {
            let frame = tokio::time::timeout(PATIENCE, self.read_frame())
                .await
                .expect("the server did not close the connection");
            match frame {
                Some(frame) => rest.push(frame),
                None => break,
            }
        }
        self.join().await;
        rest
    }

    /// [`finish`](Conn::finish), asserting that no reply comes after the ones the test already read.
    pub async fn finish_quiet(self) {
        let rest = self.finish().await;
        assert!(rest.is_empty(), "unexpected replies: {rest:#?}");
    }

    /// Keep the sending side open and read every reply until the *server* closes the connection (a graceful
    /// shutdown), wait for `serve` to return `Ok`, and check that the registry is empty. Returns the replies read.
    pub async fn closed_by_server(mut self) -> Vec<String> {
        let mut rest = Vec::new();
        loop {
            let frame = tokio::time::timeout(PATIENCE, self.read_frame())
                .await
                .expect("the server did not close the connection");
            match frame {
                Some(frame) => rest.push(frame),
                None => break,
            }
        }
        self.join().await;
        rest
    }

    /// Drop both sides of the connection at once (the peer vanished), wait for `serve` to return `Ok`, and check
    /// that the registry is empty.
    pub async fn vanish(mut self) {
        self.writer = None;
        self.reader = None;
        self.join().await;
    }

    async fn join(&mut self) {
        let server = self.server.take().expect("joined once");
        tokio::time::timeout(PATIENCE, server)
            .await
            .expect("serve did not return")
            .expect("serve panicked")
            .expect("serve returned an error");
        if self.shares_scope {
            assert_eq!(
                self.connection.in_flight(),
                0,
                "requests of this connection left"
            );
            return;
        }
        assert!(
            self.registry.is_empty(),
            "registry not empty: {:?}",
            self.registry
        );
        assert_eq!(self.registry.stats().in_flight, 0);
        assert_eq!(
            self.registry.stats().groups,
            0,
            "the group index is empty too"
        );
    }
}

/// Read one frame off `reader` and check its framing exactly as a peer would see it (one `Content-Length`
/// header and a blank line, or one line without a carriage return); `None` at the end of the stream.
pub async fn read_frame<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    framing: Framing,
) -> Option<String> {
    let body = match framing {
        Framing::ContentLength => {
            let mut header = String::new();
            if reader.read_line(&mut header).await.expect("read") == 0 {
                return None;
            }
            let len: usize = header
                .strip_prefix("Content-Length: ")
                .and_then(|rest| rest.strip_suffix("\r\n"))
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("bad header line {header:?}"));
            let mut blank = String::new();
            reader.read_line(&mut blank).await.expect("read");
            assert_eq!(blank, "\r\n", "one header, then a blank line");
            let mut body = vec![0; len];
            reader.read_exact(&mut body).await.expect("a whole body");
            body
        }
        Framing::Ndjson => {
            let mut line = Vec::new();
            if reader.read_until(b'\n', &mut line).await.expect("read") == 0 {
                return None;
            }
            assert_eq!(line.pop(), Some(b'\n'), "a whole line");
            assert!(!line.contains(&b'\r'), "no carriage return");
            line
        }
    };
    Some(String::from_utf8(body).expect("frames are UTF-8"))
}

/// `message` framed as `framing` frames it: `Content-Length: N\r\n\r\n` + the bytes, or the bytes and a newline.
pub fn frame(message: &str, framing: Framing) -> String {
    match framing {
        Framing::ContentLength => format!("Content-Length: {}\r\n\r\n{message}", message.len()),
        Framing::Ndjson => {
            assert!(!message.contains('\n'), "one line per message: {message}");
            format!("{message}\n")
        }
    }
}

/// The set of a list of replies, for replies whose order on the wire is not defined; each in
/// [`canonical_json`] form, so that two sets compare as JSON.
pub fn set_of(replies: impl IntoIterator<Item = impl Into<String>>) -> BTreeSet<String> {
    replies
        .into_iter()
        .map(|reply| canonical_json(&reply.into()))
        .collect()
}

/// `text` with every object's keys sorted, compact; `text` itself when it is not JSON.
///
/// The order of an object's keys on the wire is serde_json's: sorted, unless its `preserve_order` feature is on,
/// and a build that includes agent-client-protocol (tower-cancel-acp, the examples) turns it on for every crate in
/// it. JSON gives key order no meaning, so the tests compare frames in this form.
pub fn canonical_json(text: &str) -> String {
    fn write(value: &Value, out: &mut String) {
        match value {
            Value::Object(map) => {
                let mut keys: Vec<_> = map.keys().collect();
                keys.sort();
                out.push('{');
                for (index, key) in keys.into_iter().enumerate() {
                    if index > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::from(key.as_str()).to_string());
                    out.push(':');
                    write(&map[key], out);
                }
                out.push('}');
            }
            Value::Array(items) => {
                out.push('[');
                for (index, item) in items.iter().enumerate() {
                    if index > 0 {
                        out.push(',');
                    }
                    write(item, out);
                }
                out.push(']');
            }
            other => out.push_str(&other.to_string()),
        }
    }
    match serde_json::from_str::<Value>(text) {
        Ok(value) => {
            let mut out = String::with_capacity(text.len());
            write(&value, &mut out);
            out
        }
        Err(_) => text.to_owned(),
    }
}

/// Whether `frame` is the JSON text `expected` but for the order of objects' keys (see [`canonical_json`]):
/// the same value, and the same length, so no space or key more.
pub fn same_json(frame: &str, expected: &str) -> bool {
    frame.len() == expected.len() && canonical_json(frame) == canonical_json(expected)
}

/// Asserts [`same_json`], showing both texts when they differ.
#[track_caller]
pub fn assert_same_json(frame: &str, expected: &str) {
    assert!(
        same_json(frame, expected),
        "the frame differs from the one expected\n   frame: {frame}\nexpected: {expected}"
    );
}

/// `ms` milliseconds.
pub fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

/// Assert that `elapsed` is `expected`: virtual time is exact up to the timer wheel's 1 ms resolution.
pub fn assert_about(elapsed: Duration, expected: Duration) {
    assert!(
        elapsed >= expected && elapsed <= expected + ms(1),
        "{elapsed:?} instead of {expected:?}"
    );
}

/// The ACP draft client's `initialize` (declaring `cancellation.request`), and the probe's answer to it.
pub const ACP_DRAFT_INITIALIZE: (&str, &str) = (
    r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{"cancellation":{"request":true}}}}"#,
    r#"{"jsonrpc":"2.0","id":0,"result":{"capabilities":{}}}"#,
);

/// A dialect as a raw client speaks it in these tests: its framing, the peer's cancel and the answer to a cancelled
/// request, byte for byte. What lets one [scenario](scenarios) serve every dialect.
pub trait Spoken: Dialect + Clone {
    /// `Content-Length` for LSP, NDJSON for the others.
    const FRAMING: Framing;
    /// The id the dialect's tests give the request under test (7 for LSP and MCP, 3 for ACP); the requests after it
    /// are `ID + 1`, `ID + 2`.
    const ID: i64;
    /// For a dialect where nothing is cancellable before `initialize` (the ACP draft): the `initialize` a client
    /// sends first, and its answer.
    const INITIALIZE: Option<(&'static str, &'static str)> = None;
    /// The peer's cancel of request `id`.
    fn cancel_frame(id: i64) -> String;
    /// The answer to request `id` cancelled by the peer; `None` where the dialect sends none (MCP).
    fn cancelled_frame(id: i64) -> Option<String>;
}

/// -32800 "Request cancelled" (LSP, ACP) or "Cancelled" (the ACP draft) for request `id`.
fn error_32800(id: i64, message: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-32800,"message":"{message}"}}}}"#)
}

impl Spoken for Lsp {
    const FRAMING: Framing = Framing::ContentLength;
    const ID: i64 = 7;
    fn cancel_frame(id: i64) -> String {
        format!(r#"{{"jsonrpc":"2.0","method":"$/cancelRequest","params":{{"id":{id}}}}}"#)
    }
    fn cancelled_frame(id: i64) -> Option<String> {
        Some(error_32800(id, "Request cancelled"))
    }
}

/// LSP with methods that opted in to ServerCancelled speaks as LSP does to a peer.
impl Spoken for tower_cancel::dialect::ServerCancellable<Lsp> {
    const FRAMING: Framing = Framing::ContentLength;
    const ID: i64 = Lsp::ID;
    fn cancel_frame(id: i64) -> String {
        Lsp::cancel_frame(id)
    }
    fn cancelled_frame(id: i64) -> Option<String> {
        Lsp::cancelled_frame(id)
    }
}

impl Spoken for Acp {
    const FRAMING: Framing = Framing::Ndjson;
    const ID: i64 = 3;
    fn cancel_frame(id: i64) -> String {
        format!(r#"{{"jsonrpc":"2.0","method":"$/cancel_request","params":{{"requestId":{id}}}}}"#)
    }
    fn cancelled_frame(id: i64) -> Option<String> {
        Some(error_32800(id, "Request cancelled"))
    }
}

impl Spoken for AcpDraft {
    const FRAMING: Framing = Framing::Ndjson;
    const ID: i64 = 3;
    const INITIALIZE: Option<(&'static str, &'static str)> = Some(ACP_DRAFT_INITIALIZE);
    fn cancel_frame(id: i64) -> String {
        Lsp::cancel_frame(id)
    }
    fn cancelled_frame(id: i64) -> Option<String> {
        Some(error_32800(id, "Cancelled"))
    }
}

impl Spoken for Mcp {
    const FRAMING: Framing = Framing::Ndjson;
    const ID: i64 = 7;
    fn cancel_frame(id: i64) -> String {
        format!(
            r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":{id}}}}}"#
        )
    }
    fn cancelled_frame(_: i64) -> Option<String> {
        None
    }
}

impl Conn {
    /// `stack` over `probe`'s handler, served with a default [`Server`] in its dialect's framing.
    pub fn stack<D: Spoken>(stack: CancelStack<D>, probe: &Probe) -> Self {
        Self::serve(stack, probe, D::FRAMING)
    }

    /// [`Conn::stack`], ready for cancellable requests: where nothing is cancellable before `initialize` (the ACP
    /// draft), its [`initialize`](Spoken::INITIALIZE) sent and answered, and the session initialized.
    pub async fn ready<D: Spoken>(stack: CancelStack<D>, probe: &Probe) -> Self {
        let mut conn = Self::stack(stack, probe);
        if let Some((initialize, reply)) = D::INITIALIZE {
            conn.send(initialize).await;
            conn.expect(reply).await;
            assert!(conn.session().is_initialized());
        }
        conn
    }

    /// [`finish_quiet`](Conn::finish_quiet), asserting that the registry's counters just before were `expected`.
    pub async fn finish_counting(self, expected: Counts) {
        let counts = self.counts();
        self.finish_quiet().await;
        assert_eq!(counts, expected);
    }

    /// [`finish`](Conn::finish), also giving the registry's counters once `serve` returned.
    pub async fn finish_counted(self) -> (Vec<String>, Counts) {
        let registry = self.registry.clone();
        let rest = self.finish().await;
        (rest, Counts::of(&registry))
    }

    /// Send `request` and read replies until its `reply`: the replies written before it (a reply that was due
    /// before `request` would have been written first).
    pub async fn replies_until(&mut self, request: &str, reply: &str) -> Vec<String> {
        self.send(request).await;
        let mut replies = Vec::new();
        loop {
            let next = self.recv().await;
            if next == reply {
                return replies;
            }
            replies.push(next);
        }
    }
}

/// The README's example, compiled as a doctest so that it stays true.
#[doc = include_str!("../../README.md")]
mod readme {}
