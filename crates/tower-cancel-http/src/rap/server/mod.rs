//! The tool-server side of RAP: discovery, invocations, and the runtime's cancel, close and status endpoints, as
//! one axum `Router`. See [`ToolServer`].

mod callback_url;
mod client_key;
mod client_limits;
mod deliver;
mod internal_addresses;
pub(crate) mod invoke;
pub(crate) mod notices;
mod public_resolver;
mod threads;

use std::{
    collections::HashSet,
    convert::Infallible,
    fmt,
    future::Future,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use axum::{
    extract::{Request as HttpRequest, State},
    response::{IntoResponse, Response as HttpResponse},
    routing::{get, post, Route},
    Router,
};
use http::StatusCode;
use tower::Layer;
use tower_cancel::bus::Replica;
use tower_service::Service;

use self::{
    client_key::ClientKeys, client_limits::ClientLimits, deliver::CallbackClient, threads::Thread,
};
use super::wire::Toolset;
use crate::{
    body,
    call::RpcService,
    front::{self, Endpoint, Front, Protocol, Settings},
    scopes::Scopes,
};

pub use self::{notices::MAX_NOTICE_BYTES, public_resolver::PublicResolver};

/// How long a thread with nothing running is kept (with the cancels remembered for calls not yet arrived).
pub const DEFAULT_THREAD_LINGER: Duration = Duration::from_secs(10 * 60);
/// How many threads are kept at most; an invocation of a new thread past it gets 503.
pub const DEFAULT_MAX_THREADS: usize = 100_000;
/// The default rate limit of each client's cancels and closes together, per second, with bursts of twice it (its
/// status questions have a quota of the same size of their own): a runtime that cancels 1000 calls at once (a
/// thread of a big fan-out interrupted) is served in full.
pub const DEFAULT_NOTICES_PER_SECOND: u32 = 1000;

/// A RAP tool server: serves a stack (a [`CancelStack`](tower_cancel::CancelStack) of the [`Rap`](super::Rap)
/// dialect over your tools) behind RAP's endpoints.
///
/// | endpoint | what it does |
/// |---|---|
/// | `GET /.well-known/rap-toolset` | the [`Toolset`] (no authentication: runtimes discover before they call) |
/// | `POST {endpoint's path}` | an [`Invocation`](super::Invocation): 200 at once, the call runs, its [`ToolResult`](super::ToolResult) is POSTed to `callback_url` |
/// | `POST /cancel_tool_call` | stops the call (`thread_id`, `tool_call_id`); 200, empty, whatever happened |
/// | `POST /close_thread` | stops every call of the thread and forgets it; 200, empty |
/// | `POST /tool_call_status` | `{"alive": bool}` for (`thread_id`, `tool_call_id`); false for one it does not know |
///
/// # The calls
///
/// Each thread is a scope, and its calls are requests of that scope keyed by their id: a call is (thread_id,
/// tool_call_id), so two threads may use the same tool call id. An invocation becomes a [`Request`](tower_cancel::Request)
/// whose method is the operation, whose params are the arguments and whose id is the tool call id, with a
/// [`ToolCall`](super::ToolCall), the HTTP request's headers and extensions in its extensions; the handler has
/// its [`RequestContext`](tower_cancel::RequestContext) as over any transport, and the stack's timeout and
/// cascade apply. An invocation that cannot be read, or whose ids or `callback_url` are invalid (or internal, see
/// [`refuse_private_callbacks`](Self::refuse_private_callbacks)), gets 400
/// (nowhere to send a result); an unknown operation or arguments that are not an object get 200 and an error
/// result. A second invocation of a call still in progress (a runtime's retry) is acknowledged and not run again.
/// Past a bound on calls in flight (the server's, [`max_in_flight`](Self::max_in_flight), or the thread's,
/// [`max_in_flight_per_thread`](Self::max_in_flight_per_thread)) or on threads kept
/// ([`thread_limits`](Self::thread_limits)), an invocation gets 503 with `Retry-After` and never runs.
///
/// # Cancellation
///
/// - `cancel_tool_call` cancels the call with reason `Peer`: its handler is stopped and **no result is sent**
///   (the runtime has already put its own "interrupted" result in the conversation; the spec allows a late one,
///   we send none). A cancel that arrives before its invocation is remembered for the thread (bounded) and the
///   call then never runs. Duplicates, unknown ids and calls already over do nothing.
/// - `close_thread` cancels every call of the thread the same way and forgets the thread.
/// - A timeout of the stack or a [`shutdown`](Self::shutdown) stops the call too, and then the runtime, which
///   is still waiting, gets an error result (`Error: the tool call timed out`).
/// - A result that could not be delivered (5xx, connection error) is tried again with backoff, 3 attempts in
///   all; a 4xx is not retried.
///
/// # Security
///
/// Give [`router_with`](Self::router_with) your authentication layer (for a shared secret,
/// [`require_bearer`](crate::auth::require_bearer)): it guards the invocation, cancel, close and status endpoints
/// alike, so a stranger's cancel gets 401 and cancels nothing. The notices are rate-limited per client
/// ([`notices_per_second`](Self::notices_per_second): past it a cancel or a close is answered 200 and does
/// nothing, a status question gets 429), bodies are bounded (invocations
/// [`max_body_bytes`](Self::max_body_bytes), notices [`MAX_NOTICE_BYTES`]; both within
/// [`body_timeout`](Self::body_timeout)), and ids are checked (see
/// [`ids`](super::ids)): an invalid notice is answered 200 and does nothing. Calls in flight are bounded, the
/// server's and each thread's (503 past them), and so are the threads kept. A token holder chooses where results
/// go: where it is not trusted as much as the server's network, turn on
/// [`refuse_private_callbacks`](Self::refuse_private_callbacks).
///
/// # Example
///
/// ```no_run
/// use serde_json::{json, Value};
/// use tower::{service_fn, ServiceBuilder};
/// use tower_cancel::{BoxError, CancelStack, Request};
/// use tower_cancel_http::{auth::require_bearer, rap::{Rap, ToolDef, ToolServer, Tools}};
///
/// # #[tokio::main] async fn main() -> std::io::Result<()> {
/// let tools = Tools::new().tool(
///     ToolDef::new("sleep", "Sleeps for ms milliseconds", json!({"type": "object"})),
///     service_fn(|req: Request| async move {
///         let args: Value = req.params_as()?;
///         let ms = args["ms"].as_u64().unwrap_or(0);
///         // Stopped right here when the runtime cancels the call.
///         tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
///         Ok::<_, BoxError>(json!(format!("slept {ms} ms")))
///     }),
/// );
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
/// let toolset = tools.toolset("sleepy", "http://127.0.0.1:8080/invoke");
/// let stack = ServiceBuilder::new().layer(CancelStack::new(Rap)).service(tools);
/// let app = ToolServer::new(toolset, stack).router_with(require_bearer("s3cret"));
/// // `serve` gives each request the peer's address, so that the rate limits tell apart two hosts using the
/// // same token.
/// tower_cancel_http::serve(listener, app).await
/// # }
/// ```
pub struct ToolServer<S> {
    endpoint: Endpoint<S, Config>,
}

/// The protocol's own configuration; the skeleton has the rest.
struct Config {
    toolset: Toolset,
    operations: HashSet<String>,
    invoke_path: String,
    threads: Scopes<Arc<str>, Thread>,
    callback: CallbackClient,
    // Whether `callback` is the server's own client (made again when the refusal of private callbacks changes),
    // not one the user gave.
    own_callback_client: bool,
    refuse_private_callbacks: bool,
    limiter: Option<Limiters>,
    counters: Counters,
}

// A shutdown keeps the threads: the runtimes of their calls are still owed an error result, and the threads'
// tokens stop a result on its way when the runtime cancels its call.
impl Protocol for Config {}

impl<S> ToolServer<S> {
    /// Serve `service` (a stack of the [`Rap`](super::Rap) dialect) as the toolset `toolset`. Invocations are
    /// taken at the path of `toolset.endpoint` (`/invoke` if it has none).
    pub fn new(toolset: Toolset, service: S) -> Self {
        let invoke_path = toolset
            .endpoint
            .parse::<http::Uri>()
            .ok()
            .map(|uri| uri.path().to_owned())
            .filter(|path| path.len() > 1)
            .unwrap_or_else(|| "/invoke".to_owned());
        let operations = toolset.tools.iter().map(|tool| tool.name.clone()).collect();
        let config = Config {
            toolset,
            operations,
            invoke_path,
            threads: Scopes::new(DEFAULT_THREAD_LINGER, DEFAULT_MAX_THREADS).evict_idle_when_full(),
            callback: CallbackClient {
                client: callback_client(false),
                attempts: 3,
                backoff: Duration::from_millis(250),
                attempt_timeout: Duration::from_secs(10),
            },
            own_callback_client: true,
            refuse_private_callbacks: false,
            limiter: Some(Limiters::new(DEFAULT_NOTICES_PER_SECOND)),
            counters: Counters::default(),
        };
        Self {
            endpoint: Endpoint::new("ToolServer", service, Settings::default(), config),
        }
    }

    /// The largest invocation body accepted (413 above it); [`DEFAULT_MAX_BODY_BYTES`](crate::DEFAULT_MAX_BODY_BYTES)
    /// by default.
    pub fn max_body_bytes(self, bytes: usize) -> Self {
        self.configure(|settings, _| settings.max_body_bytes = bytes)
    }

    /// How long a body may take to arrive, from when it is first read (an invocation is
    /// answered 408 past it, a notice ignored);
    /// [`DEFAULT_BODY_TIMEOUT`](crate::DEFAULT_BODY_TIMEOUT) by default.
    pub fn body_timeout(self, timeout: Duration) -> Self {
        self.configure(|settings, _| settings.body_timeout = timeout)
    }

    /// Rate-limit each client's notices to `per_second` (bursts of twice it); `None` for no limit.
    /// [`DEFAULT_NOTICES_PER_SECOND`] by default.
    ///
    /// A client is its credential (the `Authorization` header, kept hashed) and its address (axum's
    /// `ConnectInfo<SocketAddr>`, which [`serve`](crate::serve()) puts in each request, as does axum's
    /// `into_make_service_with_connect_info::<SocketAddr>()`; else clients are told apart by credential only), so one runtime flooding cannot starve another, even one
    /// using the same token from another host. Cancels and closes share one quota; status questions have one of
    /// their own, so that polling the status never uses up the quota of cancels.
    ///
    /// Past its quota, a cancel or a close is still answered 200 (the spec says they MUST be, whatever happened,
    /// and a runtime never retries them) but does nothing: it is logged and counted in
    /// [`ToolServerStats::rate_limited`]. A status question past its quota gets 429 with `Retry-After` (an
    /// answer would have to say whether the call is alive, and a question may be asked again).
    pub fn notices_per_second(self, per_second: Option<u32>) -> Self {
        self.configure(|_, config| config.limiter = per_second.map(Limiters::new))
    }

    /// The most calls in flight at once, over every thread (a call counts from its acceptance to its result's
    /// delivery); [`DEFAULT_MAX_IN_FLIGHT`](crate::front::DEFAULT_MAX_IN_FLIGHT) by default. An invocation past
    /// it is refused with 503 and `Retry-After` (the runtime records the refusal as the call's error) and never
    /// runs; it is counted in [`ToolServerStats::refused`] and [`FrontStats::busy`](crate::front::FrontStats::busy).
    pub fn max_in_flight(self, calls: usize) -> Self {
        self.configure(|settings, _| settings.max_in_flight = calls)
    }

    /// The most calls one thread has in flight at once
    /// ([`DEFAULT_MAX_IN_FLIGHT_PER_SCOPE`](crate::front::DEFAULT_MAX_IN_FLIGHT_PER_SCOPE) by default), so that
    /// one runtime's thread cannot take the whole server's room. Past it, 503 as past
    /// [`max_in_flight`](Self::max_in_flight).
    pub fn max_in_flight_per_thread(self, calls: usize) -> Self {
        self.configure(|settings, _| settings.max_in_flight_per_scope = calls)
    }

    /// How long a thread with nothing running is kept (so a cancel that comes before its invocation still
    /// applies), and how many threads at most. When the table is full, the thread idle for longest makes room
    /// (so cancels for threads that never come cannot lock out new ones); with every thread running, an invocation
    /// of a new thread gets 503.
    pub fn thread_limits(self, linger: Duration, max_threads: usize) -> Self {
        let threads = Scopes::new(linger, max_threads).evict_idle_when_full();
        self.configure(|_, config| config.threads = threads)
    }

    /// Run as one replica of several behind a load balancer, sharing `replica`'s bus (over Redis:
    /// `tower-cancel-redis`): a `/cancel_tool_call` that lands on this replica while the call runs on another
    /// reaches it there (the runtime POSTs its cancel to a base URL, not to the replica that took the invocation).
    /// A thread's scope is attached under the key `rap:thread:<thread_id>` on every replica. `/close_thread` and
    /// `/tool_call_status` stay local: they answer for this replica's calls only.
    pub fn replica(self, replica: Replica) -> Self {
        self.configure(|settings, _| settings.replica = Some(replica))
    }

    /// The HTTP client results are POSTed with (bring one with TLS, proxies or default headers for the
    /// callback's authentication); a plain `reqwest::Client` that follows no redirect by default. With
    /// [`refuse_private_callbacks`](Self::refuse_private_callbacks), build yours with
    /// `.dns_resolver(PublicResolver)` ([`PublicResolver`]), or the host names of callbacks are not checked (their
    /// IP addresses still are), and with no redirect policy, or a redirect could lead anywhere.
    pub fn callback_client(self, client: reqwest::Client) -> Self {
        self.configure(|_, config| {
            config.callback.client = client;
            config.own_callback_client = false;
        })
    }

    /// Refuse callback URLs that lead to the server's own host or its private network: loopback, private,
    /// link-local (cloud metadata services at `169.254.169.254`), shared (CGNAT), unique-local, multicast and
    /// unspecified addresses, IPv4 and IPv6 (an IPv4 address inside an IPv6 one is judged as itself). Off by
    /// default (a runtime on the same host or network is common); turn it on wherever the runtimes holding a
    /// token are not trusted as much as the server's network: a `callback_url` is the runtime's choice, and
    /// without this a token holder can aim results, and their retries, at internal services.
    ///
    /// - A URL whose host is an IP address (`http://127.0.0.1/`, `http://[::1]/`, `http://2130706433/`), or
    ///   `localhost` or a name under `.localhost` (always loopback), is refused at the invocation: 400,
    ///   `callback_url: an internal address ...`, and the call never runs.
    /// - Any other host name is resolved at each delivery and only its public addresses are connected to (so a
    ///   name that changes its answer between the invocation and the delivery gains nothing): a name with no
    ///   public address is not delivered to (counted in [`ToolServerStats::undelivered`], not retried).
    ///
    /// With a client of your own ([`callback_client`](Self::callback_client)), host names are checked only if
    /// it uses [`PublicResolver`].
    pub fn refuse_private_callbacks(self, refuse: bool) -> Self {
        self.configure(|_, config| {
            config.refuse_private_callbacks = refuse;
            if config.own_callback_client {
                config.callback.client = callback_client(refuse);
            }
        })
    }

    /// How a result that could not be delivered is tried again: `attempts` in all (at least 1), waiting
    /// `backoff` before the second and twice as long before each next one. 3 and 250 ms by default.
    pub fn callback_retries(self, attempts: u32, backoff: Duration) -> Self {
        self.configure(|_, config| {
            config.callback.attempts = attempts.max(1);
            config.callback.backoff = backoff;
        })
    }

    /// The toolset served at discovery.
    pub fn toolset(&self) -> &Toolset {
        &self.config().toolset
    }

    /// How many calls are running now (their handler, or their result's delivery). Zero means no call holds a
    /// registry entry or a task.
    pub fn in_flight(&self) -> usize {
        self.endpoint.state().running.in_use()
    }

    /// How many threads are kept now (running ones, and idle ones within their linger).
    pub fn threads(&self) -> usize {
        self.config().threads.len()
    }

    /// The server's counters; what every front end counts is [`front`](Self::front)'s.
    pub fn stats(&self) -> ToolServerStats {
        self.config().counters.snapshot()
    }

    /// Stop every call with reason `Shutdown` (their runtimes get an error result) and refuse new invocations
    /// from now on (503: the runtime records the refusal as the call's error). Returns how many calls this
    /// stopped. [`drained`](Self::drained) waits until their results are delivered.
    pub fn shutdown(&self) -> usize {
        self.endpoint.front().shutdown()
    }

    /// Resolves once no call runs and no result is on its way (see [`Front::drained`]).
    pub fn drained(&self) -> impl Future<Output = ()> + Send + 'static {
        self.endpoint.front().drained()
    }

    /// The skeleton's handle on this server (its stats, its shutdown), for code that treats every front end
    /// alike.
    pub fn front(&self) -> Front {
        self.endpoint.front()
    }

    fn config(&self) -> &Config {
        self.endpoint.protocol()
    }

    fn configure(self, change: impl FnOnce(&mut Settings, &mut Config)) -> Self {
        Self {
            endpoint: self.endpoint.configure(change),
        }
    }
}

impl<S: RpcService> ToolServer<S> {
    /// The endpoints, without authentication (for a trusted network, or behind a proxy that authenticates).
    pub fn router(&self) -> Router {
        self.router_with(tower::layer::util::Identity::new())
    }

    /// The endpoints, every one but discovery behind `auth` (an authentication layer: 401 for a stranger).
    pub fn router_with<L>(&self, auth: L) -> Router
    where
        L: Layer<Route> + Clone + Send + Sync + 'static,
        L::Service: Service<HttpRequest> + Clone + Send + Sync + 'static,
        <L::Service as Service<HttpRequest>>::Response: IntoResponse + 'static,
        <L::Service as Service<HttpRequest>>::Error: Into<Infallible> + 'static,
        <L::Service as Service<HttpRequest>>::Future: Send + 'static,
    {
        let guarded = Router::new()
            .route(&self.config().invoke_path, post(invoke::invoke::<S>))
            .route("/cancel_tool_call", post(notices::cancel_tool_call::<S>))
            .route("/close_thread", post(notices::close_thread::<S>))
            .route("/tool_call_status", post(notices::tool_call_status::<S>))
            .with_state(self.clone());
        let open = Router::new()
            .route("/.well-known/rap-toolset", get(discovery::<S>))
            .with_state(self.clone());
        front::mount(guarded, open, auth)
    }
}

async fn discovery<S>(State(server): State<ToolServer<S>>) -> HttpResponse {
    body::json_response(StatusCode::OK, &server.config().toolset)
}

/// A client that follows no redirect: a result goes to the URL the runtime gave, once per attempt. When private
/// callbacks are refused, it connects to a host name's public addresses only.
fn callback_client(refuse_private: bool) -> reqwest::Client {
    let builder = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none());
    let builder = if refuse_private {
        builder.dns_resolver(PublicResolver)
    } else {
        builder
    };
    builder.build().unwrap_or_else(|error| {
        // Only a TLS backend or a system configuration that cannot be loaded fails here.
        panic!("the callback client could not be built: {error}")
    })
}

/// The notices' quotas, each client's own: cancels and closes together, status questions apart.
struct Limiters {
    clients: ClientKeys,
    notices: ClientLimits,
    status: ClientLimits,
    // When a notice past its limit was last logged as a warning.
    last_warning: Mutex<Option<Instant>>,
}

impl Limiters {
    fn new(per_second: u32) -> Self {
        Self {
            clients: ClientKeys::default(),
            notices: ClientLimits::new(per_second, client_limits::MAX_CLIENTS),
            status: ClientLimits::new(per_second, client_limits::MAX_CLIENTS),
            last_warning: Mutex::default(),
        }
    }

    /// Whether a notice past its limit is to be logged as a warning: one a second at most.
    fn warn_now(&self) -> bool {
        // Nothing panics while the lock is held.
        let mut last = self
            .last_warning
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let due = last.map_or(true, |at| at.elapsed() >= Duration::from_secs(1));
        if due {
            *last = Some(Instant::now());
        }
        due
    }
}

impl<S: Clone> Clone for ToolServer<S> {
    fn clone(&self) -> Self {
        Self {
            endpoint: self.endpoint.clone(),
        }
    }
}

impl<S> fmt::Debug for ToolServer<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolServer")
            .field("toolset", &self.config().toolset.name)
            .field("invoke_path", &self.config().invoke_path)
            .field("in_flight", &self.in_flight())
            .finish_non_exhaustive()
    }
}

/// A tool server's counters since it started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ToolServerStats {
    /// Invocations accepted (200, and a result or a cancel to come).
    pub accepted: u64,
    /// Invocations refused (400, 413, 415, 503).
    pub refused: u64,
    /// Results the runtime took (2xx).
    pub delivered: u64,
    /// Results that could not be delivered (every attempt failed, or a 4xx).
    pub undelivered: u64,
    /// Calls that ended cancelled by the runtime, with no result sent.
    pub cancelled: u64,
    /// `cancel_tool_call` notices received (valid or not).
    pub cancels: u64,
    /// `close_thread` notices received (valid or not).
    pub closes: u64,
    /// Notices past their client's rate limit: cancels and closes answered 200 that did nothing, status questions
    /// answered 429.
    pub rate_limited: u64,
}

#[derive(Default)]
struct Counters {
    accepted: Counter,
    refused: Counter,
    delivered: Counter,
    undelivered: Counter,
    cancelled: Counter,
    cancels: Counter,
    closes: Counter,
    rate_limited: Counter,
}

impl Counters {
    fn snapshot(&self) -> ToolServerStats {
        ToolServerStats {
            accepted: self.accepted.get(),
            refused: self.refused.get(),
            delivered: self.delivered.get(),
            undelivered: self.undelivered.get(),
            cancelled: self.cancelled.get(),
            cancels: self.cancels.get(),
            closes: self.closes.get(),
            rate_limited: self.rate_limited.get(),
        }
    }
}

#[derive(Default)]
struct Counter(AtomicU64);

impl Counter {
    fn increment(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}
