//! Counting what runs: each request on its task holds a [`RunningGuard`], and a drain waits for the count to fall
//! to zero.

use std::{
    future::Future,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
};

use tokio::sync::Notify;

/// Counts requests running, each on its task: zero means none of them holds a registry entry any more. Clones
/// share the count.
#[derive(Clone, Debug, Default)]
pub(crate) struct Running(Arc<Count>);

#[derive(Debug, Default)]
struct Count {
    now: AtomicUsize,
    // Told when the count falls to zero, for a drain waiting on it.
    idle: Notify,
}

impl Running {
    /// One more request running, until the guard is dropped.
    pub(crate) fn enter(&self) -> RunningGuard {
        self.0.now.fetch_add(1, Ordering::AcqRel);
        RunningGuard(self.0.clone())
    }

    /// How many requests run now.
    pub(crate) fn get(&self) -> usize {
        self.0.now.load(Ordering::Acquire)
    }

    /// Resolves once nothing runs (at once if nothing does now).
    pub(crate) fn idle(&self) -> impl Future<Output = ()> + Send + 'static {
        let count = self.0.clone();
        async move {
            loop {
                // Made before the check: a guard dropped between the two still wakes it.
                let told = count.idle.notified();
                if count.now.load(Ordering::Acquire) == 0 {
                    return;
                }
                told.await;
            }
        }
    }
}

/// One running request; dropped when its task ends.
#[derive(Debug)]
pub(crate) struct RunningGuard(Arc<Count>);

impl Drop for RunningGuard {
    fn drop(&mut self) {
        if self.0.now.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Running;

    #[tokio::test]
    async fn idle_waits_for_the_last_guard() {
        let running = Running::default();
        running.idle().await;
        let (first, second) = (running.enter(), running.enter());
        let idle = tokio::spawn(running.idle());
        drop(first);
        tokio::task::yield_now().await;
        assert!(!idle.is_finished());
        drop(second);
        idle.await.unwrap();
        assert_eq!(running.get(), 0);
    }
}
