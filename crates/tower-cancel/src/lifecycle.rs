//! The per-request state machine: the one place where "who answers" is decided.
//!
//! # Invariants
//!
//! A request starts `RUNNING` and moves exactly once, by compare-and-swap, to `COMPLETED` (its handler's outcome
//! is the reply) or to `CANCELLED` (the dialect's cancelled reply is). Every failed swap means another party
//! settled the request first, so at most one outcome is ever acted on. The cancellation token fires only on the
//! move to `CANCELLED`, and the reason is written before that move, so whoever sees `CANCELLED` also sees a reason.

use std::sync::{
    atomic::{AtomicU8, Ordering},
    OnceLock,
};

use tokio_util::sync::CancellationToken;

use crate::{context::CancelReason, message::Id};

const RUNNING: u8 = 0;
const COMPLETED: u8 = 1;
const CANCELLED: u8 = 2;

/// The state one request shares between its future, its registry entry and its context.
#[derive(Debug)]
pub(crate) struct Lifecycle {
    id: Id,
    state: AtomicU8,
    reason: OnceLock<CancelReason>,
    token: CancellationToken,
}

impl Lifecycle {
    pub(crate) fn new(id: Id) -> Self {
        Self {
            id,
            state: AtomicU8::new(RUNNING),
            reason: OnceLock::new(),
            token: CancellationToken::new(),
        }
    }

    pub(crate) fn id(&self) -> &Id {
        &self.id
    }

    pub(crate) fn token(&self) -> &CancellationToken {
        &self.token
    }

    /// Settle as cancelled. Returns `false` if the request was already settled (completed, or cancelled by an
    /// earlier source): the caller's cancel is then a no-op.
    pub(crate) fn cancel(&self, reason: CancelReason) -> bool {
        if self.state.load(Ordering::Acquire) != RUNNING {
            return false;
        }
        // Written before the swap: the first cancel to get here names the reason. A cancel that loses the race
        // to a completion leaves a reason nobody reads, because `reason()` only answers in `CANCELLED`.
        let _ = self.reason.set(reason);
        let won = self
            .state
            .compare_exchange(RUNNING, CANCELLED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if won {
            self.token.cancel();
        }
        won
    }

    /// Settle as completed. Returns `false` if a cancel won first.
    pub(crate) fn complete(&self) -> bool {
        self.state
            .compare_exchange(RUNNING, COMPLETED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    pub(crate) fn is_cancelled(&self) -> bool {
        self.state.load(Ordering::Acquire) == CANCELLED
    }

    pub(crate) fn is_completed(&self) -> bool {
        self.state.load(Ordering::Acquire) == COMPLETED
    }

    /// The reason, once the request is cancelled.
    pub(crate) fn reason(&self) -> Option<&CancelReason> {
        if self.is_cancelled() {
            self.reason.get()
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_settlement_wins() {
        let l = Lifecycle::new(1.into());
        assert!(l.cancel(CancelReason::Timeout));
        assert!(!l.complete());
        assert!(!l.cancel(CancelReason::Disconnect));
        assert_eq!(l.reason(), Some(&CancelReason::Timeout));
        assert!(l.token().is_cancelled());

        let l = Lifecycle::new(2.into());
        assert!(l.complete());
        assert!(!l.cancel(CancelReason::peer(None)));
        assert_eq!(l.reason(), None);
        assert!(!l.token().is_cancelled());
    }
}
