//! The connections a front end has open (an HTTP request's exchange, a WebSocket session's connection), so that a
//! shutdown reaches every one of them, and so that one opened once the shutdown has begun refuses its requests.
//!
//! Opening and shutting down take the same lock: a connection is either in the table when the shutdown takes its
//! snapshot (and is closed with it), or it is opened after and refuses from the start. No request slips between.

use std::{
    collections::HashMap,
    future::Future,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex, MutexGuard,
    },
};

use tokio::sync::Notify;
use tower_cancel::{CancelReason, Connection};

#[derive(Debug, Default)]
pub(crate) struct Links {
    table: Mutex<Table>,
    // Set under the lock; read without it by the front ends' own checks (a new session, an invocation).
    shutting_down: AtomicBool,
    // Told when the last link goes, for a drain waiting on it.
    empty: Notify,
}

#[derive(Debug, Default)]
struct Table {
    next: u64,
    open: HashMap<u64, Connection>,
}

impl Links {
    /// Put `connection` in the table; its key takes it out. Once the shutdown has begun, the connection refuses
    /// every request it gets (they start out cancelled with reason `Shutdown`).
    pub(crate) fn open(&self, connection: &Connection) -> u64 {
        let mut table = self.lock();
        if self.shutting_down.load(Ordering::Acquire) {
            connection.refuse_new(CancelReason::Shutdown);
        }
        let key = table.next;
        table.next += 1;
        table.open.insert(key, connection.clone());
        key
    }

    /// Take the connection of `key` out of the table.
    pub(crate) fn close(&self, key: u64) {
        let mut table = self.lock();
        table.open.remove(&key);
        if table.open.is_empty() {
            self.empty.notify_waiters();
        }
    }

    /// Begin the shutdown: from now on every connection opened refuses its requests. Gives the connections open
    /// now, to close; `None` if the shutdown had begun already.
    pub(crate) fn shut_down(&self) -> Option<Vec<Connection>> {
        let table = self.lock();
        if self.shutting_down.swap(true, Ordering::AcqRel) {
            return None;
        }
        Some(table.open.values().cloned().collect())
    }

    pub(crate) fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::Acquire)
    }

    /// How many connections are open.
    pub(crate) fn len(&self) -> usize {
        self.lock().open.len()
    }

    /// Resolves once no connection is open (at once if none is now).
    pub(crate) fn empty(self: &Arc<Self>) -> impl Future<Output = ()> + Send + 'static {
        let links = self.clone();
        async move {
            loop {
                // Made before the check: a link closed between the two still wakes it.
                let told = links.empty.notified();
                if links.len() == 0 {
                    return;
                }
                told.await;
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        // Nothing panics while the lock is held: the table is always whole.
        self.table
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
