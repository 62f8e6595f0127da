//! The bus of replicas in one process: for tests, and for a process that runs several servers.

use std::{
    fmt,
    sync::{Arc, Mutex, MutexGuard},
};

use super::{replica::WeakReplica, CancelBus, RemoteCancel, Replica};

/// Replicas in one process, each cancel handed to the others at once, on the publisher's thread.
/// Cloning gives another handle to the same bus.
#[derive(Clone, Default)]
pub struct LocalBus {
    // Weak: each replica holds this bus, so a strong handle here would keep every replica alive for good.
    replicas: Arc<Mutex<Vec<WeakReplica>>>,
}

impl LocalBus {
    /// A bus with no replica yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// A new replica `id` on this bus.
    pub fn replica(&self, id: impl Into<String>) -> Replica {
        let replica = Replica::new(id, Arc::new(self.clone()));
        let mut replicas = self.lock();
        replicas.retain(|r| !r.is_gone());
        replicas.push(replica.downgrade());
        replica
    }

    fn lock(&self) -> MutexGuard<'_, Vec<WeakReplica>> {
        self.replicas
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl CancelBus for LocalBus {
    fn publish(&self, cancel: RemoteCancel) {
        let replicas: Vec<_> = self
            .lock()
            .iter()
            .filter_map(WeakReplica::upgrade)
            .collect();
        for replica in replicas {
            replica.apply(cancel.clone());
        }
    }
}

impl fmt::Debug for LocalBus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalBus")
            .field("replicas", &self.lock().len())
            .finish()
    }
}
