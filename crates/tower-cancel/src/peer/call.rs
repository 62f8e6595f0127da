//! One request to the peer, [`PeerCall`]: the [`Outgoing`] race, and what the peer does on each way it ends.

use std::{
    fmt,
    future::Future,
    pin::Pin,
    sync::Arc,
    task::{ready, Context, Poll},
    time::Duration,
};

use serde_json::Value;
use tokio::{sync::oneshot, time::Instant};
use tokio_util::sync::CancellationToken;

use super::{progress::ProgressSlot, table::Answer, Parent, Peer, PeerError, Shared};
use crate::{
    message::Id,
    outgoing::{Event, Outgoing, Owner, Stage},
    reason::CancelReason,
};

/// A request to the peer: resolves to its result. See the [module docs](super).
///
/// Poll it inside a tokio runtime with its timer (as any tokio timeout): its timeout's sleep is made at its first poll.
/// A call with no timeout ([`PeerCall::no_timeout`], [`Peer::without_default_timeout`]) needs no timer.
#[must_use = "a PeerCall that is dropped at once cancels its request"]
pub struct PeerCall {
    call: Outgoing<oneshot::Receiver<Answer>, Side>,
}

/// The peer's side of one call: the call's id and method, and what it does when the call gives up or is dropped.
struct Side {
    // The peer's shared part and the handle's parent, not the whole handle: its default timeout is the call's now.
    shared: Arc<Shared>,
    parent: Option<Parent>,
    id: Id,
    method: String,
    // Where the peer's progress reports for the call go; the last one's time pushes an idle timeout back.
    progress: Option<Arc<ProgressSlot>>,
    wait_after_cancel: bool,
    // Dropping the call sends no cancel (`detach`).
    detached: bool,
    // Never sent: its parent request was already cancelled (see `Peer::send`), or the dialect allows no such
    // request here. Resolves to that error, once. A byte, not the error: every call carries it.
    refused: Option<Refused>,
}

/// Why a call was never sent.
#[derive(Clone, Copy, Debug)]
pub(super) enum Refused {
    /// Its parent request was already cancelled: [`PeerError::Cancelled`].
    ParentCancelled,
    /// The conversation's revision has no such request from this side: [`PeerError::NotAllowed`].
    NotAllowed,
    /// Its parent request's deadline left it less than a millisecond: [`PeerError::TimedOut`].
    DeadlinePassed,
}

impl From<Refused> for PeerError {
    fn from(refused: Refused) -> Self {
        match refused {
            Refused::ParentCancelled => PeerError::Cancelled,
            Refused::NotAllowed => PeerError::NotAllowed,
            Refused::DeadlinePassed => PeerError::TimedOut,
        }
    }
}

impl PeerCall {
    /// A call of `peer` waiting for `reply`, with the handle's parent and default timeout, never running past
    /// `not_after` (the parent request's deadline, as it stood when the call was made).
    pub(super) fn new(
        peer: Peer,
        id: Id,
        method: String,
        reply: oneshot::Receiver<Answer>,
        progress: Option<Arc<ProgressSlot>>,
        not_after: Option<Instant>,
    ) -> Self {
        let token = peer.parent.as_ref().map(Parent::token);
        let side = Side {
            wait_after_cancel: peer.shared.dialect.waits_after_cancel(),
            shared: peer.shared,
            parent: peer.parent,
            id,
            method,
            progress,
            detached: false,
            refused: None,
        };
        let mut call = Outgoing::new(reply, side);
        if let Some(token) = token {
            call = call.parent(token);
        }
        if let Some(timeout) = peer.default_timeout {
            call = call.timeout(timeout);
        }
        if let Some(at) = not_after {
            call = call.not_after(at);
        }
        Self { call }
    }

    /// This call, never sent (the connection closed, or it could not be written): it resolves to
    /// [`PeerError::Closed`] and is not in the table.
    pub(super) fn closed(mut self) -> Self {
        self.call.disarm();
        self
    }

    /// This call, never sent because its parent request was already cancelled: it resolves to
    /// [`PeerError::Cancelled`] and is not in the table.
    pub(super) fn refused(self) -> Self {
        self.refused_for(Refused::ParentCancelled)
    }

    /// This call, never sent: it resolves to the error of `why` and is not in the table.
    pub(super) fn refused_for(mut self, why: Refused) -> Self {
        self.call.disarm();
        self.call.owner_mut().refused = Some(why);
        self
    }

    /// The request's id on the wire.
    pub fn id(&self) -> &Id {
        &self.call.owner().id
    }

    /// Stop after `timeout` (from when the call was made), sending the cancel, instead of after the handle's default
    /// ([`Peer::DEFAULT_TIMEOUT`] unless the handle set another). A call made inside a handler whose request has a
    /// deadline still stops at that deadline if it comes first: a longer timeout never extends it.
    pub fn timeout(self, timeout: Duration) -> Self {
        Self {
            call: self.call.timeout(timeout),
        }
    }

    /// Wait without a timeout (for the answer, a token, the parent's cancel or the call's drop), whatever the
    /// handle's default; but not past the deadline of the request the call was made for, if it has one.
    pub fn no_timeout(self) -> Self {
        Self {
            call: self.call.no_timeout(),
        }
    }

    /// Make the timeout an idle timeout (MCP's `resetTimeoutOnProgress`): each progress report from the peer
    /// pushes it back to a full timeout from the report, but the call never runs longer than `max_total` in all.
    /// Needs a call made with [`Peer::request_with_progress`] and a [`timeout`](Self::timeout) (or the handle's
    /// default).
    pub fn reset_on_progress(self, max_total: Duration) -> Self {
        Self {
            call: self.call.reset_on_activity(max_total),
        }
    }

    /// Cancel when `token` fires, sending the cancel.
    pub fn cancel_on(self, token: CancellationToken) -> Self {
        Self {
            call: self.call.cancel_on(token),
        }
    }

    /// After a cancel, keep waiting for the peer's reply (`true`) or stop at once (`false`). The default is the
    /// dialect's (see [`Dialect::waits_after_cancel`](crate::Dialect::waits_after_cancel)); `false` is ACP's
    /// `stopWaitingOnCancel`.
    pub fn wait_after_cancel(mut self, wait: bool) -> Self {
        self.call.owner_mut().wait_after_cancel = wait;
        self
    }

    /// Opt out of cancel-on-drop: dropping the call lets the request run to completion on the peer (its reply is
    /// then dropped and counted as late).
    pub fn detach(mut self) -> Self {
        self.call.owner_mut().detached = true;
        self
    }

    /// The call gave up (`error`, for `reason`): send the cancel, then wait on for the peer's answer to it or stop.
    fn stop(&mut self, error: PeerError, reason: &CancelReason) -> Poll<Result<Value, PeerError>> {
        let side = self.call.owner();
        let sent = side.shared.send_cancel(&side.id, &side.method, reason);
        // Waiting on is only worth it if the peer heard the cancel and will answer (a -32800 or a partial result);
        // the call now waits for that answer alone, its waker registered. If the connection closes meanwhile, the
        // call ends with `Closed`.
        if side.wait_after_cancel && sent {
            return Poll::Pending;
        }
        side.shared.forget(&side.id);
        self.call.disarm();
        Poll::Ready(Err(error))
    }
}

impl Future for PeerCall {
    type Output = Result<Value, PeerError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if this.call.is_ended() {
            // Never sent, or polled again after its end.
            let refused = this.call.owner_mut().refused.take();
            if let (Some(Refused::DeadlinePassed), Some(parent)) =
                (refused, &this.call.owner().parent)
            {
                // The parent's deadline has passed: it times out now, not with its handler's answer to this.
                parent.expire_if_passed();
            }
            return Poll::Ready(Err(refused.map_or(PeerError::Closed, PeerError::from)));
        }
        let (error, reason) = match ready!(Pin::new(&mut this.call).poll(cx)) {
            Event::Answered(Ok(Answer::Reply(response))) => {
                return Poll::Ready(response.outcome.map_err(PeerError::Rejected))
            }
            Event::Answered(Ok(Answer::EndedByPeer(reason))) => {
                return Poll::Ready(Err(PeerError::CancelledByPeer { reason }))
            }
            // The table dropped the sender: the connection closed.
            Event::Answered(Err(_)) => return Poll::Ready(Err(PeerError::Closed)),
            Event::ParentCancelled => (PeerError::Cancelled, CancelReason::Parent),
            Event::Cancelled => (
                PeerError::Cancelled,
                CancelReason::local("cancelled by the caller"),
            ),
            Event::TimedOut => {
                // The cap may be what fired: the parent's deadline passed, and the parent times out with it (its
                // handler is about to see this error in the same instant, and must not answer in its place).
                if let Some(parent) = &this.call.owner().parent {
                    parent.expire_if_passed();
                }
                (PeerError::TimedOut, CancelReason::Timeout)
            }
        };
        this.stop(error, &reason)
    }
}

impl Owner for Side {
    fn dropped(&mut self, stage: Stage) {
        if stage == Stage::Waiting && !self.detached {
            // In abort mode a cascaded cancel arrives here (the handler's future is dropped with its calls): say
            // so, rather than that the caller went away.
            let parent_cancelled = self.parent.as_ref().is_some_and(Parent::is_cancelled);
            let reason = if parent_cancelled {
                CancelReason::Parent
            } else {
                CancelReason::local("caller went away")
            };
            self.shared.send_cancel(&self.id, &self.method, &reason);
        }
        // Detached, or waiting on after its cancel: no cancel (more) to send, but nobody waits for the reply now.
        self.shared.forget(&self.id);
    }

    fn last_activity(&self) -> Option<Instant> {
        self.progress.as_ref().and_then(|slot| slot.last())
    }
}

impl fmt::Debug for PeerCall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let side = self.call.owner();
        f.debug_struct("PeerCall")
            .field("id", &side.id)
            .field("method", &side.method)
            .field("detached", &side.detached)
            .field("call", &self.call)
            .finish()
    }
}
