//! A replica's end of the bus: its scopes by key, what it publishes, and what it applies.

use std::{
    collections::HashMap,
    fmt,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex, MutexGuard, Weak,
    },
};

use super::{
    pending::{Pending, PENDING_BYTES, PENDING_CAPACITY, PENDING_PER_SCOPE},
    CancelBus, RemoteCancel,
};
use crate::{
    message::Id,
    outcome::CancelOutcome,
    reason::CancelReason,
    registry::Registry,
    scope::{Publish, Scope},
};

/// One replica on a [`CancelBus`]: it attaches scopes under keys shared by every replica
/// ([`scope`](Self::scope)), publishes their cancels that miss locally, and applies the other replicas' cancels
/// to its own scopes ([`apply`](Self::apply)). Cloning gives another handle to the same replica.
#[derive(Clone)]
pub struct Replica {
    inner: Arc<Inner>,
}

/// A replica that does not keep it alive (for a bus that knows its replicas: they hold the bus).
#[derive(Clone)]
pub(super) struct WeakReplica(Weak<Inner>);

impl WeakReplica {
    pub(super) fn upgrade(&self) -> Option<Replica> {
        self.0.upgrade().map(|inner| Replica { inner })
    }

    pub(super) fn is_gone(&self) -> bool {
        self.0.strong_count() == 0
    }
}

struct Inner {
    id: String,
    bus: Arc<dyn CancelBus>,
    // The scopes attached now, by key. Weak: a scope's entry goes when its last handle does.
    scopes: Mutex<HashMap<String, Weak<Attachment>>>,
    pending: Mutex<Pending>,
    counters: Counters,
}

#[derive(Default)]
struct Counters {
    published: AtomicU64,
    received: AtomicU64,
    applied: AtomicU64,
    own: AtomicU64,
    pending_dropped: AtomicU64,
}

/// What a scope attached to a replica holds: its key, and the way back to the replica's bus.
struct Attachment {
    key: String,
    owner: Option<String>,
    registry: Registry,
    replica: Weak<Inner>,
}

/// What [`Replica::apply`] did with a remote cancel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Applied {
    /// It came from this replica (a bus may deliver a replica's own messages back to it): ignored.
    Own,
    /// The scope of its key is here: the cancel did what a local one does.
    Scope(CancelOutcome),
    /// No scope of its key here: kept until one is made ([`Replica::scope`]).
    Pending,
    /// No scope of its key here and not kept (larger than the whole window).
    Dropped,
}

/// A replica's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReplicaStats {
    /// Cancels of this replica's scopes that missed locally and were handed to the bus.
    pub published: u64,
    /// Cancels that came from the bus (this replica's own included).
    pub received: u64,
    /// Cancels from other replicas applied to a scope here, at once or when the scope was made.
    pub applied: u64,
    /// This replica's own cancels that came back from the bus, ignored.
    pub own: u64,
    /// Cancels for scopes not here, kept now.
    pub pending: usize,
    /// Cancels for scopes not here that the window forgot (or never kept) to stay within its bounds.
    pub pending_dropped: u64,
    /// Scopes attached now.
    pub scopes: usize,
}

impl Replica {
    /// Replica `id` (unique among the replicas: its own messages are recognized by it) on `bus`.
    pub fn new(id: impl Into<String>, bus: Arc<dyn CancelBus>) -> Self {
        Self {
            inner: Arc::new(Inner {
                id: id.into(),
                bus,
                scopes: Mutex::new(HashMap::new()),
                pending: Mutex::new(Pending::new(
                    PENDING_CAPACITY,
                    PENDING_BYTES,
                    PENDING_PER_SCOPE,
                )),
                counters: Counters::default(),
            }),
        }
    }

    pub(super) fn downgrade(&self) -> WeakReplica {
        WeakReplica(Arc::downgrade(&self.inner))
    }

    /// This replica's id.
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// `scope`, attached under `key`: its cancels that miss locally are published, and the other replicas'
    /// cancels for `key` reach it. Cancels for `key` that came before it are applied now. Give every replica's
    /// scope of one session (principal, thread) the same key, and scopes that must stay apart different keys.
    pub fn scope(&self, key: impl Into<String>, scope: Scope) -> Scope {
        self.scope_owned(key, None, scope)
    }

    /// The same, naming who owns the scope (an authenticated principal): its cancels carry it as the canceller.
    pub fn scope_owned(
        &self,
        key: impl Into<String>,
        owner: Option<String>,
        mut scope: Scope,
    ) -> Scope {
        let key = key.into();
        let attachment = Arc::new(Attachment {
            key: key.clone(),
            owner,
            registry: scope.registry().clone(),
            replica: Arc::downgrade(&self.inner),
        });
        lock(&self.inner.scopes).insert(key.clone(), Arc::downgrade(&attachment));
        scope.attach(attachment);
        let early = lock(&self.inner.pending).take(&key);
        for cancel in early {
            self.apply_to(scope.registry(), cancel);
        }
        scope
    }

    /// `scope`, publishing under `key` only: its cancels that miss are handed to the other replicas, but it is not
    /// this replica's scope of `key`, so it neither receives their cancels nor takes those kept for `key`. For a
    /// cancel that lands on a replica which does not hold its scope and never will (an MCP session another replica
    /// minted): run it through the stack on an exchange of this scope, and it reaches the replica that does.
    pub fn forwarding(&self, key: impl Into<String>, mut scope: Scope) -> Scope {
        scope.attach(Arc::new(Attachment {
            key: key.into(),
            owner: None,
            registry: scope.registry().clone(),
            replica: Arc::downgrade(&self.inner),
        }));
        scope
    }

    /// A cancel from the bus: applied to this replica's scope of its key as a local cancel would be (its reason
    /// kept; never published again), kept for that scope if it is not here yet, ignored if it is this replica's own.
    pub fn apply(&self, cancel: RemoteCancel) -> Applied {
        let counters = &self.inner.counters;
        counters.received.fetch_add(1, Ordering::Relaxed);
        if cancel.origin == self.inner.id {
            counters.own.fetch_add(1, Ordering::Relaxed);
            return Applied::Own;
        }
        let attached = lock(&self.inner.scopes)
            .get(&cancel.scope)
            .and_then(Weak::upgrade);
        if let Some(attachment) = attached {
            return Applied::Scope(self.apply_to(&attachment.registry, cancel));
        }
        tracing::debug!(scope = %cancel.scope, id = %cancel.id, origin = %cancel.origin, "remote cancel for a scope not here: kept");
        match lock(&self.inner.pending).keep(cancel) {
            Some(dropped) => {
                counters
                    .pending_dropped
                    .fetch_add(dropped, Ordering::Relaxed);
                Applied::Pending
            }
            None => {
                counters.pending_dropped.fetch_add(1, Ordering::Relaxed);
                Applied::Dropped
            }
        }
    }

    fn apply_to(&self, registry: &Registry, cancel: RemoteCancel) -> CancelOutcome {
        self.inner.counters.applied.fetch_add(1, Ordering::Relaxed);
        let outcome = registry.cancel(&cancel.id, cancel.reason);
        tracing::debug!(scope = %cancel.scope, id = %cancel.id, origin = %cancel.origin, canceller = ?cancel.canceller, ?outcome, "remote cancel applied");
        outcome
    }

    /// The replica's counters now.
    pub fn stats(&self) -> ReplicaStats {
        let counters = &self.inner.counters;
        ReplicaStats {
            published: counters.published.load(Ordering::Relaxed),
            received: counters.received.load(Ordering::Relaxed),
            applied: counters.applied.load(Ordering::Relaxed),
            own: counters.own.load(Ordering::Relaxed),
            pending: lock(&self.inner.pending).len(),
            pending_dropped: counters.pending_dropped.load(Ordering::Relaxed),
            scopes: lock(&self.inner.scopes).len(),
        }
    }
}

impl Publish for Attachment {
    /// A cancel of this scope missed locally: hand it to the other replicas.
    fn publish(&self, id: &Id, reason: &CancelReason) {
        let Some(replica) = self.replica.upgrade() else {
            return;
        };
        replica.counters.published.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(scope = %self.key, %id, "cancel missed locally: published");
        let cancel = RemoteCancel::new(&*self.key, id.clone(), reason.clone(), &*replica.id)
            .canceller(self.owner.clone());
        replica.bus.publish(cancel);
    }
}

impl Drop for Attachment {
    fn drop(&mut self) {
        let Some(replica) = self.replica.upgrade() else {
            return;
        };
        let mut scopes = lock(&replica.scopes);
        // Only if the key still names this scope: a newer one may have been attached under it since.
        if scopes
            .get(&self.key)
            .is_some_and(|entry| std::ptr::eq(entry.as_ptr(), self))
        {
            scopes.remove(&self.key);
        }
    }
}

impl fmt::Debug for Attachment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Attachment")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for Replica {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Replica")
            .field("id", &self.inner.id)
            .field("stats", &self.stats())
            .finish()
    }
}

// A panic while one of these locks is held leaves the data consistent (each update is one map operation).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
