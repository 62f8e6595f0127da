//! What the server knows of one open connection: its requests in flight, since when it has been idle, and
//! whether it may be evicted.

use std::sync::{
    atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering},
    Arc,
};

use tokio::{sync::Notify, time::Instant};

/// May be evicted when it has no request in flight.
const SERVING: u8 = 0;
/// Chosen for eviction: not chosen again, whether it closes at once or finishes a request first.
const EVICTING: u8 = 1;
/// Carries an upgraded stream (a WebSocket): its protocol keeps it, so it is neither idle-closed nor evicted.
const HELD: u8 = 2;

/// One connection, shared by its task, its requests (their [`RequestGuard`]s) and the listener's table.
#[derive(Debug)]
pub(super) struct Entry {
    /// The table's clock origin: times are kept as milliseconds since, in one atomic.
    epoch: Instant,
    in_flight: AtomicUsize,
    idle_since_ms: AtomicU64,
    served: AtomicBool,
    state: AtomicU8,
    /// Told by the table when the connection is chosen for eviction (a permit waits if its task is busy).
    pub(super) evict: Notify,
    /// Told when the last request in flight ends, so that the idle deadline is counted from then.
    pub(super) went_idle: Notify,
}

/// Where a connection stands, for its idle deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Idle {
    /// A request in flight, or an upgraded stream: not idle.
    Busy,
    /// No request yet, since it opened at this instant.
    Unserved(Instant),
    /// No request in flight since its last one ended at this instant.
    Served(Instant),
}

impl Entry {
    pub(super) fn new(epoch: Instant) -> Self {
        Self {
            epoch,
            in_flight: AtomicUsize::new(0),
            idle_since_ms: AtomicU64::new(millis_since(epoch)),
            served: AtomicBool::new(false),
            state: AtomicU8::new(SERVING),
            evict: Notify::new(),
            went_idle: Notify::new(),
        }
    }

    /// One more request in flight, until the guard is dropped (when its response's body is done with).
    pub(super) fn begin_request(self: &Arc<Self>) -> RequestGuard {
        self.served.store(true, Ordering::Relaxed);
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        RequestGuard {
            entry: Arc::clone(self),
        }
    }

    pub(super) fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    /// From now on the connection carries an upgraded stream.
    pub(super) fn hold(&self) {
        self.state.store(HELD, Ordering::Release);
    }

    pub(super) fn idle(&self) -> Idle {
        if self.in_flight() > 0 || self.state.load(Ordering::Acquire) == HELD {
            return Idle::Busy;
        }
        let since = self.epoch
            + std::time::Duration::from_millis(self.idle_since_ms.load(Ordering::Acquire));
        if self.served.load(Ordering::Relaxed) {
            Idle::Served(since)
        } else {
            Idle::Unserved(since)
        }
    }

    /// Since when it has been idle, if it may be evicted now.
    pub(super) fn evictable_since(&self) -> Option<u64> {
        let evictable = self.state.load(Ordering::Acquire) == SERVING && self.in_flight() == 0;
        evictable.then(|| self.idle_since_ms.load(Ordering::Acquire))
    }

    /// Mark it chosen for eviction; false if it was not evictable any more.
    pub(super) fn take_for_eviction(&self) -> bool {
        self.state
            .compare_exchange(SERVING, EVICTING, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
}

/// A request in flight on its connection.
#[derive(Debug)]
pub(super) struct RequestGuard {
    entry: Arc<Entry>,
}

impl RequestGuard {
    pub(super) fn entry(&self) -> &Entry {
        &self.entry
    }
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        // The idle instant first: a watchdog that sees no request in flight must not see an older one.
        self.entry
            .idle_since_ms
            .store(millis_since(self.entry.epoch), Ordering::Release);
        if self.entry.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.entry.went_idle.notify_one();
        }
    }
}

fn millis_since(epoch: Instant) -> u64 {
    u64::try_from(epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
}
