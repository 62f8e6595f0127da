//! The calls of every exchange of one scope: the HTTP requests of one MCP session each have a peer of their own
//! (a handler's request to the client goes out on the stream of the POST that carries the handler's request), and
//! the client answers it on whichever POST comes next. So the exchanges of a scope number their calls together, and
//! a reply that arrives on one exchange is handed to the peer of the exchange that made the call.

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicI64, Ordering},
        Arc, Mutex, MutexGuard, Weak,
    },
};

use super::Shared;
use crate::message::Id;

/// The numbering and the whereabouts of the calls of one scope's exchanges.
#[derive(Default)]
pub(crate) struct Exchanges {
    next_id: AtomicI64,
    // Which exchange's peer made each call still waiting. Weak: an exchange's peer that is gone has no call
    // waiting, and its entries go with its calls (`left`, `closed`).
    waiting: Mutex<HashMap<Id, Weak<Shared>>>,
}

impl Exchanges {
    /// The next id of the scope's numbering.
    pub(super) fn next_id(&self) -> Id {
        Id::Number(self.next_id.fetch_add(1, Ordering::Relaxed))
    }

    /// Call `id` of `peer` is waiting.
    pub(super) fn waiting(&self, id: Id, peer: &Arc<Shared>) {
        self.lock().insert(id, Arc::downgrade(peer));
    }

    /// The peer whose call `id` is waiting, if one is.
    pub(super) fn caller(&self, id: &Id) -> Option<Arc<Shared>> {
        self.lock().get(id)?.upgrade()
    }

    /// Call `id` is no longer waiting.
    pub(super) fn left(&self, id: &Id) {
        self.lock().remove(id);
    }

    /// The exchange of `peer` closed: none of its calls is waiting any more.
    pub(super) fn closed(&self, peer: &Arc<Shared>) {
        let peer = Arc::downgrade(peer);
        self.lock().retain(|_, caller| !caller.ptr_eq(&peer));
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<Id, Weak<Shared>>> {
        // No user code runs under the lock: a poisoned one still holds a whole map.
        self.waiting
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl std::fmt::Debug for Exchanges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exchanges")
            .field("waiting", &self.lock().len())
            .finish()
    }
}
