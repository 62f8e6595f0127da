use std::{
    fmt,
    future::Future,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use serde_json::Value;
use tokio::{
    sync::oneshot,
    time::{Instant, Sleep},
};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use super::{progress::ProgressSlot, Parent, Peer, PeerError};
use crate::{
    lifecycle::Deadline,
    message::{Id, Response},
    reason::CancelReason,
};

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

/// A request to the peer: resolves to its result. See the [module docs](super).
#[must_use = "a PeerCall that is dropped at once cancels its request"]
pub struct PeerCall {
    peer: Peer,
    id: Id,
    method: String,
    reply: oneshot::Receiver<Response>,
    started: Instant,
    // What the deadline is made of: its length, and for an idle timeout the cap on the whole call.
    timeout: Option<Duration>,
    max_total: Option<Duration>,
    timer: Option<Timer>,
    progress: Option<Arc<ProgressSlot>>,
    cancel_on: Option<Pin<Box<WaitForCancellationFutureOwned>>>,
    parent: Option<Pin<Box<WaitForCancellationFutureOwned>>>,
    wait_after_cancel: bool,
    state: State,
}

/// The call's deadline, and the sleep that wakes the call when it may have passed.
struct Timer {
    deadline: Deadline,
    sleep: Pin<Box<Sleep>>,
}

impl PeerCall {
    /// A call of `peer` waiting for `reply`, with the handle's default timeout.
    pub(super) fn new(
        peer: Peer,
        id: Id,
        method: String,
        reply: oneshot::Receiver<Response>,
        progress: Option<Arc<ProgressSlot>>,
    ) -> Self {
        let mut call = Self {
            id,
            method,
            reply,
            started: Instant::now(),
            timeout: peer.default_timeout,
            max_total: None,
            timer: None,
            progress,
            cancel_on: None,
            parent: peer
                .parent
                .as_ref()
                .map(|parent| Box::pin(parent.token().cancelled_owned())),
            wait_after_cancel: peer.shared.dialect.waits_after_cancel(),
            state: State::Waiting,
            peer,
        };
        call.arm();
        call
    }

    /// This call, never sent (the connection closed, or it could not be written): it resolves to
    /// [`PeerError::Closed`] and is not in the table.
    pub(super) fn closed(mut self) -> Self {
        self.state = State::Done;
        self
    }

    /// This call, never sent because its parent request was already cancelled: it resolves to
    /// [`PeerError::Cancelled`] and is not in the table.
    pub(super) fn refused(mut self) -> Self {
        self.state = State::Refused;
        self
    }

    /// The request's id on the wire.
    pub fn id(&self) -> &Id {
        &self.id
    }

    /// Stop after `timeout`, sending the cancel.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self.arm();
        self
    }

    /// Make the timeout an idle timeout (MCP's `resetTimeoutOnProgress`): each progress report from the peer
    /// pushes it back to a full timeout from the report, but the call never runs longer than `max_total` in all.
    /// Needs a call made with [`Peer::request_with_progress`] and a [`timeout`](Self::timeout) (or the handle's
    /// default).
    pub fn reset_on_progress(mut self, max_total: Duration) -> Self {
        self.max_total = Some(max_total);
        self.arm();
        self
    }

    /// Cancel when `token` fires, sending the cancel.
    pub fn cancel_on(mut self, token: CancellationToken) -> Self {
        self.cancel_on = Some(Box::pin(token.cancelled_owned()));
        self
    }

    /// After a cancel, keep waiting for the peer's reply (`true`) or stop at once (`false`). The default is the
    /// dialect's (see [`Dialect::waits_after_cancel`](crate::Dialect::waits_after_cancel)); `false` is ACP's
    /// `stopWaitingOnCancel`.
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

    /// (Re)make the deadline from the call's start, as the timeout and `max_total` now stand.
    fn arm(&mut self) {
        let Some(timeout) = self.timeout else {
            return;
        };
        let deadline = Deadline::new(self.started, timeout, self.max_total);
        let at = deadline.at();
        match &mut self.timer {
            Some(timer) => {
                timer.deadline = deadline;
                timer.sleep.as_mut().reset(at);
            }
            None => {
                self.timer = Some(Timer {
                    deadline,
                    sleep: Box::pin(tokio::time::sleep_until(at)),
                });
            }
        }
    }

    /// Whether the timeout has passed; registers the waker otherwise. Progress reported since the sleep was set
    /// pushes an idle deadline back, and the sleep with it.
    fn timed_out(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(timer) = &mut self.timer else {
            return false;
        };
        while timer.sleep.as_mut().poll(cx).is_ready() {
            if let Some(last) = self.progress.as_ref().and_then(|slot| slot.last()) {
                timer.deadline.push_back(last);
            }
            let at = timer.deadline.at();
            if at <= Instant::now() {
                return true;
            }
            timer.sleep.as_mut().reset(at);
        }
        false
    }

    fn stop(&mut self, error: PeerError, reason: &CancelReason) -> Poll<Result<Value, PeerError>> {
        let sent = self.peer.send_cancel(&self.id, &self.method, reason);
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
        match this.state {
            State::Refused => {
                this.state = State::Done;
                return Poll::Ready(Err(PeerError::Cancelled));
            }
            State::Done => return Poll::Ready(Err(PeerError::Closed)),
            State::Waiting | State::CancelledWaiting | State::Detached => {}
        }
        if let Poll::Ready(reply) = Pin::new(&mut this.reply).poll(cx) {
            this.state = State::Done;
            return Poll::Ready(match reply {
                Ok(response) => response.outcome.map_err(PeerError::Rejected),
                Err(_) => Err(PeerError::Closed),
            });
        }
        if !matches!(this.state, State::Waiting | State::Detached) {
            return Poll::Pending;
        }
        let stop = if fired(&mut this.parent, cx) {
            Some((PeerError::Cancelled, CancelReason::Parent))
        } else if fired(&mut this.cancel_on, cx) {
            Some((
                PeerError::Cancelled,
                CancelReason::local("cancelled by the caller"),
            ))
        } else if this.timed_out(cx) {
            Some((PeerError::TimedOut, CancelReason::Timeout))
        } else {
            None
        };
        match stop {
            Some((error, reason)) => this.stop(error, &reason),
            None => Poll::Pending,
        }
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
                let parent_cancelled = self.peer.parent.as_ref().is_some_and(Parent::is_cancelled);
                let reason = if parent_cancelled {
                    CancelReason::Parent
                } else {
                    CancelReason::local("caller went away")
                };
                self.peer.send_cancel(&self.id, &self.method, &reason);
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
