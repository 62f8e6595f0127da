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
//! Both revisions check `Origin` ([`Origins`]; 403), refuse a body over the limit (413) and a content type that
//! is not JSON (415), and answer a body that is not a JSON-RPC message with 400 and its error.

mod origin;
mod reply;
mod revision;
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
};
use http::{header, request::Parts, HeaderMap, HeaderValue, Method, StatusCode};
use tower_cancel::{
    bus::Replica, dialect::Mcp, scope::Incoming, ErrorObject, Message, Outbox, Request, Response,
    Scope,
};
use tower_service::Service;

pub use self::{
    origin::Origins,
    revision::{
        Revision, HEADER_MISMATCH, SESSION_VERSIONS, STATELESS_VERSIONS,
        UNSUPPORTED_PROTOCOL_VERSION,
    },
};
use self::{
    reply::{Pending, Shape},
    revision::{Refusal, Spoken, PROTOCOL_VERSION},
    session::Sessions,
};
use crate::{
    body::{self, Messages},
    call::{self, HangUp, RpcService, Running},
    front::DEFAULT_MAX_BODY_BYTES,
    scopes::Scoped,
    Connection,
};

/// The session header of the `2025-11-25` revision.
pub const SESSION_ID: &str = "mcp-session-id";
/// How often a quiet SSE stream gets a keep-alive comment line, by default.
pub const DEFAULT_KEEP_ALIVE: Duration = Duration::from_secs(15);
/// How long a session with no request is kept, by default.
pub const DEFAULT_SESSION_IDLE: Duration = Duration::from_secs(30 * 60);
/// How many sessions are kept at most, by default (an `initialize` beyond them gets 503).
pub const DEFAULT_MAX_SESSIONS: usize = 10_000;

/// Serves MCP over Streamable HTTP, both revisions. See the [module docs](self).
pub struct McpHttp<S> {
    service: S,
    config: Arc<Config>,
}

struct Config {
    running: Running,
    sessions: Sessions,
    // Set when the server is one replica of several: its sessions' cancels that miss go to the others.
    replica: Option<Replica>,
    origins: Origins,
    cancel_in_sessions: bool,
    keep_alive: Duration,
    max_body_bytes: usize,
}

impl<S> McpHttp<S> {
    /// Serve `service` (an MCP stack): loopback origins, a hang-up a cancel only where the revision says so,
    /// keep-alive every [`DEFAULT_KEEP_ALIVE`], sessions idle for [`DEFAULT_SESSION_IDLE`] dropped.
    pub fn new(service: S) -> Self {
        Self {
            service,
            config: Arc::new(Config {
                running: Running::default(),
                sessions: Sessions::new(DEFAULT_SESSION_IDLE, DEFAULT_MAX_SESSIONS),
                replica: None,
                origins: Origins::default(),
                cancel_in_sessions: false,
                keep_alive: DEFAULT_KEEP_ALIVE,
                max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            }),
        }
    }

    /// Which `Origin`s may call (403 for others).
    pub fn origins(mut self, origins: Origins) -> Self {
        self.config_mut().origins = origins;
        self
    }

    /// Whether a client that hangs up cancels its request in the session revision too (off by default: that
    /// revision says a disconnect SHOULD NOT be read as a cancel). In the stateless revision it always does.
    pub fn cancel_on_disconnect_in_sessions(mut self, cancels: bool) -> Self {
        self.config_mut().cancel_in_sessions = cancels;
        self
    }

    /// How long a request may stay quiet before its response becomes an SSE stream, and the interval of the
    /// stream's keep-alive comment lines.
    pub fn keep_alive(mut self, interval: Duration) -> Self {
        self.config_mut().keep_alive = interval;
        self
    }

    /// The largest body accepted (413 above it).
    pub fn max_body_bytes(mut self, bytes: usize) -> Self {
        self.config_mut().max_body_bytes = bytes;
        self
    }

    /// How long a session with no request is kept, and how many sessions are kept at most.
    pub fn session_limits(mut self, idle: Duration, max_sessions: usize) -> Self {
        self.config_mut().sessions = Sessions::new(idle, max_sessions);
        self
    }

    /// Run as one replica of several behind a load balancer, sharing `replica`'s bus (over Redis:
    /// `tower-cancel-redis`). In the session revision, a session lives on the replica that minted it, and its
    /// requests must be routed there (affinity by `Mcp-Session-Id`); its `notifications/cancelled` may land on
    /// any replica: one that does not hold the session hands the cancel to the others (202), and the replica
    /// running the request stops it as if the cancel had been POSTed to it. Any other POST naming a session this
    /// replica does not hold gets 404, as without replicas. Each session's scope is attached under the key
    /// `mcp:session:<id>`. The stateless revision needs nothing: there, closing the stream is the cancel.
    pub fn replica(mut self, replica: Replica) -> Self {
        self.config_mut().replica = Some(replica);
        self
    }

    /// How many requests are running now, over every session and stateless POST. Zero means no request of this
    /// endpoint holds a registry entry.
    pub fn in_flight(&self) -> usize {
        self.config.running.get()
    }

    /// How many sessions are open.
    pub fn sessions(&self) -> usize {
        self.config.sessions.len()
    }

    /// The service served.
    pub fn get_ref(&self) -> &S {
        &self.service
    }

    fn config_mut(&mut self) -> &mut Config {
        Arc::get_mut(&mut self.config).expect("configured before it is cloned")
    }
}

impl<S: Clone> Clone for McpHttp<S> {
    fn clone(&self) -> Self {
        Self {
            service: self.service.clone(),
            config: self.config.clone(),
        }
    }
}

impl<S> fmt::Debug for McpHttp<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpHttp")
            .field("origins", &self.config.origins)
            .field(
                "cancel_on_disconnect_in_sessions",
                &self.config.cancel_in_sessions,
            )
            .field("keep_alive", &self.config.keep_alive)
            .field("sessions", &self.config.sessions.len())
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
        let endpoint = Endpoint {
            service: self.service.clone(),
            config: self.config.clone(),
        };
        Box::pin(async move { Ok(endpoint.serve(request).await) })
    }
}

/// One HTTP request's view of the endpoint.
struct Endpoint<S> {
    service: S,
    config: Arc<Config>,
}

impl<S: RpcService> Endpoint<S> {
    async fn serve(self, request: http::Request<Body>) -> HttpResponse {
        let (parts, body) = request.into_parts();
        if !self.config.origins.allows(&parts.headers) {
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
        if self
            .config
            .sessions
            .close(id, tower_cancel::CancelReason::Disconnect)
        {
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
        let Some(sse) = accepts(&parts.headers) else {
            return (
                StatusCode::NOT_ACCEPTABLE,
                "Accept must allow application/json or text/event-stream",
            )
                .into_response();
        };
        let bytes = match body::read(body, self.config.max_body_bytes).await {
            Ok(bytes) => bytes,
            Err(refused) => return (refused.status, refused.detail).into_response(),
        };
        let message = match body::parse(&bytes, false) {
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
        let exchange = scope.exchange(outbox);
        let Some(request) = self.prepare(&exchange, request, &parts, revision) else {
            return StatusCode::ACCEPTED.into_response();
        };
        if request.is_notification() {
            call::reply(call::spawn(
                self.service.clone(),
                request,
                self.config.running.enter(),
            ))
            .await;
            return StatusCode::ACCEPTED.into_response();
        }
        let task = call::spawn(self.service.clone(), request, self.config.running.enter());
        let pending = Pending {
            receiver,
            task,
            hang_up: HangUp::new(exchange, true),
            hold: (),
        };
        reply::respond(
            pending,
            self.shape(sse, revision::stateless_status, HeaderMap::new()),
        )
        .await
    }

    async fn session(self, parts: Parts, message: Message, sse: bool) -> HttpResponse {
        let id = message_id(&message);
        if let Some(version) = parts.headers.get(PROTOCOL_VERSION) {
            let version = version.to_str().unwrap_or("(not text)");
            if !SESSION_VERSIONS.contains(&version) {
                let Refusal {
                    status,
                    error: refusal,
                } = revision::unsupported(version);
                return error(status, id, refusal);
            }
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
                let Some(session) = self.config.sessions.get(&session_id) else {
                    if let Some(replica) = self.config.replica.clone() {
                        if is_cancel(&message) {
                            return self.cancel_elsewhere(&replica, &session_id, message).await;
                        }
                    }
                    return session_not_found(id);
                };
                let session = Arc::new(session);
                let (outbox, receiver) = Outbox::new();
                let exchange = session.scope().exchange(outbox);
                let revision = Revision::Session {
                    id: Some(session_id),
                    version: header_text(&parts.headers, PROTOCOL_VERSION),
                };
                let request = match exchange.receive(message) {
                    Incoming::Request(request) => request,
                    // A reply to a request of this side's, or a progress report: taken.
                    Incoming::Response(_) | Incoming::Consumed => {
                        return StatusCode::ACCEPTED.into_response()
                    }
                };
                let request = with_http(request, &parts, revision);
                let hold = (session.clone(), self.config.running.enter());
                if request.is_notification() {
                    call::reply(call::spawn(self.service.clone(), request, hold)).await;
                    return StatusCode::ACCEPTED.into_response();
                }
                let task = call::spawn(self.service.clone(), request, hold);
                let pending = Pending {
                    receiver,
                    task,
                    hang_up: HangUp::new(exchange, self.config.cancel_in_sessions),
                    hold: session,
                };
                reply::respond(
                    pending,
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
        let exchange = scope.exchange(Outbox::closed());
        if let Incoming::Request(request) = exchange.receive(message) {
            let hold = self.config.running.enter();
            call::reply(call::spawn(self.service.clone(), request, hold)).await;
        }
        tracing::debug!(session = %session_id, "cancel for a session of another replica: handed to the bus");
        StatusCode::ACCEPTED.into_response()
    }

    /// An `initialize` without a session: a session is opened for it, and kept if it succeeds.
    async fn initialize(self, parts: Parts, message: Message) -> HttpResponse {
        let Ok(session) = self.config.sessions.open(self.config.replica.as_ref()) else {
            tracing::warn!("too many sessions: initialize refused");
            return (StatusCode::SERVICE_UNAVAILABLE, "too many sessions").into_response();
        };
        let session_id = session.key().clone();
        let exchange = session.scope().exchange(Outbox::closed());
        let Incoming::Request(request) = exchange.receive(message) else {
            unreachable!("an initialize request")
        };
        let revision = Revision::Session {
            id: Some(session_id.clone()),
            version: header_text(&parts.headers, PROTOCOL_VERSION),
        };
        let request = with_http(request, &parts, revision);
        let hold = self.config.running.enter();
        let reply = call::reply(call::spawn(self.service.clone(), request, hold)).await;
        drop(session);
        let Some(reply) = reply else {
            self.config
                .sessions
                .close(&session_id, tower_cancel::CancelReason::Disconnect);
            return StatusCode::ACCEPTED.into_response();
        };
        let mut response = body::json_response(StatusCode::OK, &reply);
        if reply.outcome.is_ok() {
            tracing::debug!(session = %session_id, "session opened");
            if let Ok(value) = HeaderValue::from_str(&session_id) {
                response.headers_mut().insert(SESSION_ID, value);
            }
        } else {
            self.config
                .sessions
                .close(&session_id, tower_cancel::CancelReason::Disconnect);
        }
        response
    }

    fn prepare(
        &self,
        exchange: &Connection,
        request: Request,
        parts: &Parts,
        revision: Revision,
    ) -> Option<Request> {
        match exchange.receive(Message::Request(request)) {
            Incoming::Request(request) => Some(with_http(request, parts, revision)),
            Incoming::Response(_) | Incoming::Consumed => None,
        }
    }

    fn shape(&self, sse: bool, status: fn(&Response) -> StatusCode, headers: HeaderMap) -> Shape {
        Shape {
            sse,
            keep_alive: self.config.keep_alive,
            status,
            headers,
        }
    }
}

/// The HTTP request's extensions and headers, and the revision, for the handler.
fn with_http(mut request: Request, parts: &Parts, revision: Revision) -> Request {
    *request.extensions_mut() = parts.extensions.clone();
    request.extensions_mut().insert(parts.headers.clone());
    request.extensions_mut().insert(revision);
    request
}

/// Whether the client takes an SSE stream (`Some(true)`), only JSON (`Some(false)`), or neither (`None`).
fn accepts(headers: &HeaderMap) -> Option<bool> {
    let Some(accept) = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) else {
        // No Accept header: anything goes.
        return Some(true);
    };
    let types: Vec<&str> = accept
        .split(',')
        .map(|t| t.split(';').next().unwrap_or_default().trim())
        .collect();
    let any = types.contains(&"*/*");
    let sse = any
        || types
            .iter()
            .any(|t| t.eq_ignore_ascii_case("text/event-stream") || *t == "text/*");
    let json = any
        || types
            .iter()
            .any(|t| t.eq_ignore_ascii_case("application/json") || *t == "application/*");
    match (json, sse) {
        (_, true) => Some(true),
        (true, false) => Some(false),
        (false, false) => None,
    }
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
