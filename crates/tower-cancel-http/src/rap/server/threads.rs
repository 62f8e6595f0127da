//! A tool server's threads: each RAP thread is a scope, and its calls are keyed by their id inside it, so a call is
//! found by (thread_id, tool_call_id) and never by the tool call id alone.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard},
};

use tokio_util::sync::CancellationToken;
use tower_cancel::{Registry, Scope};

use crate::{
    front::{Admitted, Quota, Settings},
    scopes::{Lease, Scoped},
};

/// How many cancels a thread remembers for calls not yet arrived, and in how many bytes: a runtime cancels a
/// handful of calls of a thread at a time, and threads are many.
const EARLY_CANCELS_PER_THREAD: usize = 64;
const EARLY_CANCEL_BYTES_PER_THREAD: usize = 16 * 1024;

/// One thread: its scope (the registry its calls run in, with the early cancels remembered for it) and its calls
/// accepted and not yet over, each with a token that the runtime's cancel fires (it also stops a result on its
/// way: the handler's registry entry is gone by then).
#[derive(Debug)]
pub(super) struct Thread {
    scope: Scope,
    calls: Mutex<HashMap<Arc<str>, CancellationToken>>,
    // The thread's bound on calls in flight: one runtime's thread cannot take the whole server's room.
    in_flight: Quota,
}

impl Thread {
    /// The thread `id`; its scope attached to the replica when the server is one of several.
    pub(super) fn new(id: &str, settings: &Settings) -> Self {
        let scope = Scope::new().with_registry(Registry::with_early_cancel_limits(
            EARLY_CANCELS_PER_THREAD,
            EARLY_CANCEL_BYTES_PER_THREAD,
        ));
        let scope = settings.attach(|| format!("rap:thread:{id}"), None, scope);
        Self {
            scope,
            calls: Mutex::default(),
            in_flight: settings.scope_quota(),
        }
    }

    /// The thread's count of calls in flight, bounded by the server's `max_in_flight_per_thread`.
    pub(super) fn in_flight(&self) -> &Quota {
        &self.in_flight
    }
}

impl Scoped for Thread {
    fn scope(&self) -> &Scope {
        &self.scope
    }

    fn closed(&self) {
        // The thread was closed (or the server shuts down): its results on their way are stopped too.
        for token in self.calls().values() {
            token.cancel();
        }
    }
}

impl Thread {
    /// Take the call `id`, and give its token: `None` if a call of that id is already accepted in this thread (a
    /// runtime's retry of the same invocation), which then must not run twice.
    pub(super) fn accept(&self, id: &Arc<str>) -> Option<CancellationToken> {
        let mut calls = self.calls();
        if calls.contains_key(id) {
            return None;
        }
        let token = CancellationToken::new();
        calls.insert(id.clone(), token.clone());
        Some(token)
    }

    /// The runtime cancelled the call `id`: stop its result if it is on its way.
    pub(super) fn cancel(&self, id: &str) {
        if let Some(token) = self.calls().get(id) {
            token.cancel();
        }
    }

    /// The call `id` is over: its result was delivered, or it was cancelled and gets none.
    fn finish(&self, id: &str) {
        self.calls().remove(id);
    }

    /// Whether the call `id` is accepted and not yet over.
    pub(super) fn is_alive(&self, id: &str) -> bool {
        self.calls().contains_key(id)
    }

    fn calls(&self) -> MutexGuard<'_, HashMap<Arc<str>, CancellationToken>> {
        // Nothing panics while the lock is held: the map is always whole.
        self.calls
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A call's hold, from its acceptance to its end: keeps the thread in the table and the call counted as running
/// (its place in the server's bound and in its thread's),
/// and takes the call out of the thread when dropped (however the call's task ends, an abort included). The
/// fields drop in order: the call leaves the thread, then the lease goes, then the count.
pub(super) struct CallHold {
    thread: Lease<Arc<str>, Thread>,
    id: Arc<str>,
    _admitted: Admitted,
}

impl CallHold {
    pub(super) fn new(thread: Lease<Arc<str>, Thread>, id: Arc<str>, admitted: Admitted) -> Self {
        Self {
            thread,
            id,
            _admitted: admitted,
        }
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
