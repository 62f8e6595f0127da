//! The per-request state machine: the one place where "who answers" is decided.
//!
//! # Invariants
//!
//! A request starts `RUNNING` and moves exactly once, by compare-and-swap, to `COMPLETED` (its handler's outcome
//! is the reply) or to `CANCELLED` (the dialect's cancelled reply is). Every failed swap means another party
//! settled the request first, so at most one outcome is ever acted on. The cancellation token fires only on the
//! move to `CANCELLED`, and the reason is written before that move, so whoever sees `CANCELLED` also sees a reason.

use std::{
    sync::{
        atomic::{AtomicU8, Ordering},
        Mutex, OnceLock,
    },
    time::Duration,
};

use tokio::time::Instant;
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
    // Set by a timeout layer, at most once: the request's deadline.
    timing: OnceLock<Timing>,
}

/// A request's deadline. With an idle window, activity (a progress report) pushes the deadline back to `idle`
/// from now, but never past `max_at`.
#[derive(Debug)]
pub(crate) struct Timing {
    deadline: Mutex<Instant>,
    idle: Option<Duration>,
    max_at: Instant,
}

impl Timing {
    pub(crate) fn new(now: Instant, timeout: Duration, reset: Option<Duration>) -> Self {
        let deadline = now + timeout;
        let max_at = reset.map_or(deadline, |max_total| now + max_total.max(timeout));
        Self {
            deadline: Mutex::new(deadline),
            idle: reset.map(|_| timeout),
            max_at,
        }
    }

    fn deadline(&self) -> Instant {
        *self.deadline.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn push_back(&self, now: Instant) {
        if let Some(idle) = self.idle {
            let mut deadline = self.deadline.lock().unwrap_or_else(|p| p.into_inner());
            *deadline = (*deadline).max(now + idle).min(self.max_at);
        }
    }
}

impl Lifecycle {
    pub(crate) fn new(id: Id) -> Self {
        Self {
            id,
            state: AtomicU8::new(RUNNING),
            reason: OnceLock::new(),
            token: CancellationToken::new(),
            timing: OnceLock::new(),
        }
    }

    /// Give the request a deadline. Only the first call counts (the outermost timeout layer wins).
    pub(crate) fn set_timing(&self, timing: Timing) -> bool {
        self.timing.set(timing).is_ok()
    }

    /// The request's deadline now, if it has one.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.timing.get().map(Timing::deadline)
    }

    /// Activity: push back an idle deadline.
    pub(crate) fn touch(&self) {
        if let Some(timing) = self.timing.get() {
            timing.push_back(Instant::now());
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

    #[tokio::test(start_paused = true)]
    async fn activity_pushes_an_idle_deadline_back_but_never_past_the_maximum() {
        let start = Instant::now();
        let secs = Duration::from_secs;
        let l = Lifecycle::new(1.into());
        assert!(l.set_timing(Timing::new(start, secs(10), Some(secs(25)))));
        assert!(!l.set_timing(Timing::new(start, secs(1), None)), "set once");
        assert_eq!(l.deadline(), Some(start + secs(10)));
        tokio::time::advance(secs(8)).await;
        l.touch();
        assert_eq!(l.deadline(), Some(start + secs(18)));
        tokio::time::advance(secs(12)).await;
        l.touch();
        assert_eq!(
            l.deadline(),
            Some(start + secs(25)),
            "capped at the maximum"
        );

        let fixed = Lifecycle::new(2.into());
        fixed.set_timing(Timing::new(start, secs(10), None));
        fixed.touch();
        assert_eq!(
            fixed.deadline(),
            Some(start + secs(10)),
            "no idle window: fixed"
        );
    }

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
