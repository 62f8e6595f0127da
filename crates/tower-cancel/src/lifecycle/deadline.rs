//! When a request times out: [`Deadline`].

use std::{sync::Mutex, time::Duration};

use tokio::time::Instant;

/// The `_meta` field a request made inside a handler carries its remaining time in when the handler's request
/// got its deadline from a [`TimeoutLayer`](crate::timeout::TimeoutLayer) that reads no field of its own ([`TimeoutLayer::from_meta`](crate::timeout::TimeoutLayer::from_meta)), or from
/// a transport ([`RequestedTimeout`](crate::timeout::RequestedTimeout)): `"timeoutMs"`, milliseconds. Read it with `TimeoutLayer::from_meta(DEADLINE_FIELD)`.
pub const DEADLINE_FIELD: &str = "timeoutMs";

/// When a request (or an outgoing call) times out: a fixed moment, or an idle window that activity (a progress
/// report) pushes back to a full window from now, never past a maximum.
///
/// The [`TimeoutLayer`](crate::timeout::TimeoutLayer) gives each request one through
/// [`RequestContext::set_deadline`](crate::RequestContext::set_deadline); a layer of your own can do the same.
/// An outgoing call's timeout ([`Outgoing::timeout`](crate::outgoing::Outgoing::timeout): a
/// [`PeerCall`](crate::PeerCall)'s, an ABP agent's or a RAP runtime's call) is one too.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use tokio::time::Instant;
/// use tower_cancel::timeout::Deadline;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
/// let start = Instant::now();
/// let deadline = Deadline::idle(start, Duration::from_secs(10), Duration::from_secs(25));
/// tokio::time::advance(Duration::from_secs(8)).await;
/// deadline.push_back(Instant::now());
/// assert_eq!(deadline.at(), start + Duration::from_secs(18));
/// # }
/// ```
#[derive(Debug)]
pub struct Deadline {
    at: Mutex<Instant>,
    idle: Option<Duration>,
    max_at: Instant,
}

impl Deadline {
    /// `timeout` after `now`, fixed.
    pub fn fixed(now: Instant, timeout: Duration) -> Self {
        let at = after(now, timeout);
        Self {
            at: Mutex::new(at),
            idle: None,
            max_at: at,
        }
    }

    /// `idle` after `now`, pushed back to `idle` after each [`push_back`](Self::push_back), but never past
    /// `max_total` after `now` (never less than `idle` either).
    pub fn idle(now: Instant, idle: Duration, max_total: Duration) -> Self {
        Self {
            at: Mutex::new(after(now, idle)),
            idle: Some(idle),
            max_at: after(now, max_total.max(idle)),
        }
    }

    /// A fixed deadline, or with `max_total` an idle one (the two constructors above in one).
    pub fn new(now: Instant, timeout: Duration, max_total: Option<Duration>) -> Self {
        match max_total {
            Some(max_total) => Self::idle(now, timeout, max_total),
            None => Self::fixed(now, timeout),
        }
    }

    /// This deadline, never later than `cap` (nor its maximum: activity cannot push it past `cap` either).
    pub(crate) fn not_after(self, cap: Instant) -> Self {
        let at = self.at.into_inner().unwrap_or_else(|p| p.into_inner());
        Self {
            at: Mutex::new(at.min(cap)),
            idle: self.idle,
            max_at: self.max_at.min(cap),
        }
    }

    /// The moment it passes, as it stands now.
    pub fn at(&self) -> Instant {
        *self.at.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether activity pushes it back.
    pub fn is_idle(&self) -> bool {
        self.idle.is_some()
    }

    /// Activity at `now`: an idle deadline moves to a full window after `now`, capped at the maximum. A fixed one
    /// does not move.
    pub fn push_back(&self, now: Instant) {
        if let Some(idle) = self.idle {
            let mut at = self.at.lock().unwrap_or_else(|p| p.into_inner());
            *at = (*at).max(after(now, idle)).min(self.max_at);
        }
    }
}

/// `now + duration`, or a moment 30 years from now if that cannot be represented: `Duration::MAX` is a natural way
/// to say "no limit", and a plain `+` panics on it.
pub(crate) fn after(now: Instant, duration: Duration) -> Instant {
    const FAR: Duration = Duration::from_secs(30 * 365 * 24 * 60 * 60);
    now.checked_add(duration).unwrap_or_else(|| now + FAR)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn activity_pushes_an_idle_deadline_back_but_never_past_the_maximum() {
        let start = Instant::now();
        let secs = Duration::from_secs;
        let deadline = Deadline::new(start, secs(10), Some(secs(25)));
        assert_eq!(deadline.at(), start + secs(10));
        tokio::time::advance(secs(8)).await;
        deadline.push_back(Instant::now());
        assert_eq!(deadline.at(), start + secs(18));
        tokio::time::advance(secs(12)).await;
        deadline.push_back(Instant::now());
        assert_eq!(deadline.at(), start + secs(25), "capped at the maximum");

        let fixed = Deadline::new(start, secs(10), None);
        fixed.push_back(Instant::now());
        assert_eq!(fixed.at(), start + secs(10), "no idle window: fixed");
    }

    #[tokio::test(start_paused = true)]
    async fn a_duration_too_large_to_add_means_far_away() {
        let now = Instant::now();
        assert!(Deadline::fixed(now, Duration::MAX).at() > now + Duration::from_secs(1_000_000));
    }
}
