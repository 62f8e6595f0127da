//! JSON-RPC over HTTP: one request (or batch) per POST, the reply in the response body.
//!
//! [`JsonRpc`] serves a [`CancelStack`](tower_cancel::CancelStack) (or any [`RpcService`]) as a
//! `tower::Service` of HTTP requests, to mount at a path of an axum `Router`:
//!
//! ```
//! use axum::{routing::{get, post_service}, Router};
//! use serde_json::{json, Value};
//! use tower::{service_fn, ServiceBuilder};
//! use tower_cancel::{BoxError, CancelStack, Request};
//! use tower_cancel_http::JsonRpc;
//!
//! let stack = ServiceBuilder::new()
//!     .layer(CancelStack::lsp())
//!     .service(service_fn(|req: Request| async move {
//!         Ok::<Value, BoxError>(json!({ "method": req.method() }))
//!     }));
//! let app: Router = Router::new()
//!     .route("/rpc", post_service(JsonRpc::new(stack)))
//!     .route("/health", get(|| async { "ok" }));
//! # let _ = app;
//! ```
//!
//! # What the client sees
//!
//! | the POST | the answer |
//! |---|---|
//! | a request | 200, its reply as JSON (an error reply too: JSON-RPC errors are not HTTP errors) |
//! | a batch (a JSON array) | 200, the array of the replies its requests have; 204 when none has one |
//! | a notification, a cancel, a reply | 204, no body |
//! | bytes that are not JSON / JSON that is not a message / `[]` | 200 with -32700 / -32600 / -32600 |
//! | a `Content-Type` other than JSON | 415 |
//! | a body over [`max_body_bytes`](JsonRpc::max_body_bytes) | 413 |
//! | a body not received within [`body_timeout`](JsonRpc::body_timeout) | 408 |
//! | a method other than POST | 405 |
//!
//! # Cancellation
//!
//! - **The client hangs up**: hyper drops the response, and every request of that POST still in flight is
//!   cancelled with reason `Disconnect`: its handler is stopped (its future dropped, or its token fired in
//!   cooperative mode). [`cancel_on_disconnect(false)`](JsonRpc::cancel_on_disconnect) lets them run to their
//!   end instead (their replies are dropped).
//! - **A cancel message** (the stack's dialect's: `$/cancelRequest` for LSP) reaches only requests of its own
//!   scope. By default each POST is a scope of its own, so a cancel POSTed separately reaches nothing: an
//!   anonymous caller can never cancel another's work. With [`scope_by_principal`](JsonRpc::scope_by_principal),
//!   the POSTs of one authenticated principal (a value your auth layer put in the request's extensions) share
//!   a scope: a cancel one of them POSTs reaches that principal's request of that id, on any POST, and never
//!   another principal's; a cancel that arrives before its request is remembered for a while.
//! - A timeout of the stack, a panic, a readiness failure: answered as over any transport.
//!
//! - **A shutdown** ([`JsonRpc::shutdown`]): every request in flight is cancelled with reason `Shutdown` and
//!   answered as the stack's dialect answers that (LSP and ACP: -32800); a request POSTed after it never runs
//!   and gets the same reply.
//!
//! # Deadlines
//!
//! A POST may say how long its requests may take: the header [`DEFAULT_TIMEOUT_HEADER`] (`Timeout-Ms: 250`,
//! milliseconds as an integer of at most ten digits; another name with [`JsonRpc::timeout_header`]) gives each
//! of its requests a [`RequestedTimeout`], and the stack's [`TimeoutLayer`](tower_cancel::timeout::TimeoutLayer)
//! the earlier of it and its own limit (a client can shorten the server's limit, never extend it). A value that
//! is not such an integer is ignored. A handler that calls on over HTTP sends what is left of its own deadline
//! with [`timeout_header_value`]; its calls through a [`Peer`](tower_cancel::Peer) carry it in
//! `params._meta.timeoutMs` themselves.
//!
//! The HTTP request's extensions (a principal, for one) are copied into each JSON-RPC request's extensions,
//! with the request's headers (`http::HeaderMap`), for the handler to read.

mod batch;
mod timeout_header;

use std::{
    convert::Infallible,
    fmt,
    future::Future,
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use axum::{
    body::Body,
    response::{IntoResponse, Response as HttpResponse},
    routing::{any_service, Route},
    Router,
};
use bytes::Bytes;
use http::{header, HeaderValue, Method, StatusCode};
use tower::Layer;
use tower_cancel::{
    bus::Replica, timeout::RequestedTimeout, Incoming, Message, Outbox, Response, Scope,
};
use tower_service::Service;

use self::batch::ReplyBudget;
pub use self::batch::{DEFAULT_MAX_BATCH_LEN, DEFAULT_MAX_BATCH_REPLY_BYTES};
pub use self::timeout_header::{timeout_header_value, DEFAULT_TIMEOUT_HEADER};
use crate::{
    body::{self, Messages},
    call::{self, RpcService},
    front::{
        self, busy_response, Endpoint, Front, FrontStats, OnHangUp, PrincipalScopes, Principals,
        Protocol, Settings,
    },
};

pub use crate::front::DEFAULT_PRINCIPAL_LINGER;

/// Serves a JSON-RPC service over HTTP POST, turning a client's hang-up into a cancel. See the
/// [module docs](self).
pub struct JsonRpc<S> {
    endpoint: Endpoint<S, Config>,
}

/// The protocol's own configuration; the skeleton has the rest.
struct Config {
    cancel_on_disconnect: bool,
    principals: Option<Box<dyn Principals>>,
    max_batch_len: usize,
    max_batch_reply_bytes: usize,
    // The header a POST's timeout comes in (`None`: read none).
    timeout_header: Option<http::HeaderName>,
}

impl Protocol for Config {}

impl<S> JsonRpc<S> {
    /// Serve `service`: each POST a scope of its own, a hang-up a cancel, bodies up to
    /// [`DEFAULT_MAX_BODY_BYTES`](crate::DEFAULT_MAX_BODY_BYTES).
    pub fn new(service: S) -> Self {
        let config = Config {
            cancel_on_disconnect: true,
            principals: None,
            max_batch_len: DEFAULT_MAX_BATCH_LEN,
            max_batch_reply_bytes: DEFAULT_MAX_BATCH_REPLY_BYTES,
            timeout_header: Some(DEFAULT_TIMEOUT_HEADER),
        };
        Self {
            endpoint: Endpoint::new("JsonRpc", service, Settings::default(), config),
        }
    }

    /// Whether a client that hangs up before its reply cancels its requests (reason `Disconnect`). On by
    /// default; off, they run to their end and their replies are dropped.
    pub fn cancel_on_disconnect(self, cancels: bool) -> Self {
        self.configure(|_, config| config.cancel_on_disconnect = cancels)
    }

    /// The largest body accepted (413 above it).
    pub fn max_body_bytes(self, bytes: usize) -> Self {
        self.configure(|settings, _| settings.max_body_bytes = bytes)
    }

    /// The most requests running at once over every POST ([`DEFAULT_MAX_IN_FLIGHT`](crate::front::DEFAULT_MAX_IN_FLIGHT)
    /// by default). A POST whose requests do not all fit is answered 503 with `Retry-After`, and none of them runs
    /// (a batch counts each of its requests; notifications, a cancel above all, need no room).
    pub fn max_in_flight(self, requests: usize) -> Self {
        self.configure(|settings, _| settings.max_in_flight = requests)
    }

    /// The most requests one principal runs at once, with [`scope_by_principal`](Self::scope_by_principal)
    /// ([`DEFAULT_MAX_IN_FLIGHT_PER_SCOPE`](crate::front::DEFAULT_MAX_IN_FLIGHT_PER_SCOPE) by default); past it,
    /// 503 as past [`max_in_flight`](Self::max_in_flight).
    pub fn max_in_flight_per_principal(self, requests: usize) -> Self {
        self.configure(|settings, _| settings.max_in_flight_per_scope = requests)
    }

    /// The most messages in a batch ([`DEFAULT_MAX_BATCH_LEN`] by default): a longer batch is answered with one
    /// -32600 error, and none of it runs.
    pub fn max_batch_len(self, messages: usize) -> Self {
        self.configure(|_, config| config.max_batch_len = messages)
    }

    /// The most bytes a batch's replies take, written out ([`DEFAULT_MAX_BATCH_REPLY_BYTES`] by default): a
    /// reply that would take them past it is replaced by a -32603 error with its id, so a batch's answer never
    /// holds more.
    pub fn max_batch_reply_bytes(self, bytes: usize) -> Self {
        self.configure(|_, config| config.max_batch_reply_bytes = bytes)
    }

    /// The header a POST's timeout is read from ([`DEFAULT_TIMEOUT_HEADER`], `Timeout-Ms`, by default; `None`:
    /// none is read). See [Deadlines](self#deadlines).
    pub fn timeout_header(self, name: Option<http::HeaderName>) -> Self {
        self.configure(|_, config| config.timeout_header = name)
    }

    /// How long a body may take to arrive, from when it is first read (408 past it);
    /// [`DEFAULT_BODY_TIMEOUT`](crate::DEFAULT_BODY_TIMEOUT) by default.
    pub fn body_timeout(self, timeout: Duration) -> Self {
        self.configure(|settings, _| settings.body_timeout = timeout)
    }

    /// Scope cancels by principal: the POSTs whose HTTP request carries the same `P` in its extensions (put
    /// there by an auth layer) share a scope, so that a cancel one of them POSTs reaches the principal's request
    /// of that id. A POST without a `P` is a scope of its own. A principal's scope is kept for
    /// [`DEFAULT_PRINCIPAL_LINGER`] after its last request, so that a cancel POSTed just before its request, or
    /// just after it ended, finds it.
    pub fn scope_by_principal<P>(self) -> Self
    where
        P: Clone + Eq + std::hash::Hash + Send + Sync + 'static,
    {
        self.scope_by_principal_with::<P>(DEFAULT_PRINCIPAL_LINGER, 100_000)
    }

    /// [`scope_by_principal`](Self::scope_by_principal) with how long an idle principal's scope is kept and
    /// how many principals' scopes are kept at most (a POST of a principal beyond them gets 503).
    pub fn scope_by_principal_with<P>(self, linger: Duration, max_principals: usize) -> Self
    where
        P: Clone + Eq + std::hash::Hash + Send + Sync + 'static,
    {
        let principals = PrincipalScopes::<P>::new(linger, max_principals);
        self.configure(|_, config| config.principals = Some(Box::new(principals)))
    }

    /// [`scope_by_principal`](Self::scope_by_principal) as one replica of several sharing `replica`'s bus (over
    /// Redis: `tower-cancel-redis`): each principal's scope is attached under the key
    /// `jsonrpc:principal:<principal>` (its `Display`), so a cancel a principal POSTs to this replica for a request
    /// running on another reaches it there. The principal is named as the canceller.
    pub fn scope_by_principal_on<P>(self, replica: Replica) -> Self
    where
        P: Clone + Eq + std::hash::Hash + std::fmt::Display + Send + Sync + 'static,
    {
        let principals = PrincipalScopes::<P>::named(DEFAULT_PRINCIPAL_LINGER, 100_000);
        self.configure(|settings, config| {
            settings.replica = Some(replica);
            config.principals = Some(Box::new(principals));
        })
    }

    /// How many requests are running now, over every POST (each runs on a task of its own until it is settled).
    /// Zero means no request of this endpoint holds a registry entry.
    pub fn in_flight(&self) -> usize {
        self.endpoint.state().running.in_use()
    }

    /// The counters (see [`FrontStats`]).
    pub fn stats(&self) -> FrontStats {
        self.endpoint.state().stats()
    }

    /// Shut down: every request in flight is cancelled with reason `Shutdown` and answered as the stack's dialect
    /// answers that (LSP, ACP: -32800), and every request POSTed from now on gets the same reply without running.
    /// Returns how many requests this cancelled. [`drained`](Self::drained) waits for their replies.
    pub fn shutdown(&self) -> usize {
        self.endpoint.front().shutdown()
    }

    /// Resolves once no request runs and no POST is being answered (see [`Front::drained`]).
    pub fn drained(&self) -> impl Future<Output = ()> + Send + 'static {
        self.endpoint.front().drained()
    }

    /// The skeleton's handle on this endpoint (its stats, its shutdown), for code that treats every front end
    /// alike.
    pub fn front(&self) -> Front {
        self.endpoint.front()
    }

    /// The service served.
    pub fn get_ref(&self) -> &S {
        &self.endpoint.service
    }

    fn configure(self, change: impl FnOnce(&mut Settings, &mut Config)) -> Self {
        Self {
            endpoint: self.endpoint.configure(change),
        }
    }
}

impl<S: RpcService> JsonRpc<S> {
    /// A `Router` serving JSON-RPC at `/rpc` (merge it into yours, or nest it).
    pub fn router(&self) -> Router {
        self.router_at("/rpc")
    }

    /// A `Router` serving JSON-RPC at `path`.
    pub fn router_at(&self, path: &str) -> Router {
        Router::new().route(path, any_service(self.clone()))
    }

    /// [`router`](Self::router), behind `auth` (an authentication layer: 401 for a stranger, whose POST is never
    /// read). A principal it puts in the request's extensions is what
    /// [`scope_by_principal`](Self::scope_by_principal) scopes by.
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

impl<S: Clone> Clone for JsonRpc<S> {
    fn clone(&self) -> Self {
        Self {
            endpoint: self.endpoint.clone(),
        }
    }
}

impl<S> fmt::Debug for JsonRpc<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let config = self.endpoint.protocol();
        f.debug_struct("JsonRpc")
            .field("cancel_on_disconnect", &config.cancel_on_disconnect)
            .field("max_body_bytes", &self.endpoint.settings().max_body_bytes)
            .field("by_principal", &config.principals.is_some())
            .finish_non_exhaustive()
    }
}

impl<S: RpcService> Service<http::Request<Body>> for JsonRpc<S> {
    type Response = HttpResponse;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<HttpResponse, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // Readiness is the stack's business, per request (its cancel layer is always ready).
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let endpoint = self.endpoint.clone();
        Box::pin(async move { Ok(serve(endpoint, request).await) })
    }
}

async fn serve<S: RpcService>(
    endpoint: Endpoint<S, Config>,
    request: http::Request<Body>,
) -> HttpResponse {
    let config = endpoint.protocol();
    let (parts, body) = request.into_parts();
    if parts.method != Method::POST {
        return (
            StatusCode::METHOD_NOT_ALLOWED,
            [(header::ALLOW, HeaderValue::from_static("POST"))],
        )
            .into_response();
    }
    if let Err(refused) = body::check_json(&parts.headers) {
        return (refused.status, refused.detail).into_response();
    }
    let bytes = match endpoint.read_body(body).await {
        Ok(bytes) => bytes,
        Err(refused) => return (refused.status, refused.detail).into_response(),
    };
    let principal = config
        .principals
        .as_ref()
        .and_then(|principals| principals.lease(&parts.extensions, endpoint.settings()));
    let (scope, quota, lease) = match principal {
        Some(Ok((scope, quota, lease))) => (scope, Some(quota), Some(lease)),
        Some(Err(_full)) => {
            return (StatusCode::SERVICE_UNAVAILABLE, "too many principals").into_response()
        }
        None => (Scope::new(), None, None),
    };
    let lease: Option<std::sync::Arc<dyn Send + Sync>> = lease.map(std::sync::Arc::from);

    let (batch, messages) = match body::parse(&bytes, Some(config.max_batch_len)) {
        Messages::One(message) => (false, vec![message]),
        Messages::Batch(messages) => (true, messages),
    };
    // Room for every request of the POST before any is received: all of them run, or none (503).
    let requests = messages
        .iter()
        .filter(|message| matches!(message, Ok(Message::Request(request)) if !request.is_notification()))
        .count();
    let front = endpoint.front();
    let mut room = match front.admit(requests, quota.as_ref()) {
        Ok(room) => room,
        Err(busy) => return busy_response(&busy),
    };
    // Nothing but the replies goes back over plain HTTP (no progress, no requests of the server's own).
    let link = front.link(
        scope.connect_exchange(Outbox::closed()),
        OnHangUp::cancel_if(config.cancel_on_disconnect),
    );
    let budget = batch.then(|| ReplyBudget::new(config.max_batch_reply_bytes));
    let requested = config
        .timeout_header
        .as_ref()
        .and_then(|name| timeout_header::requested(&parts.headers, name));
    let mut replies = Vec::with_capacity(messages.len());
    for message in messages {
        let message = match message {
            Ok(message) => message,
            Err(invalid) => {
                replies.push(Reply::Now(Response::error(invalid.id, invalid.error)));
                continue;
            }
        };
        match link.receive(message, Some(&parts)) {
            Incoming::Request(mut request) => {
                // Every request of the POST may take the time its header asks for; the stack's timeout layer
                // applies the earlier of it and its own limit.
                if let Some(timeout) = requested {
                    request.extensions_mut().insert(RequestedTimeout(timeout));
                }
                // A notification runs without a place of its own in the count (it has no reply to wait for, and a
                // cancel must never be refused); it is still counted while it runs.
                let place = match request.is_notification() {
                    true => front.counted(),
                    false => room.next().unwrap_or_else(|| front.counted()),
                };
                let hold = (lease.clone(), place);
                let budget = budget.clone();
                let task =
                    call::spawn(
                        endpoint.service.clone(),
                        request,
                        hold,
                        move |reply| match budget {
                            Some(budget) => budget.fit(reply),
                            None => batch::write(&reply),
                        },
                    );
                replies.push(Reply::Later(task));
            }
            // A reply from the client: over plain HTTP the server never sends requests, so it answers nothing.
            Incoming::Response(_) | Incoming::Consumed => {}
        }
    }
    drop(room);
    let mut answered = Vec::with_capacity(replies.len());
    for reply in replies {
        let reply = match reply {
            Reply::Now(reply) => Some(batch::write(&reply)),
            Reply::Later(task) => task.await.unwrap_or_default(),
        };
        answered.extend(reply);
    }
    // The link is the client's hang-up until here (see `OnHangUp`).
    drop(link);
    match answered.pop() {
        None => StatusCode::NO_CONTENT.into_response(),
        Some(reply) if !batch => json_bytes(Bytes::from(String::from(Box::<str>::from(reply)))),
        Some(last) => {
            answered.push(last);
            json_bytes(batch::array(&answered))
        }
    }
}

fn json_bytes(body: Bytes) -> HttpResponse {
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response()
}

/// A request's reply, written out: at once (an element that could not be read), or by its task.
enum Reply {
    Now(Response),
    Later(tokio::task::JoinHandle<Option<Box<serde_json::value::RawValue>>>),
}
