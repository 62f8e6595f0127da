//! Requests to the other side of a connection, cancelled when their caller gives up.
//!
//! A [`Peer`] sends requests and notifications through the connection's [`Outbox`] and matches the replies the
//! transport hands it ([`Peer::dispatch_response`]). Each request is a [`PeerCall`] future:
//!
//! - **Dropping it** before the reply sends the dialect's cancel (LSP `$/cancelRequest`, ACP `$/cancel_request`,
//!   MCP `notifications/cancelled`), unless it was [detached](PeerCall::detach).
//! - **The parent request** being cancelled (a handle from [`Peer::child_of`], as the
//!   [`CascadeLayer`](crate::CascadeLayer) gives every request), **a token** ([`PeerCall::cancel_on`]) or **a timeout** ([`PeerCall::timeout`], or the peer's default) sends the
//!   cancel too. Then the call keeps waiting for the peer's reply where the dialect says the peer still answers
//!   (LSP, ACP: a -32800 error or a partial result), or stops at once with [`PeerError::Cancelled`] /
//!   [`PeerError::TimedOut`] (MCP; or any dialect with [`PeerCall::wait_after_cancel`]`(false)`).
//! - A cancel is never sent for `initialize`, and in the ACP draft never to a peer that did not declare
//!   `cancellation.request` (learned from the `initialize` exchange).
//! - Replies that arrive after the caller stopped waiting are dropped quietly and counted
//!   ([`PeerStats::late_replies`]). When the connection closes, pending calls fail with [`PeerError::Closed`].
//!
//! The pending table is empty after every path: reply, drop, timeout, cancel, close.

use std::{
    collections::HashMap,
    fmt,
    future::Future,
    pin::Pin,
    sync::{
        atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering},
        Arc, Mutex, MutexGuard,
    },
    task::{Context, Poll},
    time::Duration,
};

use serde::Serialize;
use serde_json::Value;
use tokio::{
    sync::oneshot,
    time::{Instant, Sleep},
};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use crate::{
    dialect::Dialect,
    message::{ErrorObject, Id, Request, Response},
    outbox::Outbox,
    progress::ProgressUpdate,
    scope::SessionState,
};

/// The part of a dialect a peer needs, object-safe so that `Peer` (and a `Scope`) is one type for every dialect.
pub(crate) trait PeerDialect: Send + Sync {
    fn name(&self) -> &'static str;
    fn cancel_message(&self, id: &Id, reason: Option<&str>) -> Request;
    fn may_send_cancel(&self, method: &str, session: &SessionState) -> bool;
    fn waits_after_cancel(&self) -> bool;
    fn observe_response(&self, method: &str, result: &Value, session: &SessionState);
    fn read_progress(&self, notification: &Request) -> Option<(Value, ProgressUpdate)>;
    fn attach_progress_token(&self, params: &mut Value, token: &Value) -> bool;
}

impl<D: Dialect> PeerDialect for D {
    fn name(&self) -> &'static str {
        Dialect::name(self)
    }

    fn cancel_message(&self, id: &Id, reason: Option<&str>) -> Request {
        Dialect::cancel_message(self, id, reason)
    }

    fn may_send_cancel(&self, method: &str, session: &SessionState) -> bool {
        Dialect::may_send_cancel(self, method, session)
    }

    fn waits_after_cancel(&self) -> bool {
        Dialect::waits_after_cancel(self)
    }

    fn observe_response(&self, method: &str, result: &Value, session: &SessionState) {
        Dialect::observe_response(self, method, result, session);
    }

    fn read_progress(&self, notification: &Request) -> Option<(Value, ProgressUpdate)> {
        Dialect::read_progress(self, notification)
    }

    fn attach_progress_token(&self, params: &mut Value, token: &Value) -> bool {
        Dialect::attach_progress_token(self, params, token)
    }
}

/// The other side of a connection, as this side sends to it. Cloning gives another handle to the same peer.
#[derive(Clone)]
pub struct Peer {
    shared: Arc<Shared>,
    default_timeout: Option<Duration>,
    // Set on a request's child handle (see `CascadeLayer`): its calls are cancelled with the request.
    parent: Option<CancellationToken>,
}

struct Shared {
    dialect: Arc<dyn PeerDialect>,
    outbox: Outbox,
    session: Arc<SessionState>,
    pending: Mutex<HashMap<Id, Pending>>,
    next_id: AtomicI64,
    closed: AtomicBool,
    stats: Counters,
}

struct Pending {
    method: String,
    reply: oneshot::Sender<Response>,
    progress: Option<Arc<ProgressSlot>>,
}

/// Where the peer's progress reports for one call go: the caller's callback, and the time of the last one (which
/// pushes back the call's idle timeout).
struct ProgressSlot {
    on_progress: Box<dyn Fn(ProgressUpdate) + Send + Sync>,
    last: Mutex<Option<Instant>>,
}

impl ProgressSlot {
    fn last(&self) -> Option<Instant> {
        *self.last.lock().unwrap_or_else(|p| p.into_inner())
    }
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

/// Why a call to the peer did not give a result.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum PeerError {
    /// The peer answered with an error (after a cancel, LSP and ACP peers answer -32800).
    Rejected(ErrorObject),
    /// The call was cancelled by its token and stopped waiting.
    Cancelled,
    /// The call's timeout passed and it stopped waiting.
    TimedOut,
    /// The connection closed before the reply.
    Closed,
}

impl fmt::Display for PeerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PeerError::Rejected(error) => write!(f, "the peer answered with an error: {error}"),
            PeerError::Cancelled => f.write_str("request cancelled"),
            PeerError::TimedOut => f.write_str("request timed out"),
            PeerError::Closed => f.write_str("connection closed"),
        }
    }
}

impl std::error::Error for PeerError {}

impl Peer {
    /// A peer sending through `outbox`, with the dialect's rules and a session state of its own. A transport's
    /// connection has one already ([`Connection::peer`](crate::scope::Connection::peer)), sharing its session
    /// state with the connection's cancel layer.
    pub fn new<D: Dialect>(dialect: D, outbox: Outbox) -> Self {
        Self::with_session(Arc::new(dialect), outbox, Arc::default())
    }

    pub(crate) fn with_session(
        dialect: Arc<dyn PeerDialect>,
        outbox: Outbox,
        session: Arc<SessionState>,
    ) -> Self {
        Self {
            shared: Arc::new(Shared {
                dialect,
                outbox,
                session,
                pending: Mutex::new(HashMap::new()),
                next_id: AtomicI64::new(0),
                closed: AtomicBool::new(false),
                stats: Counters::default(),
            }),
            default_timeout: None,
            parent: None,
        }
    }

    /// A handle whose calls are children of `parent`: when the token fires, each outstanding call is cancelled
    /// and the peer is sent the cancel for it. [`CascadeLayer`](crate::CascadeLayer) gives each request such a
    /// handle, tied to the request's own token.
    pub fn child_of(&self, parent: CancellationToken) -> Self {
        Self {
            parent: Some(parent),
            ..self.clone()
        }
    }

    /// This handle with a default timeout for its requests (a call's own [`PeerCall::timeout`] wins). Other
    /// handles to the same peer keep theirs.
    pub fn with_default_timeout(mut self, timeout: Duration) -> Self {
        self.default_timeout = Some(timeout);
        self
    }

    /// Send a request. The returned future resolves to the result; see the [module docs](self) for what
    /// dropping it, its token and its timeout do.
    pub fn request(&self, method: impl Into<String>, params: impl Serialize) -> PeerCall {
        let method = method.into();
        let id = self.next_id();
        let request = Request::new(id.clone(), method.clone(), params);
        self.send(id, method, request, None)
    }

    /// Send a request that asks for progress (MCP's `_meta.progressToken`, LSP's `workDoneToken`, set to the
    /// request's id): each report the peer sends goes to `on_progress` and counts as activity for
    /// [`PeerCall::reset_on_progress`]. Where the dialect has no progress or the params are not an object, no
    /// token is sent and `on_progress` is never called.
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
            .then(|| {
                Arc::new(ProgressSlot {
                    on_progress: Box::new(on_progress),
                    last: Mutex::new(None),
                })
            });
        let request = Request::new(id.clone(), method.clone(), params);
        self.send(id, method, request, progress)
    }

    fn next_id(&self) -> Id {
        Id::Number(self.shared.next_id.fetch_add(1, Ordering::Relaxed))
    }

    fn send(
        &self,
        id: Id,
        method: String,
        request: Request,
        progress: Option<Arc<ProgressSlot>>,
    ) -> PeerCall {
        let (tx, rx) = oneshot::channel();
        let mut call = PeerCall {
            peer: self.clone(),
            id: id.clone(),
            method: method.clone(),
            reply: rx,
            started: Instant::now(),
            idle: self.default_timeout,
            max_at: None,
            progress: progress.clone(),
            timeout: self
                .default_timeout
                .map(|d| Box::pin(tokio::time::sleep(d))),
            cancel_on: None,
            parent: self
                .parent
                .clone()
                .map(|token| Box::pin(token.cancelled_owned())),
            wait_after_cancel: self.shared.dialect.waits_after_cancel(),
            state: State::Waiting,
        };
        if self.shared.closed.load(Ordering::Acquire) {
            call.state = State::Done;
            call.reply = closed_receiver();
            return call;
        }
        // A child handle whose request is already cancelled (a cooperative handler winding down, a task that
        // outlived its handler) sends nothing: the request would be cancelled the moment it is polled, after the
        // peer had started a handler for it (PROTOCOLS.md lists "nested requests of a cancelled handler are still
        // sent" among what peers get wrong). Without this check it went out, followed at once by its cancel.
        if self
            .parent
            .as_ref()
            .is_some_and(CancellationToken::is_cancelled)
        {
            call.state = State::Refused;
            call.reply = closed_receiver();
            return call;
        }
        let pending = Pending {
            method,
            reply: tx,
            progress,
        };
        self.lock().insert(id.clone(), pending);
        if self.shared.outbox.send_request(&request).is_err() {
            self.lock().remove(&id);
            call.state = State::Done;
            call.reply = closed_receiver();
            return call;
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
            .send_request(&Request::notification(method, params))
            .map_err(|_| PeerError::Closed)
    }

    /// Hand the peer a reply that arrived on the connection. Returns `false` if no call was waiting for it (it
    /// is dropped and counted as late).
    pub fn dispatch_response(&self, response: Response) -> bool {
        let pending = response.id.as_ref().and_then(|id| self.lock().remove(id));
        let Some(pending) = pending else {
            self.shared
                .stats
                .late_replies
                .fetch_add(1, Ordering::Relaxed);
            tracing::debug!(id = ?response.id, "late reply dropped");
            return false;
        };
        if let Ok(result) = &response.outcome {
            self.shared
                .dialect
                .observe_response(&pending.method, result, &self.shared.session);
        }
        if pending.reply.send(response).is_err() {
            // The caller went away between the lookup and now: the reply is late after all.
            self.shared
                .stats
                .late_replies
                .fetch_add(1, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// Hand the peer a notification that arrived on the connection. Returns `true` if it was a progress report
    /// for one of this side's calls that asked for progress (it is consumed: its callback ran and the call's idle
    /// timeout was pushed back).
    pub fn dispatch_progress(&self, notification: &Request) -> bool {
        let Some((token, update)) = self.shared.dialect.read_progress(notification) else {
            return false;
        };
        let Ok(id) = serde_json::from_value::<Id>(token) else {
            return false;
        };
        let slot = self
            .lock()
            .get(&id)
            .and_then(|pending| pending.progress.clone());
        let Some(slot) = slot else {
            return false;
        };
        *slot.last.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        // Outside the table's lock: the callback is the caller's code.
        (slot.on_progress)(update);
        true
    }

    /// The connection closed: every pending call fails with [`PeerError::Closed`], and later requests too.
    pub fn close(&self) {
        self.shared.closed.store(true, Ordering::Release);
        // Dropping the senders wakes every waiting call with `Closed`.
        self.lock().clear();
    }

    /// The counters, and the size of the pending table now.
    pub fn stats(&self) -> PeerStats {
        let s = &self.shared.stats;
        PeerStats {
            sent: s.sent.load(Ordering::Relaxed),
            cancels_sent: s.cancels_sent.load(Ordering::Relaxed),
            late_replies: s.late_replies.load(Ordering::Relaxed),
            pending: self.lock().len(),
        }
    }

    fn send_cancel(&self, id: &Id, method: &str, reason: Option<&str>) -> bool {
        let shared = &self.shared;
        if !shared.dialect.may_send_cancel(method, &shared.session) {
            tracing::debug!(%id, method, "no cancel sent: the dialect does not allow it here");
            return false;
        }
        let sent = shared
            .outbox
            .send_request(&shared.dialect.cancel_message(id, reason))
            .is_ok();
        if sent {
            shared.stats.cancels_sent.fetch_add(1, Ordering::Relaxed);
        }
        sent
    }

    fn forget(&self, id: &Id) {
        self.lock().remove(id);
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<Id, Pending>> {
        // The critical sections run no user code: a poisoned lock still holds a consistent table.
        self.shared
            .pending
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

fn closed_receiver() -> oneshot::Receiver<Response> {
    oneshot::channel().1
}

impl fmt::Debug for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Peer")
            .field("stats", &self.stats())
            .finish()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Waiting,
    // A cancel went out and the call waits for the peer's answer to it (a -32800 or a partial result); if the
    // connection closes meanwhile, the call ends with `Closed`.
    CancelledWaiting,
    Detached,
    // Never sent: its parent request was already cancelled (see `Peer::send`). Resolves to `Cancelled`.
    Refused,
    Done,
}

/// A request to the peer: resolves to its result. See the [module docs](self).
#[must_use = "a PeerCall that is dropped at once cancels its request"]
pub struct PeerCall {
    peer: Peer,
    id: Id,
    method: String,
    reply: oneshot::Receiver<Response>,
    started: Instant,
    // The timeout's length (an idle window when `max_at` is set) and the call's hard deadline.
    idle: Option<Duration>,
    max_at: Option<Instant>,
    progress: Option<Arc<ProgressSlot>>,
    timeout: Option<Pin<Box<Sleep>>>,
    cancel_on: Option<Pin<Box<WaitForCancellationFutureOwned>>>,
    parent: Option<Pin<Box<WaitForCancellationFutureOwned>>>,
    wait_after_cancel: bool,
    state: State,
}

impl PeerCall {
    /// The request's id on the wire.
    pub fn id(&self) -> &Id {
        &self.id
    }

    /// Stop after `timeout`, sending the cancel.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.idle = Some(timeout);
        self.timeout = Some(Box::pin(tokio::time::sleep_until(self.started + timeout)));
        self
    }

    /// Make the timeout an idle timeout (MCP's `resetTimeoutOnProgress`): each progress report from the peer
    /// pushes it back to a full timeout from the report, but the call never runs longer than `max_total` in all.
    /// Needs a call made with [`Peer::request_with_progress`] and a [`timeout`](Self::timeout) (or the handle's
    /// default).
    pub fn reset_on_progress(mut self, max_total: Duration) -> Self {
        self.max_at = Some(self.started + max_total);
        self
    }

    /// When the timeout fires: the deadline progress has pushed it to, if that is still ahead.
    fn pushed_back_deadline(&self) -> Option<Instant> {
        let (idle, max_at) = (self.idle?, self.max_at?);
        let last = self.progress.as_ref()?.last()?;
        let deadline = (last + idle).min(max_at);
        (deadline > Instant::now()).then_some(deadline)
    }

    /// Cancel when `token` fires, sending the cancel.
    pub fn cancel_on(mut self, token: CancellationToken) -> Self {
        self.cancel_on = Some(Box::pin(token.cancelled_owned()));
        self
    }

    /// After a cancel, keep waiting for the peer's reply (`true`) or stop at once (`false`). The default is the
    /// dialect's (see [`Dialect::waits_after_cancel`]); `false` is ACP's `stopWaitingOnCancel`.
    pub fn wait_after_cancel(mut self, wait: bool) -> Self {
        self.wait_after_cancel = wait;
        self
    }

    /// Opt out of cancel-on-drop: dropping the call lets the request run to completion on the peer (its reply is
    /// then dropped and counted as late).
    pub fn detach(mut self) -> Self {
        if self.state == State::Waiting {
            self.state = State::Detached;
        }
        self
    }

    fn stop(&mut self, error: PeerError, reason: &str) -> Poll<Result<Value, PeerError>> {
        let sent = self.peer.send_cancel(&self.id, &self.method, Some(reason));
        // Waiting on is only worth it if the peer heard the cancel and will answer.
        if self.wait_after_cancel && sent {
            self.state = State::CancelledWaiting;
            return Poll::Pending;
        }
        self.state = State::Done;
        self.peer.forget(&self.id);
        Poll::Ready(Err(error))
    }
}

impl Future for PeerCall {
    type Output = Result<Value, PeerError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        if this.state == State::Refused {
            this.state = State::Done;
            return Poll::Ready(Err(PeerError::Cancelled));
        }
        if this.state == State::Done {
            return Poll::Ready(Err(PeerError::Closed));
        }
        if let Poll::Ready(reply) = Pin::new(&mut this.reply).poll(cx) {
            this.state = State::Done;
            return Poll::Ready(match reply {
                Ok(response) => response.outcome.map_err(PeerError::Rejected),
                Err(_) => Err(PeerError::Closed),
            });
        }
        if matches!(this.state, State::Waiting | State::Detached) {
            let reason = if fired(&mut this.parent, cx) {
                Some("parent request cancelled")
            } else if fired(&mut this.cancel_on, cx) {
                Some("cancelled by the caller")
            } else {
                None
            };
            if let Some(reason) = reason {
                let poll = this.stop(PeerError::Cancelled, reason);
                if poll.is_ready() {
                    return poll;
                }
            }
        }
        while matches!(this.state, State::Waiting | State::Detached) {
            let Some(timeout) = &mut this.timeout else {
                break;
            };
            if timeout.as_mut().poll(cx).is_pending() {
                break;
            }
            if let Some(deadline) = this.pushed_back_deadline() {
                if let Some(timeout) = &mut this.timeout {
                    timeout.as_mut().reset(deadline);
                }
                continue;
            }
            let poll = this.stop(PeerError::TimedOut, "timed out");
            if poll.is_ready() {
                return poll;
            }
        }
        Poll::Pending
    }
}

/// Whether `token` (if any) has fired; registers the waker otherwise.
fn fired(
    token: &mut Option<Pin<Box<WaitForCancellationFutureOwned>>>,
    cx: &mut Context<'_>,
) -> bool {
    token
        .as_mut()
        .is_some_and(|token| token.as_mut().poll(cx).is_ready())
}

impl Drop for PeerCall {
    fn drop(&mut self) {
        match self.state {
            State::Done | State::Refused => return,
            State::Waiting => {
                // In abort mode a cascaded cancel arrives here (the handler's future is dropped with its calls):
                // say so, rather than that the caller went away.
                let parent_cancelled = self
                    .peer
                    .parent
                    .as_ref()
                    .is_some_and(CancellationToken::is_cancelled);
                let reason = if parent_cancelled {
                    "parent request cancelled"
                } else {
                    "caller went away"
                };
                self.peer.send_cancel(&self.id, &self.method, Some(reason));
            }
            State::CancelledWaiting | State::Detached => {}
        }
        self.peer.forget(&self.id);
    }
}

impl fmt::Debug for PeerCall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PeerCall")
            .field("id", &self.id)
            .field("method", &self.method)
            .field("state", &self.state)
            .finish()
    }
}
