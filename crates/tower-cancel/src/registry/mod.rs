//! A scope's table of in-flight requests, its memory of early cancels and its counters.
//!
//! # Scope
//!
//! A [`Registry`] belongs to one [`Scope`](crate::scope::Scope): a connection, an HTTP session, an authenticated
//! principal. Requests are registered through the [`Connection`](crate::scope::Connection) they arrived on, so a
//! cancel reaches only requests of its own scope. Ids are compared exactly.
//!
//! Several connections may share a scope. Each entry then remembers its connection: ids are duplicates only
//! within one connection, a peer's cancel reaches the request of that id on its own connection, closing or
//! shutting down a connection touches only that connection's requests, and [`Registry::cancel`] (a cancel for
//! the whole scope, such as an HTTP principal's or another replica's) reaches every request of that id.
//!
//! # Invariants
//!
//! - An entry lives from registration until the request's future lets go of it, which happens on every path:
//!   completion, cancellation, a panicking handler, the response future being dropped.
//! - A cancel for an id that is not registered is remembered in a window bounded in entries and in bytes (oldest
//!   forgotten first), so a request that arrives after its own cancel starts out cancelled. The table and the
//!   window share one lock, so a cancel racing its request's registration is seen by exactly one of the two.
//! - A cancel that arrives after its request completed looks the same as an early one (the id is not in flight)
//!   and is remembered too. That is harmless as long as the peer does not reuse an id within the window, which
//!   LSP's and ACP's clients never do (their ids only grow) and MCP forbids.
//! - A registry made [`without_early_cancels`](Registry::without_early_cancels) (the scope of a dialect that
//!   does not [remember them](crate::Dialect::remembers_early_cancels), ABP's) keeps none: a cancel for an id not
//!   in flight does nothing, and a request of that id arriving after it runs.
//!
//! # Acknowledged cancels
//!
//! A dialect that answers a cancel (ABP's `cancel-result`) needs to know what the cancel did, decided by the same
//! compare-and-swap that settles the race with completion: [`Registry::acknowledge`] gives a [`CancelAck`]. For
//! that, the registry of such a dialect's scope also remembers how its last requests ended
//! ([`Registry::remember_finished`]), bounded in entries and in bytes like the early-cancel memory; a request
//! forgotten there is answered as an unknown one.

mod early;
mod error;
mod finished;
mod groups;
mod hasher;
mod in_flight;
mod sweep;
mod turn;

use std::{
    fmt,
    sync::{
        atomic::{AtomicU64, AtomicUsize, Ordering},
        Arc, OnceLock,
    },
};

// The tables' lock is loom's in the model-checking build (`src/loom/`); the counters are independent and read
// for reporting only, so they stay std's.
pub use crate::outcome::{CancelAck, CancelOutcome};
use crate::{
    lifecycle::{Lifecycle, SharedLifecycle},
    loom::{Mutex, MutexGuard},
    message::Id,
    metrics,
    reason::CancelReason,
};
use early::{EarlyCancels, Remembered};
pub use error::DuplicateId;
use finished::{Ended, FinishedRequests};
use groups::Groups;
use in_flight::InFlight;
use sweep::Sweep;
use turn::{YieldOnce, CLOSE_BATCH};

/// How many early cancels a registry remembers by default.
pub const DEFAULT_EARLY_CANCEL_CAPACITY: usize = 1024;

/// How many bytes the early cancels of a registry may hold by default (ids, reasons and bookkeeping).
pub const DEFAULT_EARLY_CANCEL_BYTES: usize = 256 * 1024;

/// How many finished requests a registry that remembers them ([`Registry::remember_finished`]) keeps by default.
pub const DEFAULT_FINISHED_CAPACITY: usize = 4096;

/// How many bytes the memory of finished requests may hold by default (ids and bookkeeping).
pub const DEFAULT_FINISHED_BYTES: usize = 1024 * 1024;

/// The connection tag of a cancel for the whole scope.
pub(crate) const WHOLE_SCOPE: u64 = 0;

/// A scope's registry of in-flight requests. Cloning gives another handle to the same registry.
#[derive(Clone)]
pub struct Registry {
    inner: Arc<Inner>,
}

struct Inner {
    tables: Mutex<Tables>,
    counters: Counters,
}

struct Tables {
    in_flight: InFlight,
    early: EarlyCancels,
    // How the last requests ended: only for dialects that acknowledge cancels.
    finished: Option<FinishedRequests>,
    // Set when the whole scope stops taking work: new requests start out cancelled with it.
    refusing: Option<CancelReason>,
    // The group index, made on the first grouped request: a scope that never groups pays nothing for it.
    groups: Option<Groups>,
    // Counted under the lock every request takes anyway to enter and leave the table: atomics beside it would
    // cost each request two more read-modify-writes.
    ends: Ends,
}

/// How many requests that can be cancelled were registered, and how they ended.
#[derive(Default)]
struct Ends {
    registered: u64,
    completed: u64,
    cancelled: u64,
}

/// The counters of what arrives without taking a request through the table (early cancels).
#[derive(Default)]
struct Counters {
    early_cancels: AtomicU64,
    early_dropped: AtomicU64,
}

/// A snapshot of a registry's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Requests registered so far.
    pub registered: u64,
    /// Registered requests whose handler's outcome was the reply.
    pub completed: u64,
    /// Registered requests that ended cancelled (from any source, the response future dropped included).
    pub cancelled: u64,
    /// Cancels that arrived for an id not in flight and were remembered.
    pub early_cancels: u64,
    /// Remembered early cancels forgotten to make room, or never kept because they alone passed the byte budget.
    pub early_dropped: u64,
    /// Requests in flight now.
    pub in_flight: usize,
    /// Early cancels remembered now.
    pub remembered: usize,
    /// Bytes the remembered early cancels hold now (within [`DEFAULT_EARLY_CANCEL_BYTES`] by default).
    pub remembered_bytes: usize,
    /// Finished requests remembered now (only with [`Registry::remember_finished`]).
    pub finished: usize,
    /// Groups with a request in flight now (see [`Registry::cancel_group`]).
    pub groups: usize,
    /// Bytes the remembered finished requests hold now.
    pub finished_bytes: usize,
}

impl Default for Registry {
    fn default() -> Self {
        Self::new()
    }
}

impl Registry {
    /// A new, empty registry remembering up to [`DEFAULT_EARLY_CANCEL_CAPACITY`] early cancels in at most
    /// [`DEFAULT_EARLY_CANCEL_BYTES`].
    pub fn new() -> Self {
        Self::with_early_cancel_limits(DEFAULT_EARLY_CANCEL_CAPACITY, DEFAULT_EARLY_CANCEL_BYTES)
    }

    /// A new registry remembering up to `capacity` early cancels (0 keeps none: see
    /// [`without_early_cancels`](Self::without_early_cancels)), in at most [`DEFAULT_EARLY_CANCEL_BYTES`].
    pub fn with_early_cancel_capacity(capacity: usize) -> Self {
        Self::with_early_cancel_limits(capacity, DEFAULT_EARLY_CANCEL_BYTES)
    }

    /// A new registry that keeps no early cancels: a cancel for an id not in flight does nothing
    /// ([`CancelOutcome::NotFound`], [`CancelAck::NotFound`]), is not counted in [`Stats::early_cancels`] nor
    /// [`Stats::early_dropped`], and a request of that id arriving after it runs. For a scope whose cancels cannot
    /// overtake their requests (one WebSocket delivers in order): a [`Scope`](crate::scope::Scope) made with a
    /// dialect that does not [remember early cancels](crate::Dialect::remembers_early_cancels) has one.
    pub fn without_early_cancels() -> Self {
        Self::with_early_cancel_limits(0, 0)
    }

    /// A new registry remembering up to `capacity` early cancels holding at most `bytes` between them (see
    /// the module docs for what an entry costs).
    pub fn with_early_cancel_limits(capacity: usize, bytes: usize) -> Self {
        Self {
            inner: Arc::new(Inner {
                tables: Mutex::new(Tables {
                    in_flight: InFlight::new(),
                    early: EarlyCancels::new(capacity, bytes),
                    finished: None,
                    refusing: None,
                    groups: None,
                    ends: Ends::default(),
                }),
                counters: Counters::default(),
            }),
        }
    }

    /// Remember how the last `capacity` requests ended, in at most `bytes`, so that [`acknowledge`](Self::acknowledge)
    /// can tell a cancel of a finished request from one of an unknown id. For the scope of a dialect that
    /// acknowledges cancels; a [`Scope`](crate::scope::Scope) made with such a dialect turns it on with the
    /// defaults ([`DEFAULT_FINISHED_CAPACITY`], [`DEFAULT_FINISHED_BYTES`]).
    pub fn remember_finished(self, capacity: usize, bytes: usize) -> Self {
        self.lock().finished = Some(FinishedRequests::new(capacity, bytes));
        self
    }

    /// Whether this registry remembers finished requests.
    pub fn remembers_finished(&self) -> bool {
        self.lock().finished.is_some()
    }

    /// Whether this registry remembers early cancels (see [`without_early_cancels`](Self::without_early_cancels)).
    pub fn remembers_early_cancels(&self) -> bool {
        !self.lock().early.is_off()
    }

    /// Cancel every request `id` in flight in the scope and say what the cancel did (see [`CancelAck`]); an id not
    /// in flight is remembered as an early cancel, unless the registry keeps none. A peer's cancel on a connection reaches its own requests only:
    /// see [`Connection::acknowledge_cancel`](crate::scope::Connection::acknowledge_cancel).
    pub fn acknowledge(&self, id: &Id, reason: CancelReason) -> CancelAck {
        self.acknowledge_in(WHOLE_SCOPE, id, reason)
    }

    /// Cancel the request `id` of connection `conn` (every connection's, for the whole scope) and say what the
    /// cancel did. Like [`cancel`](Self::cancel), an id not in flight is remembered as an early cancel, unless
    /// the registry keeps none ([`without_early_cancels`](Self::without_early_cancels)).
    ///
    /// The answer is the lifecycle's: when the cancel loses the race to the handler's outcome, the answer is
    /// [`CancelAck::AlreadyCompleted`] and that outcome is the reply; when it wins, [`CancelAck::Cancelled`] and
    /// the reply says cancelled. Whoever sends the acknowledgment and the reply decides their order.
    pub(crate) fn acknowledge_in(&self, conn: u64, id: &Id, reason: CancelReason) -> CancelAck {
        let mut tables = self.lock();
        let target = tables.in_flight.matching(conn, id).next().cloned();
        let Some(lifecycle) = target else {
            let ended = tables
                .finished
                .as_ref()
                .and_then(|finished| finished.get(conn, id));
            if let Some(ended) = ended {
                return match ended {
                    Ended::Completed => CancelAck::AlreadyCompleted,
                    Ended::Cancelled => CancelAck::AlreadyCancelled,
                };
            }
            // Not found either way: remembered or not, the request is not here.
            let remembered = tables.early.remember(conn, id, reason);
            drop(tables);
            self.count_remembered(&remembered);
            return CancelAck::NotFound;
        };
        // Cancel outside the lock, as `cancel_in` does.
        drop(tables);
        if !lifecycle.is_cancellable() {
            return CancelAck::NotCancellable;
        }
        if lifecycle.cancel(reason) {
            return CancelAck::Cancelled;
        }
        loop {
            if lifecycle.is_cancelled() {
                return CancelAck::AlreadyCancelled;
            }
            if lifecycle.is_completed() {
                return CancelAck::AlreadyCompleted;
            }
            // Another source's cancel wrote its reason and is a few instructions from its swap (which it may
            // still lose to the completion): the answer is whichever settles it.
            crate::loom::yield_now();
        }
    }

    /// Cancel every in-flight request `id` of the scope, whichever connection it came from, or remember the
    /// cancel for the scope if none is in flight (the next request `id` of any connection starts out cancelled),
    /// unless the registry keeps no early cancels ([`CancelOutcome::NotFound`]).
    ///
    /// A peer's cancel message reaches only its own connection's request: see
    /// [`Connection::cancel`](crate::scope::Connection::cancel).
    pub fn cancel(&self, id: &Id, reason: CancelReason) -> CancelOutcome {
        self.cancel_in(WHOLE_SCOPE, id, reason)
    }

    /// Cancel the request `id` of connection `conn` (every connection's, for [`WHOLE_SCOPE`]).
    pub(crate) fn cancel_in(&self, conn: u64, id: &Id, reason: CancelReason) -> CancelOutcome {
        let mut tables = self.lock();
        let targets: Vec<_> = tables.in_flight.matching(conn, id).cloned().collect();
        if targets.is_empty() {
            let remembered = tables.early.remember(conn, id, reason);
            drop(tables);
            self.count_remembered(&remembered);
            if remembered == Remembered::Off {
                return CancelOutcome::NotFound;
            }
            return CancelOutcome::Remembered;
        }
        // Cancel outside the lock: firing the token wakes tasks, which may register or cancel in turn.
        drop(tables);
        let mut outcome = CancelOutcome::AlreadySettled;
        for lifecycle in targets {
            if lifecycle.cancel(reason.clone()) {
                outcome = CancelOutcome::Cancelled;
            }
        }
        outcome
    }

    fn count_remembered(&self, remembered: &Remembered) {
        let counters = &self.inner.counters;
        match remembered {
            Remembered::Kept { dropped } => {
                counters.early_cancels.fetch_add(1, Ordering::Relaxed);
                counters
                    .early_dropped
                    .fetch_add(*dropped, Ordering::Relaxed);
                metrics::early_cancel_remembered();
                metrics::early_cancels_dropped(*dropped);
            }
            Remembered::TooLarge => {
                counters.early_dropped.fetch_add(1, Ordering::Relaxed);
                metrics::early_cancels_dropped(1);
            }
            // Nothing was to be kept: a registry without the memory has no early cancels to count.
            Remembered::Again | Remembered::Off => {}
        }
    }

    /// Cancel every request in flight in this scope, of every connection. Returns how many were cancelled by this
    /// call.
    pub fn cancel_all(&self, reason: CancelReason) -> usize {
        self.cancel_where(reason, |_| true)
    }

    /// Cancel every request in flight of connection `conn`.
    pub(crate) fn cancel_connection(&self, conn: u64, reason: CancelReason) -> usize {
        self.cancel_where(reason, |lifecycle| lifecycle.conn() == conn)
    }

    /// As [`cancel_connection`](Self::cancel_connection), in turns: the table is walked a chunk at a time, each
    /// under the lock and let go of before the next ([`Sweep`]), and the requests found are cancelled
    /// [`CLOSE_BATCH`] at a time, with a turn given to the executor's other tasks between batches. A connection
    /// closing with a million requests in flight takes about a second to cancel them, and tens of milliseconds
    /// only to find them: in one piece, either would hold one worker, and every task queued behind it, for that
    /// long, and the pass would hold the scope's table from its other connections too.
    ///
    /// The connection refuses new requests before this begins, so a request of it registered meanwhile starts out
    /// cancelled, whether or not the pass reaches it.
    pub(crate) async fn cancel_connection_in_turns(
        &self,
        conn: u64,
        reason: CancelReason,
    ) -> usize {
        let mut sweep = Sweep::default();
        let mut batch = Vec::with_capacity(CLOSE_BATCH);
        let mut cancelled = 0;
        loop {
            let over = sweep.next_chunk(
                &self.lock().in_flight,
                |lifecycle| lifecycle.conn() == conn,
                CLOSE_BATCH,
                &mut batch,
            );
            // Cancel outside the lock: a request settled by it takes the lock again to leave. Each batch's
            // handles are let go of here too, not all at the end (a million atomic decrements in one piece).
            cancelled += batch
                .drain(..)
                .filter(|lifecycle| lifecycle.cancel(reason.clone()))
                .count();
            if over {
                return cancelled;
            }
            YieldOnce::default().await;
        }
    }

    fn cancel_where(&self, reason: CancelReason, which: impl Fn(&Lifecycle) -> bool) -> usize {
        self.targets(which)
            .iter()
            .filter(|lifecycle| lifecycle.cancel(reason.clone()))
            .count()
    }

    /// The requests in flight that `which` picks, taken out from under the lock: cancelling one wakes its task and
    /// may settle it, which takes the lock again to remove it.
    fn targets(&self, which: impl Fn(&Lifecycle) -> bool) -> Vec<SharedLifecycle> {
        self.lock()
            .in_flight
            .iter()
            .filter(|lifecycle| which(lifecycle))
            .cloned()
            .collect()
    }

    /// Stop taking work in the whole scope: every request registered from now on, on any connection, starts out
    /// cancelled with `reason`, so it is answered as its dialect answers that reason and its handler never runs.
    /// To stop one connection only, use [`Connection::refuse_new`](crate::scope::Connection::refuse_new).
    pub fn refuse_new(&self, reason: CancelReason) {
        self.lock().refusing = Some(reason);
    }

    /// Whether a request `id` is in flight, on any connection.
    pub fn contains(&self, id: &Id) -> bool {
        self.lock().in_flight.contains(id)
    }

    /// Whether a request `id` of connection `conn` (of any, for [`WHOLE_SCOPE`]) is in flight.
    pub(crate) fn contains_in(&self, conn: u64, id: &Id) -> bool {
        self.lock().in_flight.matching(conn, id).next().is_some()
    }

    /// How many requests are in flight.
    pub fn len(&self) -> usize {
        self.lock().in_flight.len()
    }

    /// Whether no request is in flight.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The counters, and the table sizes now.
    pub fn stats(&self) -> Stats {
        let (in_flight, remembered, remembered_bytes, finished, finished_bytes, ends, groups) = {
            let tables = self.lock();
            let groups = tables.groups.as_ref().map_or(0, Groups::len);
            let (finished, finished_bytes) = tables
                .finished
                .as_ref()
                .map_or((0, 0), |finished| (finished.len(), finished.bytes()));
            (
                tables.in_flight.len(),
                tables.early.len(),
                tables.early.bytes(),
                finished,
                finished_bytes,
                (
                    tables.ends.registered,
                    tables.ends.completed,
                    tables.ends.cancelled,
                ),
                groups,
            )
        };
        let c = &self.inner.counters;
        let (registered, completed, cancelled) = ends;
        Stats {
            registered,
            completed,
            cancelled,
            early_cancels: c.early_cancels.load(Ordering::Relaxed),
            early_dropped: c.early_dropped.load(Ordering::Relaxed),
            in_flight,
            remembered,
            remembered_bytes,
            finished,
            finished_bytes,
            groups,
        }
    }

    /// Put a request in the table. If a cancel for its id arrived first (on its connection or for the whole
    /// scope), or the scope or its connection (`refusing`) stopped taking work, it starts out cancelled.
    /// A request its dialect never lets be cancelled is in the table too (its id is in flight), but not counted.
    ///
    /// `refusing` is read under the tables' lock: a close on another thread sets it before it takes the lock to
    /// cancel what the table holds, so a request either is in the table by then (and cancelled) or sees it here.
    #[cfg(test)]
    pub(crate) fn insert(
        &self,
        lifecycle: &SharedLifecycle,
        refusing: &OnceLock<CancelReason>,
    ) -> Result<(), DuplicateId> {
        self.insert_grouped(lifecycle, refusing, None, None)
    }

    /// As [`insert`](Self::insert), and put the request in group `group` of its connection (under the same
    /// lock, so a group cancel sees it in the table and in its group, or in neither). A cancellable request also
    /// counts in `count` (its connection's requests in flight) until [`remove`](Self::remove)
    /// is given the same count.
    pub(crate) fn insert_grouped(
        &self,
        lifecycle: &SharedLifecycle,
        refusing: &OnceLock<CancelReason>,
        group: Option<Id>,
        count: Option<&AtomicUsize>,
    ) -> Result<(), DuplicateId> {
        let early_reason = {
            let mut tables = self.lock();
            let id = lifecycle.id();
            tables.in_flight.insert(lifecycle)?;
            if let Some(key) = group {
                tables.join_group(lifecycle, key, true);
            }
            if lifecycle.is_cancellable() {
                tables.ends.registered += 1;
                if let Some(count) = count {
                    count_in(count, 1);
                }
            }
            if let Some(finished) = &mut tables.finished {
                finished.forget(id);
            }
            // The common case pays for no lookup: the window is empty unless the peer sent early cancels.
            let early_reason = if tables.early.is_empty() {
                None
            } else {
                tables.early.take(lifecycle.conn(), id.clone())
            };
            early_reason
                .or_else(|| refusing.get().cloned())
                .or_else(|| tables.refusing.clone())
        };
        if let Some(reason) = early_reason.filter(|_| lifecycle.is_cancellable()) {
            lifecycle.cancel(reason);
        }
        Ok(())
    }

    /// Put `lifecycle`, a request already registered, in group `key` of its connection too (a request may be in
    /// several): a later [`cancel_group`](Self::cancel_group) of that key cancels it. Does nothing if the request
    /// already left the registry.
    // Used by the LSP progress binding (a handler's `window/workDoneProgress/create`).
    pub(crate) fn bind_group(&self, lifecycle: &SharedLifecycle, key: Id) {
        let mut tables = self.lock();
        let registered = tables
            .in_flight
            .matching(lifecycle.conn(), lifecycle.id())
            .any(|entry| SharedLifecycle::ptr_eq(entry, lifecycle));
        if registered {
            tables.join_group(lifecycle, key, false);
        }
    }

    /// Cancel every request in flight in group `key`, of every connection of the scope, with `reason`. Returns
    /// how many this call cancelled. Nothing is remembered: a group with nothing in flight stays as it is, and a
    /// request grouped under `key` later runs. Not published to other replicas (a group is a connection's).
    ///
    /// A peer's group cancel reaches its own connection's group only: see
    /// [`Connection::cancel_group`](crate::scope::Connection::cancel_group).
    pub fn cancel_group(&self, key: &Id, reason: CancelReason) -> usize {
        self.cancel_group_in(WHOLE_SCOPE, key, reason)
    }

    /// Cancel the requests in group `key` of connection `conn` (of every connection, for [`WHOLE_SCOPE`]).
    pub(crate) fn cancel_group_in(&self, conn: u64, key: &Id, reason: CancelReason) -> usize {
        let members = match &self.lock().groups {
            Some(groups) => groups.members(conn, key),
            None => return 0,
        };
        // Cancel outside the lock, as `cancel_in` does: a settled request takes it again to leave.
        members
            .iter()
            .filter(|lifecycle| lifecycle.cancel(reason.clone()))
            .count()
    }

    /// Take a request out of the table and count its outcome.
    #[cfg(test)]
    pub(crate) fn remove(&self, lifecycle: &SharedLifecycle) {
        self.remove_counted(lifecycle, None);
    }

    /// As [`remove`](Self::remove), for a request that counts in `count` (given to its
    /// [`insert_grouped`](Self::insert_grouped)).
    pub(crate) fn remove_counted(&self, lifecycle: &SharedLifecycle, count: Option<&AtomicUsize>) {
        let mut tables = self.lock();
        let removed = tables.in_flight.remove(lifecycle);
        if lifecycle.is_grouped() {
            if let Some(groups) = &mut tables.groups {
                groups.leave(lifecycle);
            }
            lifecycle.set_grouped(false);
        }
        if !lifecycle.is_cancellable() {
            return;
        }
        if let Some(count) = count {
            count_in(count, -1);
        }
        let ended = if lifecycle.is_completed() {
            tables.ends.completed += 1;
            Ended::Completed
        } else {
            tables.ends.cancelled += 1;
            Ended::Cancelled
        };
        if let Some(finished) = tables.finished.as_mut().filter(|_| removed) {
            finished.remember(lifecycle.conn(), lifecycle.id(), ended);
        }
    }

    fn lock(&self) -> MutexGuard<'_, Tables> {
        // A panic while the lock is held cannot leave the tables half-updated (each critical section is a few
        // map operations that do not run user code), so a poisoned lock is safe to keep using.
        self.inner
            .tables
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Move a connection's count of requests in flight by `by`. Only ever written under the registry's lock (a
/// request's insert and remove), so a load and a store do what a read-modify-write would, without its cost on
/// every request's way in and out; readers without the lock see the last count written.
fn count_in(count: &AtomicUsize, by: isize) {
    let now = count.load(Ordering::Relaxed);
    count.store(now.wrapping_add_signed(by), Ordering::Release);
}

impl Tables {
    fn join_group(&mut self, lifecycle: &SharedLifecycle, key: Id, at_admission: bool) {
        self.groups
            .get_or_insert_with(Groups::new)
            .join(lifecycle, key, at_admission);
        lifecycle.set_grouped(true);
    }
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry")
            .field("stats", &self.stats())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: impl Into<Id>, conn: u64) -> SharedLifecycle {
        SharedLifecycle::new(Lifecycle::new(id.into(), conn))
    }

    fn insert(registry: &Registry, lifecycle: &SharedLifecycle) {
        registry.insert(lifecycle, &OnceLock::new()).unwrap();
    }

    #[test]
    fn entries_are_removed_and_counted() {
        let registry = Registry::new();
        let one = entry(1, 1);
        insert(&registry, &one);
        assert!(registry.contains(&1.into()));
        assert_eq!(
            registry.insert(&entry(1, 1), &OnceLock::new()).unwrap_err(),
            DuplicateId(1.into())
        );
        one.cancel(CancelReason::Timeout);
        registry.remove(&one);
        assert!(registry.is_empty());
        assert_eq!(registry.stats().cancelled, 1);
    }

    #[test]
    fn number_and_string_ids_are_different_requests() {
        let registry = Registry::new();
        let one = entry(1, 1);
        insert(&registry, &one);
        assert_eq!(
            registry.cancel(&"1".into(), CancelReason::peer(None)),
            CancelOutcome::Remembered
        );
        assert!(!one.is_cancelled());
        assert_eq!(
            registry.cancel(&1.into(), CancelReason::peer(None)),
            CancelOutcome::Cancelled
        );
        assert!(one.is_cancelled());
    }

    #[test]
    fn early_cancels_are_remembered_and_bounded() {
        let registry = Registry::with_early_cancel_capacity(2);
        for id in 1..=3 {
            registry.cancel_in(1, &Id::from(id), CancelReason::peer(None));
        }
        let stats = registry.stats();
        assert_eq!(
            (stats.remembered, stats.early_cancels, stats.early_dropped),
            (2, 3, 1)
        );
        // 1 was forgotten (oldest), 3 is remembered.
        let first = entry(1, 1);
        insert(&registry, &first);
        assert!(!first.is_cancelled());
        let third = entry(3, 1);
        insert(&registry, &third);
        assert!(third.is_cancelled());
        assert_eq!(registry.stats().remembered, 1);
    }

    #[test]
    fn a_refusing_registry_starts_new_requests_cancelled() {
        let registry = Registry::new();
        let before = entry(1, 1);
        insert(&registry, &before);
        registry.refuse_new(CancelReason::Shutdown);
        assert!(!before.is_cancelled(), "requests in flight run on");
        let after = entry(2, 2);
        insert(&registry, &after);
        assert_eq!(after.reason(), Some(&CancelReason::Shutdown));
    }

    #[test]
    fn cancel_all_reaches_every_request() {
        let registry = Registry::new();
        let entries: Vec<_> = (0..5).map(|id| entry(id, 1 + id as u64 % 2)).collect();
        entries.iter().for_each(|e| insert(&registry, e));
        assert_eq!(registry.cancel_all(CancelReason::Disconnect), 5);
        assert!(entries
            .iter()
            .all(|e| e.reason() == Some(&CancelReason::Disconnect)));
        entries.iter().for_each(|e| registry.remove(e));
        assert!(registry.is_empty());
    }

    #[test]
    fn connections_sharing_a_registry_keep_their_own_ids_and_requests() {
        let registry = Registry::new();
        let (a, b) = (entry(1, 1), entry(1, 2));
        insert(&registry, &a);
        insert(&registry, &b);
        assert_eq!(registry.len(), 2, "the same id on two connections");
        assert_eq!(
            registry.cancel_in(2, &1.into(), CancelReason::peer(None)),
            CancelOutcome::Cancelled
        );
        assert!(
            b.is_cancelled() && !a.is_cancelled(),
            "a cancel reaches its own connection's request"
        );
        assert_eq!(registry.cancel_connection(1, CancelReason::Disconnect), 1);
        assert!(a.is_cancelled());
        registry.remove(&b);
        assert!(registry.contains(&1.into()));
        registry.remove(&a);
        assert!(registry.is_empty());

        let (c, d) = (entry(7, 1), entry(7, 2));
        insert(&registry, &c);
        insert(&registry, &d);
        assert_eq!(
            registry.cancel(&7.into(), CancelReason::Shutdown),
            CancelOutcome::Cancelled
        );
        assert!(
            c.is_cancelled() && d.is_cancelled(),
            "a scope-wide cancel reaches both"
        );
    }

    #[test]
    fn an_acknowledged_cancel_says_what_it_did_before_during_and_after() {
        let registry = Registry::new().remember_finished(8, 64 * 1024);
        assert!(registry.remembers_finished());
        // Unknown: remembered as an early cancel, and the request then starts cancelled.
        assert_eq!(
            registry.acknowledge_in(1, &Id::from("early"), CancelReason::peer(None)),
            CancelAck::NotFound
        );
        let early = entry("early", 1);
        insert(&registry, &early);
        assert!(early.is_cancelled());
        registry.remove(&early);

        let running = entry("run", 1);
        insert(&registry, &running);
        assert_eq!(
            registry.acknowledge_in(1, &Id::from("run"), CancelReason::peer(None)),
            CancelAck::Cancelled
        );
        assert_eq!(
            registry.acknowledge_in(1, &Id::from("run"), CancelReason::peer(None)),
            CancelAck::AlreadyCancelled,
            "in flight, cancelled"
        );
        registry.remove(&running);
        for _ in 0..3 {
            assert_eq!(
                registry.acknowledge_in(1, &Id::from("run"), CancelReason::peer(None)),
                CancelAck::AlreadyCancelled,
                "finished, cancelled: the same answer every time"
            );
        }

        let done = entry("done", 1);
        insert(&registry, &done);
        assert!(done.complete());
        assert_eq!(
            registry.acknowledge_in(1, &Id::from("done"), CancelReason::peer(None)),
            CancelAck::AlreadyCompleted,
            "completed, its entry not yet removed"
        );
        registry.remove(&done);
        assert_eq!(
            registry.acknowledge_in(1, &Id::from("done"), CancelReason::peer(None)),
            CancelAck::AlreadyCompleted
        );
        assert_eq!(
            registry.acknowledge_in(2, &Id::from("done"), CancelReason::peer(None)),
            CancelAck::NotFound,
            "another connection's request"
        );
        let stats = registry.stats();
        assert_eq!(
            (stats.finished, stats.in_flight),
            (3, 0),
            "early, run, done"
        );

        // A new request with a finished id is a new request.
        let again = entry("done", 1);
        insert(&registry, &again);
        assert_eq!(registry.stats().finished, 2);
        assert_eq!(
            registry.acknowledge_in(1, &Id::from("done"), CancelReason::peer(None)),
            CancelAck::Cancelled
        );
        registry.remove(&again);
    }

    #[test]
    fn without_early_cancels_a_cancel_of_an_unknown_id_has_no_later_effect() {
        let registry = Registry::without_early_cancels().remember_finished(8, 64 * 1024);
        assert!(!registry.remembers_early_cancels());
        assert!(Registry::new().remembers_early_cancels());
        assert_eq!(
            registry.acknowledge_in(1, &Id::from("x"), CancelReason::peer(None)),
            CancelAck::NotFound
        );
        assert_eq!(
            registry.cancel_in(1, &Id::from("y"), CancelReason::peer(None)),
            CancelOutcome::NotFound
        );
        let stats = registry.stats();
        assert_eq!(
            (stats.remembered, stats.early_cancels, stats.early_dropped),
            (0, 0, 0),
            "nothing kept, nothing counted as kept or dropped"
        );
        // The requests come after their cancels: each runs.
        for id in ["x", "y"] {
            let later = entry(id, 1);
            insert(&registry, &later);
            assert!(!later.is_cancelled(), "{id} starts out running");
            assert!(later.complete());
            registry.remove(&later);
        }
        // A cancel of a request received still reaches it.
        let queued = entry("q", 1);
        insert(&registry, &queued);
        assert_eq!(
            registry.acknowledge_in(1, &Id::from("q"), CancelReason::peer(None)),
            CancelAck::Cancelled
        );
        registry.remove(&queued);
    }

    #[test]
    fn a_forgotten_finished_request_is_answered_as_unknown() {
        let registry = Registry::new().remember_finished(2, 64 * 1024);
        for id in 0..3 {
            let e = entry(id, 1);
            insert(&registry, &e);
            assert!(e.complete());
            registry.remove(&e);
        }
        assert_eq!(registry.stats().finished, 2);
        assert_eq!(
            registry.acknowledge_in(1, &Id::from(0), CancelReason::peer(None)),
            CancelAck::NotFound
        );
        assert_eq!(
            registry.acknowledge_in(1, &Id::from(2), CancelReason::peer(None)),
            CancelAck::AlreadyCompleted
        );
        let plain = Registry::new();
        assert_eq!(plain.stats().finished, 0);
        let e = entry(5, 1);
        insert(&plain, &e);
        assert!(e.complete());
        plain.remove(&e);
        assert_eq!(
            plain.acknowledge_in(1, &Id::from(5), CancelReason::peer(None)),
            CancelAck::NotFound,
            "without the memory, a finished request is unknown"
        );
    }

    #[test]
    fn requests_that_cannot_be_cancelled_hold_their_id_but_are_not_counted() {
        let registry = Registry::new();
        let init = SharedLifecycle::new(Lifecycle::uncancellable(0.into(), 1));
        insert(&registry, &init);
        assert_eq!(
            registry.insert(&entry(0, 1), &OnceLock::new()).unwrap_err(),
            DuplicateId(0.into())
        );
        assert_eq!(
            registry.cancel_in(1, &0.into(), CancelReason::peer(None)),
            CancelOutcome::AlreadySettled
        );
        assert!(init.complete());
        registry.remove(&init);
        let stats = registry.stats();
        assert_eq!(
            (stats.registered, stats.completed, stats.in_flight),
            (0, 0, 0)
        );
    }

    fn insert_in(registry: &Registry, lifecycle: &SharedLifecycle, group: &str) {
        registry
            .insert_grouped(lifecycle, &OnceLock::new(), Some(Id::from(group)), None)
            .unwrap();
    }

    #[test]
    fn a_group_cancel_reaches_its_connections_group_only_and_is_not_remembered() {
        let registry = Registry::new();
        let (prompt, sleep, other_session, other_conn, ungrouped) = (
            entry(1, 1),
            entry(2, 1),
            entry(3, 1),
            entry(1, 2),
            entry(4, 1),
        );
        insert_in(&registry, &prompt, "a");
        insert_in(&registry, &sleep, "a");
        insert_in(&registry, &other_session, "b");
        insert_in(&registry, &other_conn, "a");
        insert(&registry, &ungrouped);
        assert_eq!(registry.stats().groups, 3);

        let group = CancelReason::Group { key: "a".into() };
        assert_eq!(registry.cancel_group_in(1, &"a".into(), group.clone()), 2);
        assert!(prompt.reason() == Some(&group) && sleep.reason() == Some(&group));
        assert!(
            !other_session.is_cancelled()
                && !other_conn.is_cancelled()
                && !ungrouped.is_cancelled()
        );
        assert_eq!(
            registry.cancel_group_in(1, &"a".into(), group.clone()),
            0,
            "settled already"
        );
        assert_eq!(
            registry.cancel_group_in(1, &"none".into(), group.clone()),
            0
        );
        assert_eq!(
            registry.stats().remembered,
            0,
            "a group cancel is never remembered"
        );

        for done in [&prompt, &sleep, &ungrouped, &other_session] {
            registry.remove(done);
        }
        assert_eq!(registry.stats().groups, 1, "emptied groups leave the index");
        assert_eq!(
            registry.cancel_group(&"a".into(), group),
            1,
            "the whole scope's: every connection's group"
        );
        registry.remove(&other_conn);
        let stats = registry.stats();
        assert_eq!((stats.in_flight, stats.groups), (0, 0));

        // A request grouped after the cancel runs.
        let later = entry(5, 1);
        insert_in(&registry, &later, "a");
        assert!(!later.is_cancelled());
        registry.remove(&later);
        assert_eq!(registry.stats().groups, 0);
    }

    #[test]
    fn a_request_bound_to_groups_leaves_them_all_and_a_gone_one_is_not_bound() {
        let registry = Registry::new();
        let request = entry(1, 1);
        insert(&registry, &request);
        registry.bind_group(&request, Id::from("token-1"));
        registry.bind_group(&request, Id::from("token-2"));
        assert_eq!(registry.stats().groups, 2);
        assert_eq!(
            registry.cancel_group_in(1, &"token-2".into(), CancelReason::peer(None)),
            1
        );
        assert_eq!(request.reason(), Some(&CancelReason::peer(None)));
        registry.remove(&request);
        assert_eq!(registry.stats().groups, 0);
        registry.bind_group(&request, Id::from("token-3"));
        assert_eq!(
            registry.stats().groups,
            0,
            "a request out of the registry joins nothing"
        );
        assert_eq!(
            Registry::new().cancel_group(&"x".into(), CancelReason::peer(None)),
            0
        );
    }
}
