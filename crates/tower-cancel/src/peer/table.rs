//! The calls waiting for their reply, by id, and whether the connection has closed.
//!
//! The closed flag lives under the table's lock, with the calls: a call goes in only while the connection is
//! open, and [`Table::close`] empties the table in the same critical section that closes it. A call made on one
//! thread while another closes the connection therefore either goes in first (and the close drops its sender,
//! which wakes it with `Closed`) or is refused; it never goes in after the table was emptied, where neither a reply
//! nor a close would ever reach it.

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
};

use serde_json::Value;
use tokio::sync::oneshot;

// The lock is loom's in the model-checking build (`src/loom/`), so that loom interleaves a call's insert with a
// close. The oneshot inside is tokio's own, opaque to loom, as it is to the table.
use super::progress::ProgressSlot;
use crate::{
    loom::{Mutex, MutexGuard},
    message::{Id, Response},
};

/// The connection closed: the call was not put in the table.
#[derive(Debug)]
pub(super) struct Closed;

/// The pending table of one peer.
pub(super) struct Table {
    inner: Mutex<Inner>,
    // How many waiting calls the other side may end with its cancel (see `Dialect::ends_with_cancel`), changed
    // under the lock: read without it, so that a connection with none (nearly every one) lets each cancel it
    // receives through without taking the lock.
    endable: AtomicUsize,
}

/// What a waiting call is handed: the other side's reply, or the other side's cancel of it (for a call of a
/// method it may end that way: see `Dialect::ends_with_cancel`), with its reason.
#[derive(Debug)]
pub(super) enum Answer {
    Reply(Response),
    EndedByPeer(Option<String>),
}

#[derive(Default)]
struct Inner {
    calls: HashMap<Id, Pending>,
    closed: bool,
}

/// A call waiting for its reply.
pub(super) struct Pending {
    method: String,
    reply: oneshot::Sender<Answer>,
    progress: Option<Arc<ProgressSlot>>,
    // The other side may end it with its cancel.
    endable: bool,
}

impl Pending {
    pub(super) fn new(
        method: String,
        reply: oneshot::Sender<Answer>,
        progress: Option<Arc<ProgressSlot>>,
        endable: bool,
    ) -> Self {
        Self {
            method,
            reply,
            progress,
            endable,
        }
    }
}

impl Table {
    pub(super) fn new() -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
            endable: AtomicUsize::new(0),
        }
    }

    /// Put call `id` in the table, unless the connection has closed.
    pub(super) fn insert(&self, id: Id, pending: Pending) -> Result<(), Closed> {
        let mut inner = self.lock();
        if inner.closed {
            return Err(Closed);
        }
        if pending.endable {
            self.endable.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(replaced) = inner.calls.insert(id, pending) {
            self.forgot(&replaced);
        }
        Ok(())
    }

    /// Take call `id` out of the table: its caller stopped waiting.
    pub(super) fn remove(&self, id: &Id) {
        let removed = self.take(&mut self.lock(), id);
        // Its sender is dropped outside the lock.
        drop(removed);
    }

    /// Take call `id` out of `inner`, counted.
    fn take(&self, inner: &mut Inner, id: &Id) -> Option<Pending> {
        let pending = inner.calls.remove(id)?;
        self.forgot(&pending);
        Some(pending)
    }

    /// `pending` left the table (under its lock).
    fn forgot(&self, pending: &Pending) {
        if pending.endable {
            self.endable.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// The other side cancelled call `id`, one it may end that way (`is_endable` says so of its method): the
    /// call leaves the table and ends with `reason`. Returns `false` if no such call was waiting (the cancel is
    /// then not this table's: a cancel of a request the other side is serving for this side).
    pub(super) fn end_by_peer(&self, id: &Id, reason: Option<String>) -> bool {
        if self.endable.load(Ordering::Relaxed) == 0 {
            return false;
        }
        let pending = {
            let mut inner = self.lock();
            if !inner.calls.get(id).is_some_and(|pending| pending.endable) {
                return false;
            }
            self.take(&mut inner, id)
        };
        pending.is_some_and(|pending| pending.reply.send(Answer::EndedByPeer(reason)).is_ok())
    }

    /// Whether any waiting call may be ended by the other side's cancel (read without the lock).
    pub(super) fn has_endable(&self) -> bool {
        self.endable.load(Ordering::Relaxed) > 0
    }

    /// Hand `response` to the call waiting for it, which leaves the table. `observe` sees the call's method and
    /// result first, so that what the dialect learns from a reply (the peer's capabilities, from `initialize`) is
    /// known before the caller goes on. Returns `false` if no call was waiting for it any more.
    pub(super) fn dispatch(&self, response: Response, observe: impl FnOnce(&str, &Value)) -> bool {
        let pending = response
            .id
            .as_ref()
            .and_then(|id| self.take(&mut self.lock(), id));
        let Some(pending) = pending else {
            return false;
        };
        if let Ok(result) = &response.outcome {
            observe(&pending.method, result);
        }
        // Fails if the caller went away between the lookup and now: the reply is late after all.
        pending.reply.send(Answer::Reply(response)).is_ok()
    }

    /// Where the progress reports for call `id` go, if it is waiting and asked for them.
    pub(super) fn progress(&self, id: &Id) -> Option<Arc<ProgressSlot>> {
        self.lock()
            .calls
            .get(id)
            .and_then(|pending| pending.progress.clone())
    }

    /// The connection closed: empty the table and refuse every later call.
    pub(super) fn close(&self) {
        let calls = {
            let mut inner = self.lock();
            inner.closed = true;
            self.endable.store(0, Ordering::Relaxed);
            std::mem::take(&mut inner.calls)
        };
        // Dropping the senders wakes every waiting call with `Closed`; outside the lock, since waking runs the
        // callers' wakers.
        drop(calls);
    }

    /// How many calls are waiting.
    pub(super) fn len(&self) -> usize {
        self.lock().calls.len()
    }

    /// How many calls are waiting and whether the connection has closed, read together.
    #[cfg(all(test, loom))]
    pub(super) fn state(&self) -> (usize, bool) {
        let inner = self.lock();
        (inner.calls.len(), inner.closed)
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // The critical sections run no user code (senders are dropped after the lock is released): a poisoned lock
        // still holds a consistent table.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
