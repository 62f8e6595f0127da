//! What the adapter's service, its handlers' futures and the bridge to async-lsp's main loop share: the
//! handlers that may make nested requests, and the marks that tell the bridge which handler made each one.
//!
//! # Why marks
//!
//! A handler makes a request to the client with async-lsp's `ClientSocket::request`, which only async-lsp's
//! `MainLoop` can serve: the socket puts the request on the main loop's channel, the main loop gives it an id of
//! its own and writes it out, here into the bridge ([`crate::bridge`]), which sends it to the client through the
//! connection's [`Peer`]. Nothing in the request says which handler made it. So while a handler's future is
//! polled (the only time it can put a request on that channel), the adapter holds one lock and puts a mark of the
//! handler on the same channel before the poll and a blank mark after it: the channel keeps its order, so the
//! bridge reads, in the main loop's output, each request after the mark of the handler that made it.
//!
//! The lock makes one connection's handlers take turns being polled, which is what async-lsp's own main loop
//! does (it polls every handler on its one task); they still run concurrently.

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
        Arc, Mutex, MutexGuard, PoisonError,
    },
};

use async_lsp::{lsp_types::notification::Notification, ClientSocket};
use tokio_util::sync::CancellationToken;
use tower_cancel::{Peer, Request};

/// The mark put on the main loop's channel before and after a handler's poll. Never sent to the client.
pub(crate) enum Mark {}

impl Notification for Mark {
    /// The key of the handler being polled, or 0 after the poll.
    type Params = u64;
    const METHOD: &'static str = "$/tower-cancel-async-lsp/mark";
}

/// A handler that may make nested requests: where they go, and its end.
struct Handler {
    /// The connection's peer as a child of the handler's request: cancelled with the request, from any source.
    peer: Peer,
    /// Cancelled when the handler's future is dropped (it finished, or was stopped): a nested request it still
    /// has waiting is one nobody waits for any more. Made with the handler's first nested request: most handlers
    /// make none.
    done: Option<CancellationToken>,
}

pub(crate) struct Hub {
    client: ClientSocket,
    /// The service asked to stop (`ControlFlow::Break(Ok(()))`).
    pub(crate) exit: CancellationToken,
    /// Whether the bridge runs: without it nothing reads the marks, so none are sent.
    running: AtomicBool,
    polling: Mutex<()>,
    handlers: Mutex<HashMap<u64, Handler>>,
    next_key: AtomicU64,
    /// Nested requests sent to the client and not answered yet (the bridge's, and so async-lsp's main loop's,
    /// table of outgoing requests).
    pub(crate) waiting: AtomicUsize,
}

/// Locks `mutex`, taking its data as it is if a panic poisoned it (the data of each lock here is consistent
/// after every step).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Hub {
    pub(crate) fn new(client: ClientSocket, exit: CancellationToken) -> Self {
        Self {
            client,
            exit,
            running: AtomicBool::new(false),
            polling: Mutex::new(()),
            handlers: Mutex::new(HashMap::new()),
            next_key: AtomicU64::new(1),
            waiting: AtomicUsize::new(0),
        }
    }

    pub(crate) fn client(&self) -> &ClientSocket {
        &self.client
    }

    pub(crate) fn set_running(&self, running: bool) {
        self.running.store(running, Ordering::SeqCst);
    }

    /// Registers the handler of `req`, if it came over a connection with a peer (its nested requests can only go
    /// there). Dropping the returned entry ends it.
    pub(crate) fn open(self: &Arc<Self>, req: &Request) -> Option<Entry> {
        let peer = req.peer().or_else(|| req.connection()?.peer().cloned())?;
        let key = self.next_key.fetch_add(1, Ordering::Relaxed);
        let handler = Handler { peer, done: None };
        lock(&self.handlers).insert(key, handler);
        Some(Entry {
            hub: self.clone(),
            key,
        })
    }

    /// Where a nested request of the handler of `key` goes, and the token of the handler's end; `None` if its
    /// future is gone already.
    pub(crate) fn handler(&self, key: u64) -> Option<(Peer, CancellationToken)> {
        let mut handlers = lock(&self.handlers);
        let handler = handlers.get_mut(&key)?;
        let done = handler
            .done
            .get_or_insert_with(CancellationToken::new)
            .clone();
        Some((handler.peer.clone(), done))
    }

    pub(crate) fn handlers(&self) -> usize {
        lock(&self.handlers).len()
    }

    /// Runs `poll` (a poll of the handler of `key`) between its marks, under the lock.
    pub(crate) fn poll_marked<T>(&self, key: u64, poll: impl FnOnce() -> T) -> T {
        if !self.running.load(Ordering::SeqCst) {
            return poll();
        }
        let _turn = lock(&self.polling);
        self.mark(key);
        // The blank mark goes out even if the poll panics: a request made later by other code is then not taken
        // for this handler's.
        let _blank = Blank(self);
        poll()
    }

    fn mark(&self, key: u64) {
        // Fails only when the main loop is gone; then no request of the handler goes out either.
        let _ = self.client.notify::<Mark>(key);
    }
}

struct Blank<'a>(&'a Hub);

impl Drop for Blank<'_> {
    fn drop(&mut self) {
        self.0.mark(0);
    }
}

/// A handler's place in the hub, for as long as its future lives.
pub(crate) struct Entry {
    hub: Arc<Hub>,
    key: u64,
}

impl Entry {
    pub(crate) fn hub(&self) -> &Hub {
        &self.hub
    }

    pub(crate) fn key(&self) -> u64 {
        self.key
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        let handler = lock(&self.hub.handlers).remove(&self.key);
        if let Some(done) = handler.and_then(|handler| handler.done) {
            done.cancel();
        }
    }
}
