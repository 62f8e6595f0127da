//! A tool server's threads: each RAP thread is a scope, and its calls are keyed by their id inside it, so a call is
//! found by (thread_id, tool_call_id) and never by the tool call id alone.

use std::{
    collections::HashSet,
    sync::{Arc, Mutex, MutexGuard},
};

use tower_cancel::Scope;

use crate::scopes::{Lease, Scoped};

/// One thread: its scope (the registry its calls run in, with the early cancels remembered for it) and the ids of
/// its calls accepted and not yet answered.
#[derive(Debug, Default)]
pub(super) struct Thread {
    scope: Scope,
    calls: Mutex<HashSet<Arc<str>>>,
}

impl Scoped for Thread {
    fn scope(&self) -> &Scope {
        &self.scope
    }
}

impl Thread {
    /// Take the call `id`: false if a call of that id is already accepted in this thread (a runtime's retry of
    /// the same invocation), which then must not run twice.
    pub(super) fn accept(&self, id: &Arc<str>) -> bool {
        self.calls().insert(id.clone())
    }

    /// The call `id` is over: its result was delivered, or it was cancelled and gets none.
    pub(super) fn finish(&self, id: &str) {
        self.calls().remove(id);
    }

    /// Whether the call `id` is accepted and not yet over.
    pub(super) fn is_alive(&self, id: &str) -> bool {
        self.calls().contains(id)
    }

    fn calls(&self) -> MutexGuard<'_, HashSet<Arc<str>>> {
        // Nothing panics while the lock is held: the set is always whole.
        self.calls
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A running call's hold on its thread: keeps the thread in the table, and takes the call out of the thread's
/// set when dropped (however the call's task ends, an abort included).
pub(super) struct CallHold {
    thread: Lease<Arc<str>, Thread>,
    id: Arc<str>,
}

impl CallHold {
    pub(super) fn new(thread: Lease<Arc<str>, Thread>, id: Arc<str>) -> Self {
        Self { thread, id }
    }

    pub(super) fn thread(&self) -> &Thread {
        &self.thread
    }
}

impl Drop for CallHold {
    fn drop(&mut self) {
        self.thread.finish(&self.id);
    }
}
