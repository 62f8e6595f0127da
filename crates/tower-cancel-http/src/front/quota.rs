//! Counting what runs, with a bound: each request on its task holds a [`Permit`] of its front end's [`Quota`]
//! (and one of its scope's: an MCP session's, a RAP thread's, a principal's), a request past a bound is refused
//! before it runs, and a drain waits for the count to fall to zero.

use std::{
    fmt,
    future::Future,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
};

use tokio::sync::Notify;

/// A count of requests running, and the most that may run at once. Clones share the count.
#[derive(Clone)]
pub struct Quota(Arc<Count>);

struct Count {
    now: AtomicUsize,
    max: usize,
    // Told when the count falls to zero, for a drain waiting on it.
    idle: Notify,
}

/// A [`Quota`] had no room: the request is refused before it runs, the protocol's way of saying "busy" (HTTP 503
/// with `Retry-After`, a RAP invocation refused, ABP's `RATE_LIMITED`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Busy {
    /// The bound that was reached.
    pub max: usize,
}

impl fmt::Display for Busy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "too many requests in flight (at most {})", self.max)
    }
}

impl std::error::Error for Busy {}

impl Quota {
    /// At most `max` at once.
    pub fn new(max: usize) -> Self {
        Self(Arc::new(Count {
            now: AtomicUsize::new(0),
            max,
            idle: Notify::new(),
        }))
    }

    /// How many run now.
    pub fn in_use(&self) -> usize {
        self.0.now.load(Ordering::Acquire)
    }

    /// The most that may run at once.
    pub fn max(&self) -> usize {
        self.0.max
    }

    /// Room for `n` more, all or none (a batch is admitted whole or refused whole).
    pub fn try_take(&self, n: usize) -> Result<Permits, Busy> {
        let max = self.0.max;
        self.0
            .now
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |now| {
                now.checked_add(n).filter(|&after| after <= max)
            })
            .map_err(|_| Busy { max })?;
        Ok(Permits {
            count: self.0.clone(),
            left: n,
        })
    }

    /// One more, whatever the bound: for what needs no room but is counted while it runs (a notification).
    pub(crate) fn enter(&self) -> Permit {
        self.0.now.fetch_add(1, Ordering::AcqRel);
        Permit(self.0.clone())
    }

    /// Resolves once nothing runs (at once if nothing does now).
    pub(crate) fn idle(&self) -> impl Future<Output = ()> + Send + 'static {
        let count = self.0.clone();
        async move {
            loop {
                // Made before the check: a permit dropped between the two still wakes it.
                let told = count.idle.notified();
                if count.now.load(Ordering::Acquire) == 0 {
                    return;
                }
                told.await;
            }
        }
    }
}

impl Default for Quota {
    /// No bound.
    fn default() -> Self {
        Self::new(usize::MAX)
    }
}

impl fmt::Debug for Quota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Quota")
            .field("in_use", &self.in_use())
            .field("max", &self.0.max)
            .finish()
    }
}

/// Room taken for several requests at once, handed out one [`Permit`] each; what is not handed out is given back
/// when this is dropped.
pub struct Permits {
    count: Arc<Count>,
    left: usize,
}

impl Iterator for Permits {
    type Item = Permit;

    fn next(&mut self) -> Option<Permit> {
        self.left = self.left.checked_sub(1)?;
        Some(Permit(self.count.clone()))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl Drop for Permits {
    fn drop(&mut self) {
        if self.left > 0 {
            release(&self.count, self.left);
        }
    }
}

impl fmt::Debug for Permits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permits").field("left", &self.left).finish()
    }
}

/// One running request's place in a [`Quota`], given back when dropped (when its task ends).
pub struct Permit(Arc<Count>);

impl Drop for Permit {
    fn drop(&mut self) {
        release(&self.0, 1);
    }
}

impl fmt::Debug for Permit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Permit")
    }
}

fn release(count: &Count, n: usize) {
    if count.now.fetch_sub(n, Ordering::AcqRel) == n {
        count.idle.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::{Busy, Quota};

    #[tokio::test]
    async fn idle_waits_for_the_last_permit() {
        let quota = Quota::default();
        quota.idle().await;
        let (first, second) = (quota.enter(), quota.enter());
        let idle = tokio::spawn(quota.idle());
        drop(first);
        tokio::task::yield_now().await;
        assert!(!idle.is_finished());
        drop(second);
        idle.await.unwrap();
        assert_eq!(quota.in_use(), 0);
    }

    #[test]
    fn room_is_taken_all_or_none_and_given_back_as_permits_go() {
        let quota = Quota::new(3);
        let mut two = quota.try_take(2).unwrap();
        assert_eq!(quota.try_take(2).unwrap_err(), Busy { max: 3 });
        assert_eq!(quota.in_use(), 2, "a refusal takes nothing");
        let one = two.next().unwrap();
        drop(two);
        assert_eq!(quota.in_use(), 1, "what was not handed out is given back");
        let rest = quota.try_take(2).unwrap();
        assert_eq!(rest.count(), 2, "two permits, each dropped at once");
        drop(one);
        assert_eq!(quota.in_use(), 0);
        assert!(quota.try_take(4).is_err() && quota.try_take(3).is_ok());
    }
}
