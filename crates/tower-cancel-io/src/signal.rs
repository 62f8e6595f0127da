//! A one-way signal between a connection's parts: a token to wait on, and a flag to read.
//!
//! The read loop looks at its connection's signals (shutdown asked for, the writer gone) before every frame and
//! before every request's readiness, several times per request. `CancellationToken::is_cancelled` takes the
//! token's lock; the flag here is one load. The token is still what a task waits on.

use std::sync::{
    atomic::{AtomicBool, Ordering},
    Arc,
};

use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

/// Fired at most once; every clone sees it.
#[derive(Clone, Debug, Default)]
pub(crate) struct Signal {
    fired: Arc<AtomicBool>,
    token: CancellationToken,
}

impl Signal {
    /// Fire the signal: the flag first, so that a task woken by the token reads it set.
    pub(crate) fn fire(&self) {
        self.fired.store(true, Ordering::Release);
        self.token.cancel();
    }

    /// Whether the signal fired.
    pub(crate) fn has_fired(&self) -> bool {
        self.fired.load(Ordering::Acquire)
    }

    /// Resolves when the signal fires (at once if it did).
    pub(crate) fn fired(&self) -> WaitForCancellationFuture<'_> {
        self.token.cancelled()
    }

    /// A guard that fires the signal when it is dropped: on every way out of a scope, a panic's unwinding included.
    pub(crate) fn fire_on_drop(self) -> FireOnDrop {
        FireOnDrop(self)
    }
}

/// Fires its signal when dropped (see [`Signal::fire_on_drop`]).
#[derive(Debug)]
pub(crate) struct FireOnDrop(Signal);

impl Drop for FireOnDrop {
    fn drop(&mut self) {
        self.0.fire();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_clone_sees_the_signal_and_a_waiter_wakes() {
        let signal = Signal::default();
        let clone = signal.clone();
        assert!(!clone.has_fired());
        let waiter = tokio::spawn(async move {
            clone.fired().await;
            clone.has_fired()
        });
        tokio::task::yield_now().await;
        signal.fire();
        assert!(signal.has_fired());
        assert!(
            waiter.await.unwrap(),
            "the flag is set before the waiter wakes"
        );
    }
}
