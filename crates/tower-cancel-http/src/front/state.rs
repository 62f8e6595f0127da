//! What a front end's clones share at run time: its requests running, its connections open, its counters, and
//! whether it is shutting down.

use std::sync::{
    atomic::{AtomicU64, Ordering},
    Arc,
};

use tokio_util::sync::CancellationToken;

use super::{links::Links, running::Running, FrontStats};

#[derive(Debug, Default)]
pub(crate) struct State {
    pub(crate) running: Running,
    pub(crate) links: Arc<Links>,
    requests: AtomicU64,
    // Cancelled once the shutdown has closed every open link: what long-lived links (a WebSocket) watch.
    pub(crate) shutdown: CancellationToken,
}

impl State {
    pub(crate) fn count_request(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn is_shutting_down(&self) -> bool {
        self.links.is_shutting_down()
    }

    pub(crate) fn stats(&self) -> FrontStats {
        FrontStats {
            in_flight: self.running.get(),
            requests: self.requests.load(Ordering::Relaxed),
            open: self.links.len(),
            shutting_down: self.links.is_shutting_down(),
        }
    }
}
