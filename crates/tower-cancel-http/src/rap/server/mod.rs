//! The tool-server side of RAP: discovery, invocations, and the runtime's cancel, close and status endpoints, as
//! one axum `Router`. See [`ToolServer`].

mod deliver;
pub(crate) mod invoke;
pub(crate) mod notices;
mod threads;

use std::{
    collections::HashSet,
    convert::Infallible,
    fmt,
    future::Future,
    num::NonZeroU32,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

use axum::{
    extract::{Request as HttpRequest, State},
    response::{IntoResponse, Response as HttpResponse},
    routing::{get, post, Route},
    Router,
};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use http::StatusCode;
use tower::Layer;
use tower_cancel::bus::Replica;
use tower_service::Service;

use self::{deliver::CallbackClient, threads::Thread};
use super::wire::Toolset;
use crate::{
    body,
    call::RpcService,
    front::{self, Endpoint, Front, Protocol, Settings},
    scopes::Scopes,
};

pub use self::notices::MAX_NOTICE_BYTES;

/// How long a thread with nothing running is kept (with the cancels remembered for calls not yet arrived).
pub const DEFAULT_THREAD_LINGER: Duration = Duration::from_secs(10 * 60);
/// How many threads are kept at most; an invocation of a new thread past it gets 503.
pub const DEFAULT_MAX_THREADS: usize = 100_000;
/// The default rate limit of the cancel, close and status endpoints together, per second (bursts of twice it).
pub const DEFAULT_NOTICES_PER_SECOND: u32 = 200;

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
/// cascade apply. An invocation that cannot be read, or whose ids or `callback_url` are invalid, gets 400
/// (nowhere to send a result); an unknown operation or arguments that are not an object get 200 and an error
/// result. A second invocation of a call still in progress (a runtime's retry) is acknowledged and not run again.
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
/// alike, so a stranger's cancel gets 401 and cancels nothing. The notices are rate-limited
/// ([`notices_per_second`](Self::notices_per_second), 429 past it), bodies are bounded (invocations
/// [`max_body_bytes`](Self::max_body_bytes), notices [`MAX_NOTICE_BYTES`]), and ids are checked (see
/// [`ids`](super::ids)): an invalid notice is answered 200 and does nothing.
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
/// axum::serve(listener, app).await
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
                client: callback_client(),
                attempts: 3,
                backoff: Duration::from_millis(250),
                attempt_timeout: Duration::from_secs(10),
            },
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

    /// Rate-limit the notices to `per_second` (bursts of twice it), 429 past it; `None` for no limit.
    /// [`DEFAULT_NOTICES_PER_SECOND`] by default. Cancels and closes share one quota; status questions have one of
    /// their own, so that polling the status never uses up the quota of cancels. The quotas are the server's,
    /// shared by every runtime that passes authentication.
    pub fn notices_per_second(self, per_second: Option<u32>) -> Self {
        self.configure(|_, config| config.limiter = per_second.map(Limiters::new))
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
    /// callback's authentication); a plain `reqwest::Client` by default.
    pub fn callback_client(self, client: reqwest::Client) -> Self {
        self.configure(|_, config| config.callback.client = client)
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
        self.endpoint.state().running.get()
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

/// A client that follows no redirect: a result goes to the URL the runtime gave, once per attempt.
fn callback_client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap_or_default()
}

/// The notices' quotas: cancels and closes together, status questions apart.
struct Limiters {
    notices: DefaultDirectRateLimiter,
    status: DefaultDirectRateLimiter,
}

impl Limiters {
    fn new(per_second: u32) -> Self {
        let rate = NonZeroU32::new(per_second).unwrap_or(NonZeroU32::MIN);
        let burst = rate.saturating_mul(NonZeroU32::new(2).expect("2 is not 0"));
        let quota = Quota::per_second(rate).allow_burst(burst);
        Self {
            notices: RateLimiter::direct(quota),
            status: RateLimiter::direct(quota),
        }
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
    /// Notices answered 429.
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
