//! A scope's table of in-flight requests, its memory of early cancels, its counters and its session state.
//!
//! # Scope
//!
//! A [`Registry`] belongs to one scope: a connection, an HTTP session, an authenticated principal. The transport
//! creates one per scope and puts it in each request's extensions; the cancel layer registers the request there,
//! so a cancel reaches only the requests of its own scope. Ids are compared exactly.
//!
//! # Invariants
//!
//! - An entry lives from registration until the request's future lets go of it, which happens on every path:
//!   completion, cancellation, a panicking handler, the response future being dropped.
//! - A cancel for an id that is not registered is remembered in a bounded window (oldest forgotten first), so a
//!   request that arrives after its own cancel starts out cancelled. The table and the window share one lock, so a
//!   cancel racing its request's registration is seen by exactly one of the two.
//! - A cancel that arrives after its request completed looks the same as an early one (the id is not in flight)
//!   and is remembered too. That is harmless as long as the peer does not reuse an id within the window, which
//!   LSP's and ACP's clients never do (their ids only grow) and MCP forbids.

use std::{
    collections::{hash_map::Entry, HashMap, VecDeque},
    fmt,
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc,
    },
};

// The tables' lock is loom's in the model-checking build (`src/loom/`); the counters and session flags are
// independent and read for reporting only, so they stay std's.
use crate::{
    context::CancelReason,
    lifecycle::Lifecycle,
    loom::{Mutex, MutexGuard},
    message::Id,
};

/// How many early cancels a registry remembers by default.
pub const DEFAULT_EARLY_CANCEL_CAPACITY: usize = 1024;

/// A scope's registry of in-flight requests. Cloning gives another handle to the same registry.
#[derive(Clone)]
pub struct Registry {
    inner: Arc<Inner>,
}

struct Inner {
    tables: Mutex<Tables>,
    early_capacity: usize,
    counters: Counters,
    session: SessionState,
}

#[derive(Default)]
struct Tables {
    in_flight: HashMap<Id, Arc<Lifecycle>>,
    early: HashMap<Id, CancelReason>,
    early_order: VecDeque<Id>,
    // Set when the scope stops taking work (a graceful shutdown): new requests start out cancelled with it.
    refusing: Option<CancelReason>,
}

#[derive(Default)]
struct Counters {
    registered: AtomicU64,
    completed: AtomicU64,
    cancelled: AtomicU64,
    early_cancels: AtomicU64,
}

/// What [`Registry::cancel`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CancelOutcome {
    /// The request was in flight and is now cancelled.
    Cancelled,
    /// The request was in flight but already settled (completed or cancelled by an earlier source).
    AlreadySettled,
    /// No such request in flight: the cancel is remembered in case the request arrives after it.
    Remembered,
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
    /// Requests in flight now.
    pub in_flight: usize,
    /// Early cancels remembered now.
    pub remembered: usize,
}

/// A request id that is already in flight in this scope.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DuplicateId(pub Id);

impl fmt::Display for DuplicateId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "request id {} is already in flight", self.0)
    }
}

impl std::error::Error for DuplicateId {}

/// Per-scope facts that dialects' lifecycle rules depend on.
#[derive(Debug, Default)]
pub struct SessionState {
    initialized: AtomicBool,
    peer_accepts_cancel: AtomicBool,
}

impl SessionState {
    /// Whether an `initialize` request of this scope has completed successfully.
    pub fn is_initialized(&self) -> bool {
        self.initialized.load(Ordering::Acquire)
    }

    /// Record that `initialize` completed.
    pub fn mark_initialized(&self) {
        self.initialized.store(true, Ordering::Release);
    }

    /// Whether the peer declared that it handles cancels of the requests it receives (ACP draft's
    /// `cancellation.request`).
    pub fn peer_accepts_cancel(&self) -> bool {
        self.peer_accepts_cancel.load(Ordering::Acquire)
    }

    /// Record what the peer declared.
    pub fn set_peer_accepts_cancel(&self, accepts: bool) {
        self.peer_accepts_cancel.store(accepts, Ordering::Release);
    }
}

impl Default for Registry {
    fn default() -> Self {
        Self::new()
    }
}

impl Registry {
    /// A new, empty registry remembering up to [`DEFAULT_EARLY_CANCEL_CAPACITY`] early cancels.
    pub fn new() -> Self {
        Self::with_early_cancel_capacity(DEFAULT_EARLY_CANCEL_CAPACITY)
    }

    /// A new registry remembering up to `capacity` early cancels (0 disables the memory).
    pub fn with_early_cancel_capacity(capacity: usize) -> Self {
        Self {
            inner: Arc::new(Inner {
                tables: Mutex::new(Tables::default()),
                early_capacity: capacity,
                counters: Counters::default(),
                session: SessionState::default(),
            }),
        }
    }

    /// The scope's session state.
    pub fn session(&self) -> &SessionState {
        &self.inner.session
    }

    /// Cancel the in-flight request `id`, or remember the cancel if it is not (yet) in flight.
    pub fn cancel(&self, id: &Id, reason: CancelReason) -> CancelOutcome {
        let mut tables = self.lock();
        if let Some(lifecycle) = tables.in_flight.get(id).cloned() {
            // Cancel outside the lock: firing the token wakes tasks, which may register or cancel in turn.
            drop(tables);
            return if lifecycle.cancel(reason) {
                CancelOutcome::Cancelled
            } else {
                CancelOutcome::AlreadySettled
            };
        }
        if self.inner.early_capacity > 0 && !tables.early.contains_key(id) {
            if tables.early_order.len() >= self.inner.early_capacity {
                if let Some(oldest) = tables.early_order.pop_front() {
                    tables.early.remove(&oldest);
                }
            }
            tables.early_order.push_back(id.clone());
            tables.early.insert(id.clone(), reason);
            self.inner
                .counters
                .early_cancels
                .fetch_add(1, Ordering::Relaxed);
        }
        CancelOutcome::Remembered
    }

    /// Cancel every request in flight in this scope (a closed connection, a shutdown). Returns how many were
    /// cancelled by this call.
    pub fn cancel_all(&self, reason: CancelReason) -> usize {
        let all: Vec<_> = self.lock().in_flight.values().cloned().collect();
        all.iter()
            .filter(|lifecycle| lifecycle.cancel(reason.clone()))
            .count()
    }

    /// Stop taking work: every request registered from now on starts out cancelled with `reason`, so it is
    /// answered as its dialect answers that reason and its handler never runs (a server draining for shutdown).
    pub fn refuse_new(&self, reason: CancelReason) {
        self.lock().refusing = Some(reason);
    }

    /// Whether `id` is in flight.
    pub fn contains(&self, id: &Id) -> bool {
        self.lock().in_flight.contains_key(id)
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
        let (in_flight, remembered) = {
            let tables = self.lock();
            (tables.in_flight.len(), tables.early.len())
        };
        let c = &self.inner.counters;
        Stats {
            registered: c.registered.load(Ordering::Relaxed),
            completed: c.completed.load(Ordering::Relaxed),
            cancelled: c.cancelled.load(Ordering::Relaxed),
            early_cancels: c.early_cancels.load(Ordering::Relaxed),
            in_flight,
            remembered,
        }
    }

    /// Register a request. If a cancel for its id arrived first, it starts out cancelled.
    pub(crate) fn register(&self, lifecycle: Arc<Lifecycle>) -> Result<Registration, DuplicateId> {
        let early_reason = {
            let mut tables = self.lock();
            // One hash of the id, for the check and the insert together.
            match tables.in_flight.entry(lifecycle.id().clone()) {
                Entry::Occupied(_) => return Err(DuplicateId(lifecycle.id().clone())),
                Entry::Vacant(entry) => entry.insert(lifecycle.clone()),
            };
            // The common case pays for no lookup: the window is empty unless the peer sent early cancels.
            let early_reason = if tables.early.is_empty() {
                None
            } else {
                let reason = tables.early.remove(lifecycle.id());
                if reason.is_some() {
                    tables.early_order.retain(|id| id != lifecycle.id());
                }
                reason
            };
            early_reason.or_else(|| tables.refusing.clone())
        };
        self.inner
            .counters
            .registered
            .fetch_add(1, Ordering::Relaxed);
        if let Some(reason) = early_reason {
            lifecycle.cancel(reason);
        }
        Ok(Registration {
            registry: self.clone(),
            lifecycle,
        })
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

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry")
            .field("stats", &self.stats())
            .finish()
    }
}

/// Keeps a request in its registry; dropping it removes the entry and counts the outcome.
pub(crate) struct Registration {
    registry: Registry,
    lifecycle: Arc<Lifecycle>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        // Dropped unsettled means nobody will ever read the handler's outcome (the response future was dropped,
        // or the handler panicked): settle it as cancelled so the token fires and sub-tasks stop too.
        if !self.lifecycle.is_completed() {
            self.lifecycle
                .cancel(CancelReason::local("response future dropped"));
        }
        let counters = &self.registry.inner.counters;
        if self.lifecycle.is_completed() {
            counters.completed.fetch_add(1, Ordering::Relaxed);
        } else {
            counters.cancelled.fetch_add(1, Ordering::Relaxed);
        }
        let mut tables = self.registry.lock();
        // One hash in the common case: take the entry out, and put it back only if it is another request's.
        let id = self.lifecycle.id();
        if let Some(entry) = tables.in_flight.remove(id) {
            if !Arc::ptr_eq(&entry, &self.lifecycle) {
                tables.in_flight.insert(id.clone(), entry);
            }
        }
    }
}

impl fmt::Debug for Registration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registration")
            .field("id", self.lifecycle.id())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: impl Into<Id>) -> Arc<Lifecycle> {
        Arc::new(Lifecycle::new(id.into()))
    }

    #[test]
    fn entries_are_removed_when_the_guard_drops() {
        let registry = Registry::new();
        let guard = registry.register(entry(1)).unwrap();
        assert!(registry.contains(&1.into()));
        assert_eq!(
            registry.register(entry(1)).unwrap_err(),
            DuplicateId(1.into())
        );
        drop(guard);
        assert!(registry.is_empty());
        assert_eq!(
            registry.stats().cancelled,
            1,
            "dropped unsettled counts as cancelled"
        );
    }

    #[test]
    fn number_and_string_ids_are_different_requests() {
        let registry = Registry::new();
        let one = entry(1);
        let _guard = registry.register(one.clone()).unwrap();
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
            registry.cancel(&Id::from(id), CancelReason::peer(None));
        }
        assert_eq!(registry.stats().remembered, 2);
        // 1 was forgotten (oldest), 3 is remembered.
        let first = entry(1);
        let _g1 = registry.register(first.clone()).unwrap();
        assert!(!first.is_cancelled());
        let third = entry(3);
        let _g3 = registry.register(third.clone()).unwrap();
        assert!(third.is_cancelled());
        assert_eq!(registry.stats().remembered, 1);
    }

    #[test]
    fn a_refusing_registry_starts_new_requests_cancelled() {
        let registry = Registry::new();
        let before = entry(1);
        let _g1 = registry.register(before.clone()).unwrap();
        registry.refuse_new(CancelReason::Shutdown);
        assert!(!before.is_cancelled(), "requests in flight run on");
        let after = entry(2);
        let _g2 = registry.register(after.clone()).unwrap();
        assert_eq!(after.reason(), Some(&CancelReason::Shutdown));
    }

    #[test]
    fn cancel_all_reaches_every_request() {
        let registry = Registry::new();
        let entries: Vec<_> = (0..5).map(entry).collect();
        let guards: Vec<_> = entries
            .iter()
            .map(|e| registry.register(e.clone()).unwrap())
            .collect();
        assert_eq!(registry.cancel_all(CancelReason::Disconnect), 5);
        assert!(entries
            .iter()
            .all(|e| e.reason() == Some(&CancelReason::Disconnect)));
        drop(guards);
        assert!(registry.is_empty());
    }
}
