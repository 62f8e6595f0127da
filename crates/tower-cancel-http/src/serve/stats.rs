//! The public view of a listener's counters: [`ConnectionStats`], and the handle that reads them.

use std::{
    fmt,
    sync::{atomic::Ordering, Arc},
};

use super::table::Table;

/// A listener's connection counters, from [`Connections::stats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConnectionStats {
    /// Connections open now (an upgraded one, a WebSocket, until it closes), never more than the limit.
    pub open: usize,
    /// The most connections that were open at once.
    pub peak_open: usize,
    /// Connections accepted and served so far.
    pub accepted: u64,
    /// Closed because a request's head (or a first request) did not arrive in time.
    pub head_timeouts: u64,
    /// Closed because no request was in flight for the idle timeout.
    pub idle_closed: u64,
    /// Closed, with no request in flight, to make room for a new connection when the limit was reached.
    pub evicted: u64,
    /// New connections answered 503 because every open connection was busy.
    pub refused: u64,
}

/// A handle on a listener's connections, from [`Serve::connections`](super::Serve::connections): cheap to clone,
/// valid while and after the server runs.
#[derive(Clone)]
pub struct Connections {
    pub(super) table: Arc<Table>,
}

impl Connections {
    /// The counters now.
    pub fn stats(&self) -> ConnectionStats {
        let counters = &self.table.counters;
        let (open, peak_open) = self.table.open();
        ConnectionStats {
            open,
            peak_open,
            accepted: counters.accepted.load(Ordering::Relaxed),
            head_timeouts: counters.head_timeouts.load(Ordering::Relaxed),
            idle_closed: counters.idle_closed.load(Ordering::Relaxed),
            evicted: counters.evicted.load(Ordering::Relaxed),
            refused: counters.refused.load(Ordering::Relaxed),
        }
    }
}

impl fmt::Debug for Connections {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connections")
            .field("stats", &self.stats())
            .finish()
    }
}
