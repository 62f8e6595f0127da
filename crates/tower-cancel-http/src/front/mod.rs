//! The skeleton every front end of this crate stands on ([`JsonRpc`](crate::JsonRpc),
//! [`McpHttp`](crate::McpHttp), [`ToolServer`](crate::rap::ToolServer), [`AbpApp`](crate::abp::AbpApp)): what
//! they share, so that each keeps only its protocol.
//!
//! - **Building.** Each is made with `new` over the stack it serves and configured by chained methods before it
//!   is first cloned (to mount it, or for its [`Front`]; configuring a clone panics): every clone serves the same
//!   configuration. The settings they all have: the largest body read (`max_body_bytes`,
//!   [`DEFAULT_MAX_BODY_BYTES`]; an ABP app's `max_message_bytes`, its largest WebSocket message), how long a
//!   POST's body may take to arrive (`body_timeout` of those that read one, [`DEFAULT_BODY_TIMEOUT`]; 408 past
//!   it), and, for
//!   those whose scopes outlive a request (MCP sessions, RAP threads, JSON-RPC principals), the
//!   [`Replica`](tower_cancel::bus::Replica) those scopes are attached to under a key every replica shares.
//! - **Mounting.** Each gives an axum `Router` of its endpoints: `router()` at their usual paths, `router_with(auth)`
//!   with every endpoint that acts behind `auth`, a tower layer (for a shared secret,
//!   [`require_bearer`](crate::auth::require_bearer)); the one-path front ends also take `router_at(path)`.
//!   `JsonRpc` and `McpHttp` are also `tower::Service`s of HTTP requests, to mount as you like.
//! - **Running.** Each request arrives on a [`Link`] of the front end (an HTTP request's exchange, a WebSocket's
//!   connection), which carries the HTTP request's extensions and headers to the handler and whose drop is the
//!   client's hang-up; each runs on a task of its own, counted in [`Front::in_flight`].
//! - **Bounds.** No client can make a front end hold without bound. Each request takes a place in the front
//!   end's bound on requests in flight ([`DEFAULT_MAX_IN_FLIGHT`], each front end's `max_in_flight`) and in its
//!   scope's, where its scope outlives it ([`DEFAULT_MAX_IN_FLIGHT_PER_SCOPE`]: an MCP session, a JSON-RPC
//!   principal, a RAP thread, an ABP session), before it runs ([`Front::admit`], a [`Quota`] each); past either
//!   it is refused without running, the protocol's way of saying "busy" (HTTP 503 with `Retry-After`, ABP's
//!   `RATE_LIMITED`), and counted in [`FrontStats::busy`]. Notifications need no place: a cancel is never
//!   refused.
//! - **Stats.** [`Front::stats`] gives the part every front end has ([`FrontStats`]); a front end's own counters
//!   are its own `stats()`.
//! - **Shutdown.** [`Front::shutdown`] cancels every request in flight with reason `Shutdown`, answered as its
//!   protocol says, and from then on refuses new requests the protocol's way; [`Front::drained`] waits until
//!   nothing is left running.
//!
//! | front end | a request in flight at the shutdown | a request after it |
//! |---|---|---|
//! | `JsonRpc` | the stack's reply for a `Shutdown` cancel (LSP, ACP: -32800) | never runs: the same reply |
//! | `McpHttp` | -32603 (the MCP dialect's reply to a `Shutdown` cancel), as JSON or at the end of its stream | sessions are ended: a POST in one gets 404 (as for any session the server ended), `initialize` 503; a stateless request never runs and gets -32603 |
//! | `ToolServer` | its runtime gets an error result, `Error: the tool server is shutting down` | 503 (the runtime records the refusal as the call's error) |
//! | `AbpApp` | `call-result {cancelled: true, error: {code: CANCELLED}}`; its session is closed once its calls are answered | a call on a session still open is answered the same, without running; a new WebSocket gets 503 |
//!
//! The skeleton is also the seam through which another framework's HTTP request becomes one of ours: make a
//! [`Front`], open a [`Link`] for each HTTP request on a [`Scope`](tower_cancel::Scope) of your choice, take its
//! messages through it, and [`spawn`](Front::spawn) each request on the stack.
//!
//! ```
//! use http::request::Parts;
//! use tower_cancel::{Incoming, Message, Outbox, Response, Scope};
//! use tower_cancel_http::{front::{Front, OnHangUp}, RpcService};
//!
//! async fn serve_one<S: RpcService>(front: &Front, stack: S, head: &Parts, message: Message) -> Option<Response> {
//!     // One HTTP request: an exchange of a scope of its own, whose end is a cancel where the client hangs up.
//!     let link = front.link(Scope::new().connect_exchange(Outbox::closed()), OnHangUp::Cancel);
//!     match link.receive(message, Some(head)) {
//!         Incoming::Request(request) => match front.admit(1, None) {
//!             Ok(mut room) => {
//!                 let admitted = room.next().expect("room for one");
//!                 front.spawn(stack, request, admitted, ()).await.unwrap_or_default()
//!             }
//!             // A real front end answers its protocol's "busy" (HTTP 503 with `Retry-After`).
//!             Err(_busy) => None,
//!         },
//!         Incoming::Response(_) | Incoming::Consumed => None,
//!     }
//! }
//! ```

// The floor plan: `endpoint` (what a front end is built of, `configure`) stands on `state` (`quota`, `links`);
// `admission` on `quota`; `link` and this file (the public handle) on all of them; `router`, `busy`, `limits`
// and `origin` on nothing of the crate.
mod admission;
mod busy;
mod endpoint;
mod limits;
mod link;
mod links;
mod origin;
mod principal;
mod quota;
mod router;
mod state;

use std::{fmt, future::Future, sync::Arc};

use tokio::task::JoinHandle;
use tower_cancel::{CancelReason, Connection, Request, Response};

use self::state::State;
pub use self::{
    admission::{Admission, Admitted},
    limits::{
        BUSY_RETRY_AFTER_SECS, DEFAULT_BODY_TIMEOUT, DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_IN_FLIGHT,
        DEFAULT_MAX_IN_FLIGHT_PER_SCOPE, DEFAULT_PRINCIPAL_LINGER, MAX_ID_BYTES,
    },
    link::{Link, OnHangUp},
    origin::Origins,
    principal::{PrincipalScope, ScopesByPrincipal, TooManyPrincipals},
    quota::{Busy, Permit, Permits, Quota},
};
pub(crate) use self::{
    busy::busy_response,
    endpoint::{Endpoint, Protocol, Settings},
    principal::{PrincipalScopes, Principals},
    router::mount,
};
use crate::call::{self, RpcService};

/// A front end's handle on the skeleton: its requests running, its connections open, its shutdown. Cheap to
/// clone; every front end gives its own with `front()`, and a front end built outside this crate makes one with
/// [`new`](Self::new).
#[derive(Clone)]
pub struct Front {
    core: Arc<dyn Core>,
}

/// What the skeleton needs of a front end's shared part, whatever its protocol.
pub(crate) trait Core: Send + Sync + 'static {
    fn state(&self) -> &State;
    /// The protocol's own part of the shutdown.
    fn shut_down(&self);
}

/// What every front end counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct FrontStats {
    /// Requests running now, each on a task of its own (a RAP call until its result is delivered). Zero means no
    /// request of this front end holds a registry entry.
    pub in_flight: usize,
    /// Requests and notifications taken so far (a cancel message included).
    pub requests: u64,
    /// Requests refused so far because a bound on requests in flight was reached (the front end's or a
    /// scope's): answered the protocol's way of saying "busy", never run.
    pub busy: u64,
    /// Links open now: HTTP requests being answered, WebSocket sessions.
    pub open: usize,
    /// Whether the shutdown has begun.
    pub shutting_down: bool,
}

impl Front {
    /// A skeleton of its own, for a front end that is not one of this crate's.
    pub fn new() -> Self {
        Self::with_max_in_flight(DEFAULT_MAX_IN_FLIGHT)
    }

    /// The same, with room for `requests` requests in flight at once ([`DEFAULT_MAX_IN_FLIGHT`] for
    /// [`new`](Self::new)); past it, [`admit`](Self::admit) refuses.
    pub fn with_max_in_flight(requests: usize) -> Self {
        let settings = Settings {
            max_in_flight: requests,
            ..Settings::default()
        };
        Endpoint::new("Front", (), settings, ()).front()
    }

    /// How many requests run now.
    pub fn in_flight(&self) -> usize {
        self.core.state().running.in_use()
    }

    /// The counters.
    pub fn stats(&self) -> FrontStats {
        self.core.state().stats()
    }

    /// Whether the shutdown has begun.
    pub fn is_shutting_down(&self) -> bool {
        self.core.state().links.is_shutting_down()
    }

    /// Begin the shutdown: every link open now is closed with reason `Shutdown` (its requests in flight are
    /// cancelled and answered as their protocol answers that cancel), every link opened from now on refuses its
    /// requests (they start out cancelled the same way, and never run), and the front end ends what else it
    /// keeps (MCP's sessions, ABP's WebSockets once their calls are answered). Returns how many requests this
    /// cancelled; calling it again does nothing.
    pub fn shutdown(&self) -> usize {
        let state = self.core.state();
        let Some(open) = state.links.shut_down() else {
            return 0;
        };
        let cancelled = open
            .iter()
            .map(|connection| connection.close(CancelReason::Shutdown))
            .sum();
        self.core.shut_down();
        state.shutdown.cancel();
        tracing::debug!(cancelled, "shutting down");
        cancelled
    }

    /// Resolves once the shutdown has begun.
    pub fn shutting_down(&self) -> impl Future<Output = ()> + Send + 'static {
        self.core.state().shutdown.clone().cancelled_owned()
    }

    /// Resolves once nothing of the front end is left: no request running, no link open. After
    /// [`shutdown`](Self::shutdown), that is the drain: every request answered, every WebSocket closed.
    pub fn drained(&self) -> impl Future<Output = ()> + Send + 'static {
        let state = self.core.clone();
        async move {
            loop {
                let running = state.state().running.idle();
                let links = state.state().links.empty();
                running.await;
                links.await;
                let stats = state.state().stats();
                if stats.in_flight == 0 && stats.open == 0 {
                    return;
                }
            }
        }
    }

    /// Open `connection` as a link of this front end, until the link is dropped (see [`Link`]).
    pub fn link(&self, connection: Connection, on_hang_up: OnHangUp) -> Link {
        Link::new(self.clone(), connection, on_hang_up)
    }

    /// Room for `requests` more requests (one, or a batch's), in this front end's bound on requests in flight
    /// and, if given, in their scope's `quota` (an MCP session's, a principal's): all of it, or [`Busy`] having
    /// taken nothing, counted in [`FrontStats::busy`]. Take it before the requests are received, and answer
    /// [`Busy`] the protocol's way (over HTTP, [`Busy`] is 503 with `Retry-After`). Notifications (a cancel
    /// above all) need no room: a cancel is never refused for being one too many.
    pub fn admit(&self, requests: usize, quota: Option<&Quota>) -> Result<Admission, Busy> {
        let state = self.core.state();
        Admission::take(&state.running, quota, requests).inspect_err(|busy| {
            state.count_busy(requests);
            tracing::debug!(requests, max = busy.max, "busy: refused");
        })
    }

    /// A place for one message's request: room in the bounds ([`admit`](Self::admit)) for a request, and none
    /// needed for a `notification` (it has no reply to keep, and a cancel must never be refused), which is only
    /// counted while it runs.
    pub fn admit_one(&self, notification: bool, quota: Option<&Quota>) -> Result<Admitted, Busy> {
        if notification {
            return Ok(self.counted());
        }
        let mut room = self.admit(1, quota)?;
        Ok(room.next().expect("room for one"))
    }

    /// A place counted in [`in_flight`](Self::in_flight) without room taken in the bound: a notification's.
    pub(crate) fn counted(&self) -> Admitted {
        Admitted::counted(self.core.state().running.enter())
    }

    /// Call `service` with `request` on a task of its own, counted in [`in_flight`](Self::in_flight) (by its
    /// `admitted` place) until it ends, keeping `hold` (a lease on the request's scope, say) as long. The task's
    /// output is the request's reply: none for a notification, or where the dialect answers a cancelled request
    /// with silence; a service error or a panic is answered -32603.
    pub fn spawn<S: RpcService, H: Send + 'static>(
        &self,
        service: S,
        request: Request,
        admitted: Admitted,
        hold: H,
    ) -> JoinHandle<Option<Response>> {
        call::spawn(service, request, (hold, admitted), |reply| reply)
    }
}

impl Default for Front {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Front {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Front")
            .field("stats", &self.stats())
            .finish()
    }
}
