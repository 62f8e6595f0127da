//! What a listener counts of its connections, as they happen.

use std::sync::atomic::{AtomicU64, Ordering};

/// The counters a listener's table keeps.
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) accepted: AtomicU64,
    pub(super) head_timeouts: AtomicU64,
    pub(super) idle_closed: AtomicU64,
    pub(super) evicted: AtomicU64,
    pub(super) refused: AtomicU64,
}

impl Counters {
    pub(super) fn count(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}
