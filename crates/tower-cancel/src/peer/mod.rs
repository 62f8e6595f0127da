//! Requests to the other side of a connection, cancelled when their caller gives up.
//!
//! A [`Peer`] sends requests and notifications through the connection's [`Outbox`] and matches the replies the
//! transport hands it ([`Peer::dispatch_response`]). Each request is a [`PeerCall`] future:
//!
//! - **Dropping it** before the reply sends the dialect's cancel (LSP `$/cancelRequest`, ACP `$/cancel_request`,
//!   MCP `notifications/cancelled`), unless it was [detached](PeerCall::detach).
//! - **The parent request** being cancelled (a handle from [`Peer::child_of`], as the
//!   [`CascadeLayer`](crate::CascadeLayer) gives every request), **a token** ([`PeerCall::cancel_on`]) or **a
//!   timeout** sends the cancel too. Then the call keeps waiting for
//!   the peer's reply where the dialect says the peer still answers (LSP, ACP: a -32800 error or a partial result),
//!   or stops at once with [`PeerError::Cancelled`] / [`PeerError::TimedOut`] (MCP; or any dialect with
//!   [`PeerCall::wait_after_cancel`]`(false)`).
//! - **Every call has a timeout**, as MCP asks of every sent request: [`Peer::DEFAULT_TIMEOUT`] (60 s, the MCP
//!   TypeScript SDK's), or the handle's own ([`Peer::with_default_timeout`]), or the call's
//!   ([`PeerCall::timeout`]). Waiting without one is an explicit choice: [`Peer::without_default_timeout`],
//!   [`PeerCall::no_timeout`]. `initialize` times out like any call, and keeps its own rules: no cancel is sent for
//!   it.
//! - A cancel is never sent for `initialize`, and in the ACP draft never to a peer that did not declare
//!   `cancellation.request` (learned from the `initialize` exchange).
//! - **The peer may end some calls** with its cancel, where the dialect says so
//!   ([`Dialect::ends_with_cancel`]): an MCP server tears down the subscription a `subscriptions/listen` opened
//!   with `notifications/cancelled` naming it, and the call ends with [`PeerError::CancelledByPeer`] and the
//!   server's reason. (A cancel naming an id of a request the other side sent this side, still in flight here, is
//!   that request's.)
//! - **A revision without requests from this side** ([`Dialect::may_send_request`]; MCP's stateless revision has
//!   none from server to client): the call is never sent and fails at once with [`PeerError::NotAllowed`].
//! - Replies that arrive after the caller stopped waiting are dropped quietly and counted
//!   ([`PeerStats::late_replies`]). When the connection closes, pending calls fail with [`PeerError::Closed`], and
//!   so does every call made after, even one made on another thread while the connection closes.
//!
//! The pending table is empty after every path: reply, drop, timeout, cancel, close.
//!
//! Each call races its reply against its tokens, its timeout and its drop with the shared
//! [`Outgoing`](crate::outgoing::Outgoing) machine; what is the peer's own is what it does on each way a call ends
//! (the dialect's cancel, waiting on or not, the table entry forgotten).
//!
//! # Example
//!
//! ```
//! use serde_json::{json, Value};
//! use tower_cancel::{dialect::Mcp, Outbox, Peer, PeerError, Response};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let (outbox, mut wire) = Outbox::new();
//! let peer = Peer::new(Mcp, outbox);
//!
//! // A call the other side answers: the transport hands the reply to the peer.
//! let call = peer.request("tools/list", json!({}));
//! let sent: Value = serde_json::from_slice(&wire.try_recv().unwrap()).unwrap();
//! assert_eq!(sent["method"], "tools/list");
//! peer.dispatch_response(Response::ok(call.id().clone(), json!({ "tools": [] })));
//! assert_eq!(call.await, Ok(json!({ "tools": [] })));
//!
//! // A call its caller gives up on: dropping it tells the other side.
//! drop(peer.request("tools/call", json!({ "name": "slow" })));
//! wire.try_recv().unwrap();
//! let cancel: Value = serde_json::from_slice(&wire.try_recv().unwrap()).unwrap();
//! assert_eq!(cancel["method"], "notifications/cancelled");
//! assert_eq!(cancel["params"]["reason"], "cancelled locally: caller went away");
//!
//! // The connection closes: later calls fail at once.
//! peer.close();
//! assert_eq!(peer.request("tools/list", json!({})).await, Err(PeerError::Closed));
//! assert_eq!(peer.stats().pending, 0);
//! # }
//! ```

mod call;
mod error;
mod exchanges;
mod groups;
mod parent;
mod progress;
mod table;

use std::{
    fmt,
    sync::{
        atomic::{AtomicI64, AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

use serde::Serialize;
use serde_json::Value;
use tokio::{sync::oneshot, time::Instant};
use tokio_util::sync::CancellationToken;

pub use self::{call::PeerCall, error::PeerError};
pub(crate) use self::{exchanges::Exchanges, parent::Parent};
use self::{
    progress::ProgressSlot,
    table::{Pending, Table},
};
use crate::{
    context::RequestContext,
    dialect::{Dialect, Recognized},
    lifecycle::SharedLifecycle,
    message::{Id, Response, WireRequest},
    outbox::Outbox,
    progress_update::ProgressUpdate,
    reason::CancelReason,
    registry::Registry,
    session::SessionState,
    trace_context,
};

/// The other side of a connection, as this side sends to it. Cloning gives another handle to the same peer.
#[derive(Clone)]
pub struct Peer {
    shared: Arc<Shared>,
    default_timeout: Option<Duration>,
    // Set on a request's child handle (see `CascadeLayer`): its calls are cancelled with the request.
    parent: Option<Parent>,
    // Set on a request's child handle given to a handler (`Request::peer`): the registry the request is in, where
    // a progress token its calls create is bound to it (see `groups`).
    groups: Option<Registry>,
}

struct Shared {
    dialect: Arc<dyn Dialect>,
    outbox: Outbox,
    session: Arc<SessionState>,
    table: Table,
    next_id: AtomicI64,
    stats: Counters,
    // Set for the peer of an exchange (see `Scope::connect_exchange`): the calls of every exchange of its scope
    // are numbered together, and a reply arriving on any of them reaches the one that made the call.
    exchanges: Option<Arc<Exchanges>>,
}

/// The deadline a child handle's call inherits from its parent request: when, and the time left when it was made.
#[derive(Clone, Copy)]
struct Inherited {
    at: Instant,
    remaining: Duration,
}

#[derive(Default)]
struct Counters {
    sent: AtomicU64,
    cancels_sent: AtomicU64,
    late_replies: AtomicU64,
}

/// A snapshot of a peer's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PeerStats {
    /// Requests sent.
    pub sent: u64,
    /// Cancels sent.
    pub cancels_sent: u64,
    /// Replies that arrived after their caller stopped waiting (or for ids never sent), dropped.
    pub late_replies: u64,
    /// Requests waiting for their reply now.
    pub pending: usize,
}

impl Peer {
    /// The timeout of a call that sets none, on a handle that sets none: 60 seconds, as the MCP TypeScript SDK's
    /// (MCP: "implementations SHOULD establish timeouts for all sent requests").
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

    /// A peer sending through `outbox`, with the dialect's rules and a session state of its own. A transport's
    /// connection has one already ([`Connection::peer`](crate::scope::Connection::peer)), sharing its session
    /// state with the connection's cancel layer.
    pub fn new<D: Dialect>(dialect: D, outbox: Outbox) -> Self {
        Self::with_session(Arc::new(dialect), outbox, Arc::default(), None)
    }

    pub(crate) fn with_session(
        dialect: Arc<dyn Dialect>,
        outbox: Outbox,
        session: Arc<SessionState>,
        exchanges: Option<Arc<Exchanges>>,
    ) -> Self {
        Self {
            shared: Arc::new(Shared {
                dialect,
                outbox,
                session,
                table: Table::new(),
                next_id: AtomicI64::new(0),
                stats: Counters::default(),
                exchanges,
            }),
            default_timeout: Some(Self::DEFAULT_TIMEOUT),
            parent: None,
            groups: None,
        }
    }

    /// A handle whose calls are children of `parent`: when the token fires, each outstanding call is cancelled
    /// and the peer is sent the cancel for it. [`CascadeLayer`](crate::CascadeLayer) gives each request such a
    /// handle, tied to the request's own token.
    pub fn child_of(&self, parent: CancellationToken) -> Self {
        self.child(Parent::Token(parent))
    }

    /// A handle whose calls are children of the request of `context`, a request served on any connection (a
    /// proxy's handler calling another connection's peer): they are cancelled with it, as with
    /// [`child_of`](Self::child_of) its token, and they carry its deadline, as the handle of
    /// [`Request::peer`](crate::Request::peer) does (see [crate docs](crate#deadlines-across-hops)): each call
    /// stops at the request's deadline at the latest, and the time left is written in its params for the next
    /// hop.
    pub fn child_of_context(&self, context: &RequestContext) -> Self {
        self.child_of_request(context.lifecycle().clone())
    }

    /// A handle whose calls are children of the request of `lifecycle` (what [`child_of`](Self::child_of) does
    /// with the request's token, without making the token until a call needs it).
    pub(crate) fn child_of_request(&self, lifecycle: SharedLifecycle) -> Self {
        self.child(Parent::Request(lifecycle))
    }

    fn child(&self, parent: Parent) -> Self {
        Self {
            parent: Some(parent),
            ..self.clone()
        }
    }

    /// This handle with a default timeout for its requests other than [`DEFAULT_TIMEOUT`](Self::DEFAULT_TIMEOUT)
    /// (a call's own [`PeerCall::timeout`] wins). Other handles to the same peer keep theirs.
    pub fn with_default_timeout(mut self, timeout: Duration) -> Self {
        self.default_timeout = Some(timeout);
        self
    }

    /// This handle with no default timeout: its calls wait for their answer, a token or their drop, unless a call
    /// sets its own [`PeerCall::timeout`]. For requests a person answers (a permission prompt) or that end only when
    /// cancelled (a subscription). Other handles to the same peer keep theirs.
    pub fn without_default_timeout(mut self) -> Self {
        self.default_timeout = None;
        self
    }

    /// The timeout this handle gives a call that sets none (`None`: no timeout).
    pub fn default_timeout(&self) -> Option<Duration> {
        self.default_timeout
    }

    /// Send a request. The returned future resolves to the result; see the [module docs](self) for what
    /// dropping it, its token and its timeout do.
    ///
    /// Made through a handle of a request with a deadline ([`Request::peer`](crate::Request::peer),
    /// [`child_of_context`](Self::child_of_context)), the call stops at that deadline at the latest, and the
    /// params carry the time left for the next hop (see [crate docs](crate#deadlines-across-hops)).
    pub fn request(&self, method: impl Into<String>, params: impl Serialize) -> PeerCall {
        let method = method.into();
        let id = self.next_id();
        let inherited = self.inherited_deadline();
        let trace = trace_context::outgoing(&*self.shared.dialect);
        let request = if inherited.is_none() && trace.is_none() {
            // The wire of a call without a parent's deadline or a trace context is what it always was: params
            // serialized once.
            WireRequest::new(id.clone(), method.clone(), params)
        } else {
            let mut params = serde_json::to_value(params).unwrap_or(Value::Null);
            self.write_for_next_hop(&mut params, inherited.as_ref(), trace);
            WireRequest::new(id.clone(), method.clone(), params)
        };
        self.send(id, method, request, None, inherited)
    }

    /// Send a request that asks for progress (MCP's `_meta.progressToken`, LSP's `workDoneToken`, set to the
    /// request's id): each report the peer sends goes to `on_progress` and counts as activity for
    /// [`PeerCall::reset_on_progress`]. Where the dialect has no progress or the params are not an object, no
    /// token is sent and `on_progress` is never called. A panic in `on_progress` is caught and logged: it loses
    /// that report, not the connection.
    pub fn request_with_progress(
        &self,
        method: impl Into<String>,
        params: impl Serialize,
        on_progress: impl Fn(ProgressUpdate) + Send + Sync + 'static,
    ) -> PeerCall {
        let method = method.into();
        let id = self.next_id();
        let mut params = serde_json::to_value(params).unwrap_or(Value::Null);
        let token = serde_json::to_value(&id).unwrap_or(Value::Null);
        let progress = self
            .shared
            .dialect
            .attach_progress_token(&mut params, &token)
            .then(|| Arc::new(ProgressSlot::new(on_progress)));
        let inherited = self.inherited_deadline();
        let trace = trace_context::outgoing(&*self.shared.dialect);
        self.write_for_next_hop(&mut params, inherited.as_ref(), trace);
        let request = WireRequest::new(id.clone(), method.clone(), params);
        self.send(id, method, request, progress, inherited)
    }

    /// The parent request's deadline, as it stands now, and the time left until it, if the handle has a parent
    /// with one.
    fn inherited_deadline(&self) -> Option<Inherited> {
        let at = self.parent.as_ref()?.deadline()?;
        Some(Inherited {
            at,
            remaining: at.saturating_duration_since(Instant::now()),
        })
    }

    /// Write into a call's params what the next hop reads from its `_meta`: the time the call has (`inherited`),
    /// and the current span's trace context (`trace`, the `opentelemetry` feature).
    fn write_for_next_hop(
        &self,
        params: &mut Value,
        inherited: Option<&Inherited>,
        trace: Option<Vec<(String, String)>>,
    ) {
        if let Some(inherited) = inherited {
            self.attach_deadline(params, inherited);
        }
        if let Some(fields) = trace {
            trace_context::write_outgoing(params, fields);
        }
    }

    /// Write the time the call has in its params, for the next hop: the parent's time left, or the handle's
    /// default timeout where that is shorter. Whole milliseconds, rounded down: a hop never extends the deadline.
    fn attach_deadline(&self, params: &mut Value, inherited: &Inherited) {
        let Some(parent) = &self.parent else {
            return;
        };
        let remaining = match self.default_timeout {
            Some(own) => inherited.remaining.min(own),
            None => inherited.remaining,
        };
        let remaining =
            Duration::from_millis(u64::try_from(remaining.as_millis()).unwrap_or(u64::MAX));
        let field = parent.deadline_field();
        if !self
            .shared
            .dialect
            .attach_deadline(params, field, remaining)
        {
            tracing::trace!(
                field,
                "the call's remaining time not written: no room in its params"
            );
        }
    }

    fn next_id(&self) -> Id {
        match &self.shared.exchanges {
            Some(exchanges) => exchanges.next_id(),
            None => Id::Number(self.shared.next_id.fetch_add(1, Ordering::Relaxed)),
        }
    }

    fn send(
        &self,
        id: Id,
        method: String,
        request: WireRequest,
        progress: Option<Arc<ProgressSlot>>,
        inherited: Option<Inherited>,
    ) -> PeerCall {
        let (tx, rx) = oneshot::channel();
        let call = PeerCall::new(
            self.clone(),
            id.clone(),
            method.clone(),
            rx,
            progress.clone(),
            inherited.as_ref().map(|inherited| inherited.at),
        );
        // In the table before it is written, so that no reply can come before its call is there; and only while
        // the connection is open, checked in the same step as the insert (see `table`).
        if !self
            .shared
            .dialect
            .may_send_request(&method, &self.shared.session)
        {
            tracing::debug!(%id, method, "request not sent: the conversation's revision has none from this side");
            return call.refused_for(call::Refused::NotAllowed);
        }
        let endable = self.shared.dialect.ends_with_cancel(&method);
        let pending = Pending::new(method, tx, progress, endable);
        if self.shared.table.insert(id.clone(), pending).is_err() {
            return call.closed();
        }
        if let Some(exchanges) = &self.shared.exchanges {
            // Before it is written: its reply may come on another exchange at once.
            exchanges.waiting(id.clone(), &self.shared);
        }
        // A child handle whose request is already cancelled (a cooperative handler winding down, a task that
        // outlived its handler) sends nothing: the request would be cancelled the moment it is polled, after the
        // peer had started a handler for it (nested requests of a cancelled handler still being sent is a known
        // fault of other implementations).
        if self.parent.as_ref().is_some_and(Parent::is_cancelled) {
            self.shared.forget(&id);
            return call.refused();
        }
        // Its parent's deadline leaves it less than a millisecond, which the next hop would read as none left: the
        // call could only time out, after the peer had started a handler for it.
        if inherited.is_some_and(|inherited| inherited.remaining < Duration::from_millis(1)) {
            tracing::debug!(%id, "request not sent: its parent's deadline has passed");
            self.shared.forget(&id);
            return call.refused_for(call::Refused::DeadlinePassed);
        }
        // Before it is written: the peer may cancel a progress token the moment it answered its creation.
        self.bind_created_progress(&request);
        if self.shared.outbox.send_request(&request).is_err() {
            self.shared.forget(&id);
            return call.closed();
        }
        self.shared.stats.sent.fetch_add(1, Ordering::Relaxed);
        call
    }

    /// Send a notification.
    pub fn notify(
        &self,
        method: impl Into<String>,
        params: impl Serialize,
    ) -> Result<(), PeerError> {
        self.shared
            .outbox
            .send_request(&WireRequest::notification(method, params))
            .map_err(|_| PeerError::Closed)
    }

    /// Hand the peer a reply that arrived on the connection. Returns `false` if no call was waiting for it (it
    /// is dropped and counted as late).
    ///
    /// On an exchange of a scope (an HTTP request of an MCP session), the reply reaches the call of that id made
    /// on any exchange of the scope: the client answers a request from the server's handler on a later POST.
    pub fn dispatch_response(&self, response: Response) -> bool {
        let id = response.id.clone();
        let shared = &self.shared;
        let routed = self.caller(id.as_ref());
        let caller = routed.as_deref().unwrap_or(shared);
        let delivered = caller.table.dispatch(response, |method, result| {
            caller
                .dialect
                .observe_response(method, result, &caller.session);
        });
        if let (Some(exchanges), Some(id)) = (&shared.exchanges, &id) {
            exchanges.left(id);
        }
        if !delivered {
            shared.stats.late_replies.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(?id, "late reply dropped");
        }
        delivered
    }

    /// Hand the peer a notification that arrived on the connection. Returns `true` if it was a progress report
    /// for one of this side's calls that asked for progress (it is consumed: its callback ran, or panicked and was
    /// logged, and the call's idle timeout was pushed back).
    pub fn dispatch_progress(&self, notification: &WireRequest) -> bool {
        let Some((token, update)) = self.shared.dialect.read_progress(notification) else {
            return false;
        };
        let Ok(id) = serde_json::from_value::<Id>(token) else {
            return false;
        };
        // Outside the table's lock: the callback is the caller's code.
        let routed = self.caller(Some(&id));
        let caller = routed.as_deref().unwrap_or(&self.shared);
        let Some(slot) = caller.table.progress(&id) else {
            return false;
        };
        slot.report(&id, update);
        true
    }

    /// Hand the peer a notification that arrived on the connection. Returns `true` if it was the other side's
    /// cancel of one of this side's calls that the dialect lets it end (MCP: a server tearing down the subscription
    /// a `subscriptions/listen` opened; see [`Dialect::ends_with_cancel`]): the call ends with
    /// [`PeerError::CancelledByPeer`] and the reason the peer gave, and the notification is consumed. Any other
    /// cancel (of a request the other side sent this side) is left for the cancel layer.
    pub fn dispatch_cancel(&self, notification: &WireRequest) -> bool {
        self.dispatch_cancel_unless(notification, |_| false)
    }

    /// [`dispatch_cancel`](Self::dispatch_cancel), but a cancel of an id that `serving` says this side is serving
    /// (a request of the other side's in flight here) is left for the cancel layer: ids are numbered by each side
    /// on its own, so a cancel of a request this side serves can name the id of one of its own calls too.
    pub(crate) fn dispatch_cancel_unless(
        &self,
        notification: &WireRequest,
        serving: impl FnOnce(&Id) -> bool,
    ) -> bool {
        let shared = &self.shared;
        // Nearly every connection has no such call: its cancels pass without a parse or a lock.
        if !shared.table.has_endable() {
            return false;
        }
        let Recognized::Cancel(notice) = shared.dialect.recognize(notification, &shared.session)
        else {
            return false;
        };
        if serving(&notice.id) {
            return false;
        }
        let ended = shared.table.end_by_peer(&notice.id, notice.reason.clone());
        if ended {
            // Only then: another exchange of the scope may be waiting on a call of that id, still routed.
            if let Some(exchanges) = &shared.exchanges {
                exchanges.left(&notice.id);
            }
            tracing::info!(
                id = %notice.id,
                reason = notice.reason.as_deref().unwrap_or(""),
                "call ended by the peer's cancel"
            );
        }
        ended
    }

    /// The peer of another exchange of the scope whose call `id` is waiting (`None`: this peer's own, or nobody's).
    fn caller(&self, id: Option<&Id>) -> Option<Arc<Shared>> {
        let exchanges = self.shared.exchanges.as_ref()?;
        exchanges.caller(id?)
    }

    /// The connection closed: every pending call fails with [`PeerError::Closed`], and later requests too.
    pub fn close(&self) {
        self.shared.table.close();
        if let Some(exchanges) = &self.shared.exchanges {
            exchanges.closed(&self.shared);
        }
    }

    /// The counters, and the size of the pending table now.
    pub fn stats(&self) -> PeerStats {
        let s = &self.shared.stats;
        PeerStats {
            sent: s.sent.load(Ordering::Relaxed),
            cancels_sent: s.cancels_sent.load(Ordering::Relaxed),
            late_replies: s.late_replies.load(Ordering::Relaxed),
            pending: self.shared.table.len(),
        }
    }

    /// How many calls are waiting and whether the connection has closed, read together (for the loom model).
    #[cfg(all(test, loom))]
    pub(crate) fn table_state(&self) -> (usize, bool) {
        self.shared.table.state()
    }
}

impl Shared {
    /// Send the dialect's cancel for call `id`, if the dialect allows one here. Returns whether it went out.
    fn send_cancel(&self, id: &Id, method: &str, reason: &CancelReason) -> bool {
        if !self.dialect.may_send_cancel(method, &self.session) {
            tracing::debug!(%id, method, "no cancel sent: the dialect does not allow it here");
            return false;
        }
        let sent = self
            .outbox
            .send_request(&self.dialect.cancel_message(id, reason))
            .is_ok();
        if sent {
            self.stats.cancels_sent.fetch_add(1, Ordering::Relaxed);
        }
        sent
    }

    /// Call `id` stopped waiting: out of the table.
    fn forget(&self, id: &Id) {
        self.table.remove(id);
        if let Some(exchanges) = &self.exchanges {
            exchanges.left(id);
        }
    }
}

impl fmt::Debug for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Peer")
            .field("stats", &self.stats())
            .finish()
    }
}
