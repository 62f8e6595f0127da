//! The connections a listener has open, under its limit: a newcomer is admitted while there is room, makes room
//! by evicting the connection idle the longest when there is none, and is turned away only when every
//! connection is busy.

use std::{
    collections::HashMap,
    pin::pin,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex, MutexGuard,
    },
    time::Duration,
};

use tokio::{sync::Notify, time::Instant};

use super::{counters::Counters, entry::Entry};

/// How long a newcomer waits for an evicted connection to close before another is chosen. Its task closes it
/// as soon as it runs, so this is only a bound for a runtime too busy to run it.
const EVICTION_WAIT: Duration = Duration::from_secs(1);

#[derive(Debug)]
pub(super) struct Table {
    max: AtomicUsize,
    epoch: Instant,
    open: Mutex<Open>,
    /// Woken when a connection leaves the table, or declines its eviction: what a newcomer waits on.
    changed: Notify,
    pub(super) counters: Counters,
}

#[derive(Debug, Default)]
struct Open {
    entries: HashMap<u64, Arc<Entry>>,
    next_id: u64,
    peak: usize,
}

/// What the table says to a newcomer right now.
enum Admission {
    Admitted(Slot),
    /// Full, and this connection was chosen to make room.
    Evict(Arc<Entry>),
    /// Full, and every connection busy.
    Full,
}

impl Table {
    pub(super) fn new() -> Self {
        Self {
            max: AtomicUsize::new(usize::MAX),
            epoch: Instant::now(),
            open: Mutex::default(),
            changed: Notify::new(),
            counters: Counters::default(),
        }
    }

    pub(super) fn set_max(&self, max: usize) {
        self.max.store(max.max(1), Ordering::Relaxed);
    }

    /// Connections open now, and the most there were at once.
    pub(super) fn open(&self) -> (usize, usize) {
        let open = self.lock();
        (open.entries.len(), open.peak)
    }

    /// A slot for a new connection, once there is room (evicting idle connections to make it), or `None` if every
    /// connection is busy.
    pub(super) async fn admit(self: &Arc<Self>) -> Option<Slot> {
        loop {
            // Listening before asking, so that a victim closing in between is not missed.
            let mut changed = pin!(self.changed.notified());
            changed.as_mut().enable();
            match self.try_admit() {
                Admission::Admitted(slot) => return Some(slot),
                Admission::Full => return None,
                Admission::Evict(victim) => {
                    victim.evict.notify_one();
                    // Each round marks one more connection as taken, so this loop ends.
                    let _ = tokio::time::timeout(EVICTION_WAIT, changed).await;
                }
            }
        }
    }

    /// Tell newcomers to look again (an evicted connection kept for a request that came in as it was chosen).
    pub(super) fn changed(&self) {
        self.changed.notify_waiters();
    }

    fn try_admit(self: &Arc<Self>) -> Admission {
        let mut open = self.lock();
        if open.entries.len() < self.max.load(Ordering::Relaxed) {
            let id = open.next_id;
            open.next_id += 1;
            let entry = Arc::new(Entry::new(self.epoch));
            open.entries.insert(id, Arc::clone(&entry));
            open.peak = open.peak.max(open.entries.len());
            return Admission::Admitted(Slot {
                table: Arc::clone(self),
                id,
                entry,
            });
        }
        loop {
            // The longest idle of the connections with no request in flight (one still waiting for its first
            // request's head counts as idle since it opened).
            let victim = open
                .entries
                .values()
                .filter_map(|entry| entry.evictable_since().map(|since| (since, entry)))
                .min_by_key(|(since, _)| *since)
                .map(|(_, entry)| Arc::clone(entry));
            match victim {
                Some(victim) if victim.take_for_eviction() => return Admission::Evict(victim),
                // It was upgraded just now: look again (a connection is upgraded once, so this ends).
                Some(_) => continue,
                None => return Admission::Full,
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, Open> {
        // The table's state is consistent between statements: a panic elsewhere does not spoil it.
        self.open
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A connection's place in the table, held by its socket: freed when the socket closes, which for an upgraded
/// connection is when its WebSocket ends.
#[derive(Debug)]
pub(super) struct Slot {
    table: Arc<Table>,
    id: u64,
    entry: Arc<Entry>,
}

impl Slot {
    pub(super) fn entry(&self) -> &Arc<Entry> {
        &self.entry
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.table.lock().entries.remove(&self.id);
        self.table.changed();
    }
}
