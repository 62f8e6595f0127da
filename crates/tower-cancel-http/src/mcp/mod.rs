//! MCP over Streamable HTTP, both revisions in one endpoint: `2025-11-25` (sessions) and `2026-07-28`
//! (stateless, where closing a request's stream is its cancel).
//!
//! [`McpHttp`] serves an MCP [`CancelStack`](tower_cancel::CancelStack) (`CancelStack::mcp()` over your handler)
//! as a `tower::Service` of HTTP requests, to mount at a path of an axum `Router`:
//!
//! ```
//! use axum::{routing::any_service, Router};
//! use serde_json::{json, Value};
//! use tower::{service_fn, ServiceBuilder};
//! use tower_cancel::{BoxError, CancelStack, Request};
//! use tower_cancel_http::McpHttp;
//!
//! let stack = ServiceBuilder::new()
//!     .layer(CancelStack::mcp())
//!     .service(service_fn(|req: Request| async move {
//!         Ok::<Value, BoxError>(json!({ "method": req.method() }))
//!     }));
//! let app: Router = Router::new().route("/mcp", any_service(McpHttp::new(stack)));
//! # let _ = app;
//! ```
//!
//! # Which revision a request speaks
//!
//! Chosen per POST: a request whose `params._meta` carries `io.modelcontextprotocol/protocolVersion`, or a POST
//! whose `MCP-Protocol-Version` header is a [stateless version](STATELESS_VERSIONS), is **stateless**; anything
//! else speaks the **session** revision (an `initialize`, or a POST naming its `Mcp-Session-Id`). The handler
//! finds the choice in the request's extensions ([`Revision`]), with the HTTP headers (`http::HeaderMap`) and the
//! HTTP request's own extensions; it answers `initialize` (sessions) and `server/discover` (stateless) itself.
//!
//! # `2025-11-25`: sessions
//!
//! - `initialize` (without a session id) opens a session: its reply (always a JSON body) carries a new
//!   `Mcp-Session-Id`, 128 random bits from the operating system. A failed `initialize` opens nothing.
//! - Every later POST names its session: without the header 400, with an unknown one 404 (the client then
//!   initializes again). A session is a scope: a `notifications/cancelled` POSTed in it cancels the request of
//!   that id in that session only, wherever it was POSTed, and one that arrives before its request waits for it.
//! - A request's reply is a JSON body, or an SSE stream with its progress first (see below). Notifications and
//!   replies POSTed get 202. `MCP-Protocol-Version`, when sent, must be a [session version](SESSION_VERSIONS)
//!   (400 otherwise). GET answers 405 (no server-initiated stream); DELETE ends the session and cancels what it
//!   has in flight with reason `Disconnect`.
//! - A client that hangs up does **not** cancel its request (the revision says it SHOULD NOT: the client
//!   cancels with `notifications/cancelled`); the request runs to its end and its reply is dropped.
//!   [`McpHttp::cancel_on_disconnect_in_sessions`] makes a hang-up a cancel here too.
//!
//! # `2026-07-28`: stateless
//!
//! - No session (the header is ignored, none is minted), no `initialize`: each request carries its version and
//!   client information in `_meta`. `MCP-Protocol-Version` must equal `_meta`'s version, `Mcp-Method` the method,
//!   `Mcp-Name` the tool, prompt or resource named (`=?base64?...?=` values decoded): 400 with -32020
//!   (`HeaderMismatch`) otherwise; a version this server does not speak gets 400 with -32022 and the list of
//!   those it does; a `_meta` without its required keys 400 with -32602. A JSON reply with -32601 is sent with
//!   404, and one with -32602 with 400. GET and DELETE answer 405.
//! - **Closing a request's response stream is its cancel**: the handler is stopped with reason `Disconnect`
//!   and nothing more is written for it. A `subscriptions/listen` stream ends the same way when the client
//!   closes it.
//!
//! # Replies, progress and keep-alive
//!
//! A request's response waits for the first thing to send: its reply makes a JSON body; a notification
//! (progress, reported through the request's [`Progress`](tower_cancel::progress::Progress)) makes an SSE stream
//! that carries everything the request sends, in order, and ends with its reply; and a request quiet for the
//! [keep-alive interval](McpHttp::keep_alive) gets an SSE stream too, whose comment lines let a vanished client
//! be noticed. SSE events carry no ids: streams are not resumed. A client that accepts only JSON never gets a
//! stream (its progress reports are refused).
//!
//! Both revisions check `Origin` ([`Origins`]; 403), refuse a body over the limit (413) or slower than its
//! [timeout](McpHttp::body_timeout) (408) and a content type that is not JSON (415), and answer a body that is not a JSON-RPC message with 400 and its error.
//!
//! # Shutdown
//!
//! [`McpHttp::shutdown`] cancels every request in flight with reason `Shutdown`: each is answered -32603 (the
//! client is still waiting), as JSON or at the end of its stream. Every session is ended, so a later POST in one
//! gets 404, as the session revision says of a session the server ended, and a new `initialize` gets 503. A
//! stateless request that comes after never runs and is answered -32603 the same way.

pub(crate) mod accept;
mod reply;
pub(crate) mod revision;
mod session;

use std::{
    convert::Infallible,
    fmt,
    future::Future,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use axum::{
    body::Body,
    response::{IntoResponse, Response as HttpResponse},
    routing::{any_service, Route},
    Router,
};
use http::{header, request::Parts, HeaderMap, HeaderValue, Method, StatusCode};
use tower::Layer;
use tower_cancel::{
    bus::Replica, dialect::Mcp, CancelReason, ErrorObject, Incoming, Message, Outbox, Request,
    Response, Scope,
};
use tower_service::Service;

// The check every browser-facing front end shares; still named here, where it was first.
pub use self::revision::{
    Revision, HEADER_MISMATCH, SESSION_VERSIONS, STATELESS_VERSIONS, UNSUPPORTED_PROTOCOL_VERSION,
};
use self::{
    reply::{Responding, Shape},
    revision::{Refusal, Spoken, PROTOCOL_VERSION},
    session::Sessions,
};
pub use crate::front::Origins;
use crate::{
    body::{self, Messages},
    call::{self, RpcService},
    front::{self, busy_response, Endpoint, Front, FrontStats, OnHangUp, Protocol, Settings},
    scopes::Scoped,
};

/// The session header of the `2025-11-25` revision.
pub const SESSION_ID: &str = "mcp-session-id";
/// How often a quiet SSE stream gets a keep-alive comment line, by default.
pub const DEFAULT_KEEP_ALIVE: Duration = Duration::from_secs(15);
/// How long a session with no request is kept, by default.
pub const DEFAULT_SESSION_IDLE: Duration = Duration::from_secs(30 * 60);
/// How many sessions are kept at most, by default. An `initialize` beyond them takes the place of the session
/// idle for longest with nothing in flight (its client gets 404 and initializes again); only when every session
/// has a request in flight is it refused, 503.
pub const DEFAULT_MAX_SESSIONS: usize = 10_000;

/// Serves MCP over Streamable HTTP, both revisions. See the [module docs](self).
pub struct McpHttp<S> {
    endpoint: Endpoint<S, Config>,
}

/// The protocol's own configuration; the skeleton has the rest.
struct Config {
    sessions: Sessions,
    origins: Origins,
    cancel_in_sessions: bool,
    keep_alive: Duration,
}

impl Protocol for Config {
    fn shut_down(&self) {
        // The server ends its sessions: a later POST in one gets 404, as the revision says.
        self.sessions.close_all(CancelReason::Shutdown);
    }
}

impl<S> McpHttp<S> {
    /// Serve `service` (an MCP stack): loopback origins, a hang-up a cancel only where the revision says so,
    /// keep-alive every [`DEFAULT_KEEP_ALIVE`], sessions idle for [`DEFAULT_SESSION_IDLE`] dropped.
    pub fn new(service: S) -> Self {
        let config = Config {
            sessions: Sessions::new(DEFAULT_SESSION_IDLE, DEFAULT_MAX_SESSIONS),
            origins: Origins::default(),
            cancel_in_sessions: false,
            keep_alive: DEFAULT_KEEP_ALIVE,
        };
        Self {
            endpoint: Endpoint::new("McpHttp", service, Settings::default(), config),
        }
    }

    /// Which `Origin`s may call (403 for others).
    pub fn origins(self, origins: Origins) -> Self {
        self.configure(|_, config| config.origins = origins)
    }

    /// Whether a client that hangs up cancels its request in the session revision too (off by default: that
    /// revision says a disconnect SHOULD NOT be read as a cancel). In the stateless revision it always does.
    pub fn cancel_on_disconnect_in_sessions(self, cancels: bool) -> Self {
        self.configure(|_, config| config.cancel_in_sessions = cancels)
    }

    /// How long a request may stay quiet before its response becomes an SSE stream, and the interval of the
    /// stream's keep-alive comment lines.
    pub fn keep_alive(self, interval: Duration) -> Self {
        self.configure(|_, config| config.keep_alive = interval)
    }

    /// The largest body accepted (413 above it).
    pub fn max_body_bytes(self, bytes: usize) -> Self {
        self.configure(|settings, _| settings.max_body_bytes = bytes)
    }

    /// How long a body may take to arrive, from when it is first read (408 past it);
    /// [`DEFAULT_BODY_TIMEOUT`](crate::DEFAULT_BODY_TIMEOUT) by default.
    pub fn body_timeout(self, timeout: Duration) -> Self {
        self.configure(|settings, _| settings.body_timeout = timeout)
    }

    /// The most requests running at once, over every session and stateless request
    /// ([`DEFAULT_MAX_IN_FLIGHT`](crate::front::DEFAULT_MAX_IN_FLIGHT) by default). A request past it is answered
    /// 503 with `Retry-After` and never runs; notifications (`notifications/cancelled` above all) need no room.
    pub fn max_in_flight(self, requests: usize) -> Self {
        self.configure(|settings, _| settings.max_in_flight = requests)
    }

    /// The most requests one session runs at once
    /// ([`DEFAULT_MAX_IN_FLIGHT_PER_SCOPE`](crate::front::DEFAULT_MAX_IN_FLIGHT_PER_SCOPE) by default): in the
    /// session revision a client that hangs up does not cancel, so this is what bounds the requests one client
    /// leaves running. Past it, 503 as past [`max_in_flight`](Self::max_in_flight).
    pub fn max_in_flight_per_session(self, requests: usize) -> Self {
        self.configure(|settings, _| settings.max_in_flight_per_scope = requests)
    }

    /// How long a session with no request is kept, and how many sessions are kept at most (see
    /// [`DEFAULT_MAX_SESSIONS`] for a full table).
    pub fn session_limits(self, idle: Duration, max_sessions: usize) -> Self {
        self.configure(|_, config| {
            let on_end = config.sessions.end_hook();
            config.sessions = Sessions::new(idle, max_sessions).on_end(on_end);
        })
    }

    /// Call `on_end` with a session's id once the session is over: ended (DELETE, a shutdown, a failed
    /// `initialize`), expired or evicted, and none of its requests still running. For what a handler keeps per
    /// session (a framework's own server per session, such as `tower-cancel-rmcp`'s). A panic in `on_end` is
    /// caught and logged.
    ///
    /// ```
    /// use serde_json::Value;
    /// use tower::service_fn;
    /// use tower_cancel::{BoxError, Request};
    /// use tower_cancel_http::McpHttp;
    ///
    /// let service = service_fn(|_req: Request| async { Ok::<Value, BoxError>(Value::Null) });
    /// let mcp = McpHttp::new(service).on_session_end(|id| println!("session {id} is over"));
    /// # let _ = mcp;
    /// ```
    pub fn on_session_end(self, on_end: impl Fn(&str) + Send + Sync + 'static) -> Self {
        self.configure(|_, config| {
            let on_end = Some(session::OnEnd(Arc::new(on_end)));
            config.sessions = config.sessions.clone().on_end(on_end);
        })
    }

    /// Run as one replica of several behind a load balancer, sharing `replica`'s bus (over Redis:
    /// `tower-cancel-redis`). In the session revision, a session lives on the replica that minted it, and its
    /// requests must be routed there (affinity by `Mcp-Session-Id`); its `notifications/cancelled` may land on
    /// any replica: one that does not hold the session hands the cancel to the others (202), and the replica
    /// running the request stops it as if the cancel had been POSTed to it. Any other POST naming a session this
    /// replica does not hold gets 404, as without replicas. Each session's scope is attached under the key
    /// `mcp:session:<id>`. The stateless revision needs nothing: there, closing the stream is the cancel.
    pub fn replica(self, replica: Replica) -> Self {
        self.configure(|settings, _| settings.replica = Some(replica))
    }

    /// How many requests are running now, over every session and stateless POST. Zero means no request of this
    /// endpoint holds a registry entry.
    pub fn in_flight(&self) -> usize {
        self.endpoint.state().running.in_use()
    }

    /// How many sessions are open.
    pub fn sessions(&self) -> usize {
        self.endpoint.protocol().sessions.len()
    }

    /// The counters (see [`FrontStats`]); [`sessions`](Self::sessions) is this front end's own.
    pub fn stats(&self) -> FrontStats {
        self.endpoint.state().stats()
    }

    /// Shut down (see [the module docs](self#shutdown)): every request in flight is cancelled with reason
    /// `Shutdown` and answered -32603, every session is ended, and new requests are refused. Returns how many
    /// requests this cancelled. [`drained`](Self::drained) waits for their answers.
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

impl<S: RpcService> McpHttp<S> {
    /// A `Router` serving MCP at `/mcp` (merge it into yours, or nest it).
    pub fn router(&self) -> Router {
        self.router_at("/mcp")
    }

    /// A `Router` serving MCP at `path` (POST, and DELETE for sessions; other methods get 405).
    pub fn router_at(&self, path: &str) -> Router {
        Router::new().route(path, any_service(self.clone()))
    }

    /// [`router`](Self::router), behind `auth` (an authentication layer: 401 for a stranger).
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

impl<S: Clone> Clone for McpHttp<S> {
    fn clone(&self) -> Self {
        Self {
            endpoint: self.endpoint.clone(),
        }
    }
}

impl<S> fmt::Debug for McpHttp<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let config = self.endpoint.protocol();
        f.debug_struct("McpHttp")
            .field("origins", &config.origins)
            .field(
                "cancel_on_disconnect_in_sessions",
                &config.cancel_in_sessions,
            )
            .field("keep_alive", &config.keep_alive)
            .field("sessions", &config.sessions.len())
            .finish_non_exhaustive()
    }
}

impl<S: RpcService> Service<http::Request<Body>> for McpHttp<S> {
    type Response = HttpResponse;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<HttpResponse, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let post = Post {
            front: self.endpoint.front(),
            endpoint: self.endpoint.clone(),
        };
        Box::pin(async move { Ok(post.serve(request).await) })
    }
}

/// One HTTP request's view of the endpoint.
struct Post<S> {
    endpoint: Endpoint<S, Config>,
    front: Front,
}

impl<S: RpcService> Post<S> {
    fn config(&self) -> &Config {
        self.endpoint.protocol()
    }

    async fn serve(self, request: http::Request<Body>) -> HttpResponse {
        let (parts, body) = request.into_parts();
        if !self.config().origins.allows(&parts.headers) {
            tracing::debug!(origin = ?parts.headers.get(header::ORIGIN), "origin refused");
            return error(
                StatusCode::FORBIDDEN,
                None,
                ErrorObject::new(-32600, "Origin not allowed"),
            );
        }
        match parts.method {
            Method::POST => self.post(parts, body).await,
            Method::DELETE if parts.headers.contains_key(SESSION_ID) => self.delete(&parts),
            _ => (
                StatusCode::METHOD_NOT_ALLOWED,
                [(header::ALLOW, HeaderValue::from_static("POST"))],
            )
                .into_response(),
        }
    }

    fn delete(&self, parts: &Parts) -> HttpResponse {
        let id = parts
            .headers
            .get(SESSION_ID)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        if self.config().sessions.close(id, CancelReason::Disconnect) {
            tracing::debug!(session = id, "session ended by the client");
            StatusCode::OK.into_response()
        } else {
            session_not_found(None)
        }
    }

    async fn post(self, parts: Parts, body: Body) -> HttpResponse {
        if let Err(refused) = body::check_json(&parts.headers) {
            return (refused.status, refused.detail).into_response();
        }
        let Some(sse) = accept::accepts(&parts.headers) else {
            return (
                StatusCode::NOT_ACCEPTABLE,
                "Accept must allow application/json or text/event-stream",
            )
                .into_response();
        };
        let bytes = match self.endpoint.read_body(body).await {
            Ok(bytes) => bytes,
            Err(refused) => return (refused.status, refused.detail).into_response(),
        };
        let message = match body::parse(&bytes, None) {
            Messages::One(Ok(message)) => message,
            Messages::One(Err(invalid)) => {
                return error(StatusCode::BAD_REQUEST, invalid.id, invalid.error)
            }
            Messages::Batch(_) => unreachable!("batches are parsed as one invalid message"),
        };
        match revision::classify(&parts.headers, &message) {
            Ok(Spoken::Session) => self.session(parts, message, sse).await,
            Ok(Spoken::Stateless(version)) => self.stateless(parts, message, sse, version).await,
            Err(Refusal {
                status,
                error: refusal,
            }) => error(status, message_id(&message), refusal),
        }
    }

    async fn stateless(
        self,
        parts: Parts,
        message: Message,
        sse: bool,
        version: String,
    ) -> HttpResponse {
        let Message::Request(request) = message else {
            let refusal =
                ErrorObject::invalid_request("clients send no responses in this revision");
            return error(StatusCode::BAD_REQUEST, None, refusal);
        };
        let revision = Revision::Stateless { version };
        // Each stateless request is a scope of its own: nothing else can name it, and its stream is its cancel.
        let scope = Scope::with_dialect(Mcp);
        let (outbox, receiver) = Outbox::new();
        let link = self
            .front
            .link(scope.connect_exchange(outbox), OnHangUp::Cancel);
        let request = match link.receive(Message::Request(request), Some(&parts)) {
            Incoming::Request(request) => with_revision(request, revision),
            Incoming::Response(_) | Incoming::Consumed => {
                return StatusCode::ACCEPTED.into_response()
            }
        };
        let notification = request.is_notification();
        let admitted = match self.front.admit_one(notification, None) {
            Ok(admitted) => admitted,
            Err(busy) => return busy_response(&busy),
        };
        let task = self
            .front
            .spawn(self.endpoint.service.clone(), request, admitted, ());
        if notification {
            call::reply(task).await;
            return StatusCode::ACCEPTED.into_response();
        }
        let responding = Responding {
            receiver,
            task,
            link,
            hold: (),
        };
        reply::respond(
            responding,
            self.shape(sse, revision::stateless_status, HeaderMap::new()),
        )
        .await
    }

    async fn session(self, parts: Parts, message: Message, sse: bool) -> HttpResponse {
        let id = message_id(&message);
        if let Err(Refusal {
            status,
            error: refusal,
        }) = revision::check_session_version(&parts.headers)
        {
            return error(status, id, refusal);
        }
        let session_id = parts
            .headers
            .get(SESSION_ID)
            .map(|v| v.to_str().unwrap_or_default().to_owned());
        let initialize = matches!(&message, Message::Request(r) if r.method() == "initialize" && r.id().is_some());
        match session_id {
            None if initialize => self.initialize(parts, message).await,
            None => error(
                StatusCode::BAD_REQUEST,
                id,
                ErrorObject::invalid_request(
                    "the Mcp-Session-Id header is required (initialize first)",
                ),
            ),
            Some(session_id) => {
                let Some(session) = self.config().sessions.get(&session_id) else {
                    if let Some(replica) = self.endpoint.settings().replica.clone() {
                        if is_cancel(&message) {
                            return self.cancel_elsewhere(&replica, &session_id, message).await;
                        }
                    }
                    return session_not_found(id);
                };
                let session = Arc::new(session);
                let (outbox, receiver) = Outbox::new();
                let link = self.front.link(
                    session.scope().connect_exchange(outbox),
                    OnHangUp::cancel_if(self.config().cancel_in_sessions),
                );
                let revision = Revision::Session {
                    id: Some(session_id),
                    version: header_text(&parts.headers, PROTOCOL_VERSION),
                };
                let request = match link.receive(message, Some(&parts)) {
                    Incoming::Request(request) => with_revision(request, revision),
                    // A reply to a request of this side's, or a progress report: taken.
                    Incoming::Response(_) | Incoming::Consumed => {
                        return StatusCode::ACCEPTED.into_response()
                    }
                };
                let notification = request.is_notification();
                let admitted = match self.front.admit_one(notification, Some(&session.in_flight)) {
                    Ok(admitted) => admitted,
                    Err(busy) => return busy_response(&busy),
                };
                let task = self.front.spawn(
                    self.endpoint.service.clone(),
                    request,
                    admitted,
                    session.clone(),
                );
                if notification {
                    call::reply(task).await;
                    return StatusCode::ACCEPTED.into_response();
                }
                let responding = Responding {
                    receiver,
                    task,
                    link,
                    hold: session,
                };
                reply::respond(
                    responding,
                    self.shape(sse, |_| StatusCode::OK, HeaderMap::new()),
                )
                .await
            }
        }
    }

    /// A cancel POSTed for a session another replica holds: it goes through the stack on an exchange of a scope
    /// that forwards under the session's key, where it finds nothing in flight, so the scope publishes it.
    /// Answered 202, as a cancel in a session is.
    async fn cancel_elsewhere(
        self,
        replica: &Replica,
        session_id: &str,
        message: Message,
    ) -> HttpResponse {
        let scope = replica.forwarding(session::replica_key(session_id), Scope::with_dialect(Mcp));
        let link = self
            .front
            .link(scope.connect_exchange(Outbox::closed()), OnHangUp::RunOn);
        if let Incoming::Request(request) = link.receive(message, None) {
            // A cancel: it needs no room.
            let admitted = self.front.counted();
            let task = self
                .front
                .spawn(self.endpoint.service.clone(), request, admitted, ());
            call::reply(task).await;
        }
        tracing::debug!(session = %session_id, "cancel for a session of another replica: handed to the bus");
        StatusCode::ACCEPTED.into_response()
    }

    /// An `initialize` without a session: a session is opened for it, and kept if it succeeds.
    async fn initialize(self, parts: Parts, message: Message) -> HttpResponse {
        let sessions = &self.config().sessions;
        let Ok(session) = sessions.open(self.endpoint.settings()) else {
            tracing::warn!("too many sessions: initialize refused");
            return (StatusCode::SERVICE_UNAVAILABLE, "too many sessions").into_response();
        };
        let session_id = session.key().clone();
        if self.front.is_shutting_down() {
            // Checked after the session is in the table: a shutdown that began before has it closed here, one
            // that began after ends it with the others.
            sessions.close(&session_id, CancelReason::Shutdown);
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                "the server is shutting down",
            )
                .into_response();
        }
        let link = self.front.link(
            session.scope().connect_exchange(Outbox::closed()),
            OnHangUp::RunOn,
        );
        let Incoming::Request(request) = link.receive(message, Some(&parts)) else {
            unreachable!("an initialize request")
        };
        let revision = Revision::Session {
            id: Some(session_id.clone()),
            version: header_text(&parts.headers, PROTOCOL_VERSION),
        };
        let request = with_revision(request, revision);
        let admitted = match self.front.admit_one(false, Some(&session.in_flight)) {
            Ok(admitted) => admitted,
            Err(busy) => {
                sessions.close(&session_id, CancelReason::Disconnect);
                return busy_response(&busy);
            }
        };
        let task = self
            .front
            .spawn(self.endpoint.service.clone(), request, admitted, ());
        let reply = call::reply(task).await;
        drop(session);
        let Some(reply) = reply else {
            sessions.close(&session_id, CancelReason::Disconnect);
            return StatusCode::ACCEPTED.into_response();
        };
        let mut response = body::json_response(StatusCode::OK, &reply);
        if reply.outcome.is_ok() {
            tracing::debug!(session = %session_id, "session opened");
            if let Ok(value) = HeaderValue::from_str(&session_id) {
                response.headers_mut().insert(SESSION_ID, value);
            }
        } else {
            sessions.close(&session_id, CancelReason::Disconnect);
        }
        response
    }

    fn shape(&self, sse: bool, status: fn(&Response) -> StatusCode, headers: HeaderMap) -> Shape {
        Shape {
            sse,
            keep_alive: self.config().keep_alive,
            status,
            headers,
        }
    }
}

/// The revision, for the handler (the HTTP request's head came with the link).
fn with_revision(mut request: Request, revision: Revision) -> Request {
    request.extensions_mut().insert(revision);
    request
}

fn header_text(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

fn message_id(message: &Message) -> Option<tower_cancel::Id> {
    match message {
        Message::Request(request) => request.id().cloned(),
        Message::Response(_) => None,
    }
}

/// Whether `message` is MCP's cancel notification (the only one a replica forwards for a session it lacks).
fn is_cancel(message: &Message) -> bool {
    matches!(message, Message::Request(r) if r.id().is_none() && r.method() == "notifications/cancelled")
}

fn session_not_found(id: Option<tower_cancel::Id>) -> HttpResponse {
    error(
        StatusCode::NOT_FOUND,
        id,
        ErrorObject::new(-32001, "Session not found"),
    )
}

fn error(status: StatusCode, id: Option<tower_cancel::Id>, error: ErrorObject) -> HttpResponse {
    body::json_response(status, &Response::error(id, error))
}
