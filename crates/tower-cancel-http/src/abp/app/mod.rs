//! The app side of ABP: a WebSocket route that serves a stack of capability calls. See [`AbpApp`].

pub(crate) mod incoming;
mod limits;
mod outgoing;
mod reading;
mod refragment;
mod render;
mod session;
mod sessions;
mod upgrade;

use std::{
    convert::Infallible,
    fmt,
    future::Future,
    sync::{
        atomic::{AtomicU64, AtomicUsize, Ordering},
        Arc,
    },
    time::Duration,
};

use axum::{
    body::Body,
    response::IntoResponse,
    routing::{get, Route},
    Router,
};
use tower::Layer;
use tower_service::Service;

pub use self::limits::{
    DEFAULT_MAX_CALLS_PER_SESSION, DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_MAX_QUEUED_BYTES,
    DEFAULT_MAX_SESSIONS, DEFAULT_STALL_TIMEOUT,
};
use super::wire::{AppInfo, Capability};
use crate::{
    call::RpcService,
    front::{self, Endpoint, Front, Origins, Protocol, Settings},
};

/// An ABP app: serves a stack (a [`CancelStack`](tower_cancel::CancelStack) of the
/// [`Abp`](tower_cancel::dialect::Abp) dialect over your capabilities) over WebSocket, each connection one session.
///
/// A `capabilities/call` becomes a [`Request`](tower_cancel::Request): its method the capability, its params the
/// call's, its id the `callId` (a [`String`](tower_cancel::Id::String) id), with `options.timeout` as a
/// [`RequestedTimeout`](tower_cancel::timeout::RequestedTimeout) and `options.progressToken` in
/// [`CallOptions`](tower_cancel::dialect::abp::CallOptions). The handler sees a
/// [`RequestContext`](tower_cancel::RequestContext) as any JSON-RPC handler does; its result is the call's `data`,
/// its error the call's `error` (return [`abp::error`](tower_cancel::dialect::abp::error) to choose the ABP code).
///
/// # Sessions
///
/// | the agent sends | the app answers |
/// |---|---|
/// | `initialize` | `initialize-result {sessionId, protocolVersion, app, capabilities, features}` |
/// | `initialize` again | an `error` envelope `ALREADY_INITIALIZED` with the `initialize`'s id |
/// | a call before `initialize` | `call-result {success: false, error: {code: NOT_INITIALIZED, retryable: true}}` |
/// | a cancel before `initialize` | `cancel-result {callId, cancelled: false, error: {code: NOT_INITIALIZED}}` |
/// | a call with a `callId` in flight in the session | `call-result {success: false, error: {code: INVALID_PARAMS}}`; the running call is untouched |
/// | a call past the session's limit | `call-result {success: false, error: {code: RATE_LIMITED, retryable: true}}` |
/// | an envelope that is not one (not JSON, no `type`, an id over 256 bytes) | an `error` envelope `INVALID_MESSAGE` (an extension); the session goes on |
/// | an envelope of a type the app does not take | an `error` envelope `NOT_IMPLEMENTED` with its id |
/// | `shutdown`, or the socket closing | every call of the session cancelled (reason Disconnect), the socket closed |
/// | anything, once the app [shuts down](Self::shutdown) | see below |
///
/// # Bounds
///
/// What an agent can make the app hold is bounded, each bound with a builder method:
///
/// | the agent | the app |
/// |---|---|
/// | opens a WebSocket from a page whose `Origin` is not allowed ([`origins`](Self::origins): loopback by default) | 403, no session; an upgrade without `Origin` (not a browser) is let through |
/// | opens more sessions than [`max_sessions`](Self::max_sessions) ([`DEFAULT_MAX_SESSIONS`]) | 503 with `Retry-After`, no session |
/// | sends a message over [`max_message_bytes`](Self::max_message_bytes) ([`DEFAULT_MAX_MESSAGE_BYTES`]) | the socket is closed |
/// | sends a large message, then little | the message's memory goes with it: the socket keeps no read buffer of its size (its frames are read in pieces of 16 KiB) |
/// | has more calls running than [`max_calls_per_session`](Self::max_calls_per_session), or the app more than [`max_in_flight`](Self::max_in_flight) | `RATE_LIMITED` (see above) |
/// | does not read what it is answered (envelopes, pongs) | past [`max_queued_bytes`](Self::max_queued_bytes) waiting, the session reads nothing more from it; if that lasts the [`stall_timeout`](Self::stall_timeout), the session is closed as a disconnect (its calls cancelled). Progress reports past the same bound are dropped |
///
/// A pong counts as what it is, an answer to a ping: a ping flood from an agent that does not read stops the
/// reading as an envelope flood does.
///
/// # Cancels
///
/// A `capabilities/cancel` goes to the session's [`Connection::acknowledge_cancel`](tower_cancel::Connection::acknowledge_cancel),
/// and its `cancel-result` says what the call's lifecycle decided, atomically with the race against completion
/// (the table of [`Abp`](tower_cancel::dialect::Abp)). The `cancel-result` is sent before the cancelled call's
/// `call-result`. A cancel whose call the session has not received is answered "Operation not found", and that is
/// all it does: one WebSocket delivers in order, so a cancel cannot overtake its call, and the session keeps no
/// early cancels ([`Dialect::remembers_early_cancels`](tower_cancel::Dialect::remembers_early_cancels)). A call
/// with that `callId` that comes after it runs as any other. A call received but not yet running (waiting behind
/// the service's backpressure) is in flight already: a cancel skips it (`cancelled: true`, and its result says
/// `cancelled: true` without the capability running). The session remembers how its last 4096 calls ended (1 MiB
/// of ids at most); a cancel of a call forgotten there is answered as one of an unknown call.
///
/// # Shutdown
///
/// [`shutdown`](Self::shutdown) cancels every call of every session with reason `Shutdown`: each is answered
/// `call-result {success: false, cancelled: true, error: {code: CANCELLED, retryable: true}}`. A session goes on
/// reading until its calls are answered, and a call it reads meanwhile is answered the same without running;
/// then the app closes the WebSocket. A WebSocket opened after the shutdown began is refused (503).
///
/// # Example
///
/// ```no_run
/// use tower::{service_fn, ServiceBuilder};
/// use tower_cancel::{CancelStack, Request};
/// use tower_cancel_http::abp::{wire::AppInfo, AbpApp};
///
/// # #[tokio::main] async fn main() {
/// let stack = ServiceBuilder::new().layer(CancelStack::abp()).service(service_fn(|req: Request| async move {
///     let ctx = req.context().expect("set by the stack").clone();
///     tokio::select! {
///         _ = ctx.token().cancelled() => Err(tower_cancel::ErrorObject::internal_error("stopped")),
///         _ = tokio::time::sleep(std::time::Duration::from_secs(5)) => Ok(serde_json::json!({ "done": true })),
///     }
/// }));
/// let app = AbpApp::new(stack).app(AppInfo { id: "demo".into(), name: "Demo".into(), version: "1.0.0".into() })
///     .capabilities(["render"]);
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
/// tower_cancel_http::serve(listener, app.router()).await.unwrap();
/// # }
/// ```
pub struct AbpApp<S> {
    endpoint: Endpoint<S, Config>,
}

/// The protocol's own configuration; the skeleton has the rest (the largest message is its body limit).
pub(crate) struct Config {
    pub(crate) info: AppInfo,
    pub(crate) capabilities: Vec<Capability>,
    pub(crate) max_calls_per_session: usize,
    pub(crate) max_sessions: usize,
    pub(crate) max_queued_bytes: usize,
    pub(crate) stall_timeout: Duration,
    pub(crate) origins: Origins,
    pub(crate) counters: Counters,
}

// Each session watches the shutdown itself: it answers its calls, then closes its WebSocket.
impl Protocol for Config {}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    // Shared with each session's slot, queue and reading, which count themselves.
    pub(crate) sessions: Arc<AtomicUsize>,
    pub(crate) queued_bytes: Arc<AtomicUsize>,
    pub(crate) stalled: Arc<AtomicUsize>,
    pub(crate) stalls: AtomicU64,
    pub(crate) calls: AtomicU64,
    pub(crate) cancels: AtomicU64,
    pub(crate) bad_envelopes: AtomicU64,
}

/// What an app has seen, for logs and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AppStats {
    /// WebSocket sessions open now.
    pub sessions: usize,
    /// Calls running now, in every session (each on a task of its own).
    pub in_flight: usize,
    /// Calls taken so far.
    pub calls: u64,
    /// Cancels acknowledged so far.
    pub cancels: u64,
    /// Frames that were not envelopes, or envelopes of a type the app does not take.
    pub bad_envelopes: u64,
    /// Bytes the app has answered and not yet handed to the sockets (envelopes and pongs), in every session:
    /// each session's share is bounded by [`AbpApp::max_queued_bytes`], give or take the last answer.
    pub queued_bytes: usize,
    /// Sessions whose reading is stopped now: more than their bound waits for an agent that does not read.
    pub reading_stopped: usize,
    /// Sessions closed so far because their reading stayed stopped for the stall timeout.
    pub stalled: u64,
}

impl<S: Clone> Clone for AbpApp<S> {
    fn clone(&self) -> Self {
        Self {
            endpoint: self.endpoint.clone(),
        }
    }
}

impl<S> fmt::Debug for AbpApp<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AbpApp")
            .field("app", &self.endpoint.protocol().info)
            .field("stats", &self.stats())
            .finish()
    }
}

impl<S> AbpApp<S> {
    /// Stop (see [Shutdown](Self#shutdown)): every session's calls are cancelled (answered `cancelled: true`,
    /// reason Shutdown), calls that come later are answered the same without running, and the sessions are closed
    /// once their results are sent. Returns how many calls this cancelled. [`drained`](Self::drained) waits until
    /// every session is closed.
    pub fn shutdown(&self) -> usize {
        self.endpoint.front().shutdown()
    }

    /// Resolves once no call runs and no session is open (see [`Front::drained`]).
    pub fn drained(&self) -> impl Future<Output = ()> + Send + 'static {
        self.endpoint.front().drained()
    }

    /// Calls running now, in every session.
    pub fn in_flight(&self) -> usize {
        self.endpoint.state().running.in_use()
    }

    /// The counters; what every front end counts is [`front`](Self::front)'s.
    pub fn stats(&self) -> AppStats {
        let counters = &self.endpoint.protocol().counters;
        AppStats {
            sessions: counters.sessions.load(Ordering::Acquire),
            in_flight: self.in_flight(),
            calls: counters.calls.load(Ordering::Relaxed),
            cancels: counters.cancels.load(Ordering::Relaxed),
            bad_envelopes: counters.bad_envelopes.load(Ordering::Relaxed),
            queued_bytes: counters.queued_bytes.load(Ordering::Acquire),
            reading_stopped: counters.stalled.load(Ordering::Acquire),
            stalled: counters.stalls.load(Ordering::Relaxed),
        }
    }

    /// The skeleton's handle on this app (its stats, its shutdown), for code that treats every front end alike.
    pub fn front(&self) -> Front {
        self.endpoint.front()
    }
}

impl<S: RpcService> AbpApp<S> {
    /// An app serving `service`, with no capabilities listed and an app id of `tower-cancel`.
    pub fn new(service: S) -> Self {
        let config = Config {
            info: AppInfo {
                id: "tower-cancel".into(),
                name: "tower-cancel".into(),
                version: env!("CARGO_PKG_VERSION").into(),
            },
            capabilities: Vec::new(),
            max_calls_per_session: DEFAULT_MAX_CALLS_PER_SESSION,
            max_sessions: DEFAULT_MAX_SESSIONS,
            max_queued_bytes: DEFAULT_MAX_QUEUED_BYTES,
            stall_timeout: DEFAULT_STALL_TIMEOUT,
            origins: Origins::default(),
            counters: Counters::default(),
        };
        let settings = Settings {
            max_body_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            ..Settings::default()
        };
        Self {
            endpoint: Endpoint::new("AbpApp", service, settings, config),
        }
    }

    /// Who the app says it is in `initialize-result`.
    pub fn app(self, info: AppInfo) -> Self {
        self.configure(|_, config| config.info = info)
    }

    /// The capabilities listed in `initialize-result` (all available). Calls of others still reach the service,
    /// which answers them as it will (a service that does not know a method answers -32601:
    /// `UNKNOWN_CAPABILITY`).
    pub fn capabilities<I: IntoIterator<Item = N>, N: Into<String>>(self, names: I) -> Self {
        let capabilities = names
            .into_iter()
            .map(|name| Capability {
                name: name.into(),
                available: true,
            })
            .collect();
        self.configure(|_, config| config.capabilities = capabilities)
    }

    /// The largest WebSocket message read ([`DEFAULT_MAX_MESSAGE_BYTES`] by default): the app's body limit.
    pub fn max_message_bytes(self, bytes: usize) -> Self {
        self.configure(|settings, _| settings.max_body_bytes = bytes)
    }

    /// How many calls one session may have running ([`DEFAULT_MAX_CALLS_PER_SESSION`] by default); a call past
    /// it is answered `RATE_LIMITED` (retryable) without running.
    pub fn max_calls_per_session(self, calls: usize) -> Self {
        self.configure(|_, config| config.max_calls_per_session = calls)
    }

    /// How many sessions may be open at once ([`DEFAULT_MAX_SESSIONS`] by default): an upgrade past it is
    /// refused 503 with `Retry-After`.
    pub fn max_sessions(self, sessions: usize) -> Self {
        self.configure(|_, config| config.max_sessions = sessions)
    }

    /// How many bytes of answers (envelopes, pongs) may wait for an agent that does not read before its session
    /// stops reading from it ([`DEFAULT_MAX_QUEUED_BYTES`] by default); progress reports
    /// past as much again are dropped.
    pub fn max_queued_bytes(self, bytes: usize) -> Self {
        self.configure(|_, config| config.max_queued_bytes = bytes)
    }

    /// How long a session's reading may stay stopped ([`max_queued_bytes`](Self::max_queued_bytes) of answers
    /// waiting, all that time) before the session is closed as a disconnect ([`DEFAULT_STALL_TIMEOUT`] by
    /// default); also how long the last answers of a session that ends may take to be written.
    pub fn stall_timeout(self, timeout: Duration) -> Self {
        self.configure(|_, config| config.stall_timeout = timeout)
    }

    /// Which `Origin`s may open a session (403 for others; [`Origins::Loopback`] by default), as
    /// [`McpHttp::origins`](crate::McpHttp::origins): a WebSocket is not bound by the browser's same-origin
    /// policy, so a page of any site could otherwise reach an app on the user's machine.
    pub fn origins(self, origins: Origins) -> Self {
        self.configure(|_, config| config.origins = origins)
    }

    /// How many calls may run at once over every session
    /// ([`DEFAULT_MAX_IN_FLIGHT`](crate::front::DEFAULT_MAX_IN_FLIGHT) by default); a call past it is answered
    /// `RATE_LIMITED` (retryable) without running. A cancel is never refused.
    pub fn max_in_flight(self, calls: usize) -> Self {
        self.configure(|settings, _| settings.max_in_flight = calls)
    }

    fn configure(self, change: impl FnOnce(&mut Settings, &mut Config)) -> Self {
        Self {
            endpoint: self.endpoint.configure(change),
        }
    }

    /// A `Router` serving ABP at `/abp` (merge it into yours, or nest it).
    pub fn router(&self) -> Router {
        self.router_at("/abp")
    }

    /// A `Router` serving ABP at `path`.
    pub fn router_at(&self, path: &str) -> Router {
        let endpoint = self.endpoint.clone();
        Router::new().route(
            path,
            get(move |request: http::Request<Body>| upgrade::to_session(request, endpoint)),
        )
    }

    /// [`router`](Self::router), behind `auth` (an authentication layer: 401 for a stranger, before the
    /// WebSocket is opened).
    pub fn router_with<L>(&self, auth: L) -> Router
    where
        L: Layer<Route> + Clone + Send + Sync + 'static,
        L::Service: Service<http::Request<Body>> + Clone + Send + Sync + 'static,
        <L::Service as Service<http::Request<Body>>>::Response: IntoResponse + 'static,
        <L::Service as Service<http::Request<Body>>>::Error: Into<Infallible> + 'static,
        <L::Service as Service<http::Request<Body>>>::Future: Send + 'static,
    {
        front::mount(self.router(), Router::new(), auth)
    }
}
