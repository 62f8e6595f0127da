//! What a front end's clones share at run time: its requests running, its connections open, its counters, and
//! whether it is shutting down.

use std::sync::{
    atomic::{AtomicU64, Ordering},
    Arc,
};

use tokio_util::sync::CancellationToken;

use super::{links::Links, quota::Quota, FrontStats};

#[derive(Debug, Default)]
pub(crate) struct State {
    /// The requests running, bounded by the settings' `max_in_flight`.
    pub(crate) running: Quota,
    pub(crate) links: Arc<Links>,
    requests: AtomicU64,
    busy: AtomicU64,
    // Cancelled once the shutdown has closed every open link: what long-lived links (a WebSocket) watch.
    pub(crate) shutdown: CancellationToken,
}

impl State {
    /// Nothing running yet, at most as many at once as `running` allows.
    pub(crate) fn new(running: Quota) -> Self {
        Self {
            running,
            ..Self::default()
        }
    }

    pub(crate) fn count_request(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_busy(&self, requests: usize) {
        self.busy.fetch_add(requests as u64, Ordering::Relaxed);
    }

    pub(crate) fn is_shutting_down(&self) -> bool {
        self.links.is_shutting_down()
    }

    pub(crate) fn stats(&self) -> FrontStats {
        FrontStats {
            in_flight: self.running.in_use(),
            requests: self.requests.load(Ordering::Relaxed),
            busy: self.busy.load(Ordering::Relaxed),
            open: self.links.len(),
            shutting_down: self.links.is_shutting_down(),
        }
    }
}
