use std::{
    fmt,
    sync::{
        atomic::{AtomicU64, AtomicUsize, Ordering},
        Arc, OnceLock,
    },
};

use super::Scope;
use crate::{
    lifecycle::{self, Lifecycle, SharedLifecycle},
    message::Id,
    outbox::Outbox,
    outcome::{CancelAck, CancelOutcome},
    peer::Peer,
    reason::CancelReason,
    registry::{DuplicateId, Registry, WHOLE_SCOPE},
    session::SessionState,
};

/// One link of a [`Scope`]: a stream connection, an HTTP request's stream, a WebSocket. Requests arrive through
/// it ([`receive`](Self::receive)), replies and this side's own requests leave through its [`Outbox`], and
/// closing it cancels what it has in flight. Cloning gives another handle to the same connection.
///
/// See [the module docs](super) for what connections sharing a scope see of each other.
#[derive(Clone)]
pub struct Connection {
    inner: Arc<Inner>,
}

struct Inner {
    // Tags this connection's requests in the scope's registry; never `WHOLE_SCOPE`.
    key: u64,
    // What the peer's cancel messages reach: `key` (this connection's requests), or `WHOLE_SCOPE` for an
    // exchange, whose ids are the scope's (an HTTP session's POSTs).
    cancels: u64,
    scope: Scope,
    outbox: Outbox,
    session: Arc<SessionState>,
    peer: Option<Peer>,
    // Set once: by a shutdown (Shutdown) or the close (its reason). Requests registered later start out cancelled.
    refusing: OnceLock<CancelReason>,
    // This connection's requests in the registry now that can be cancelled: written by the registry under its
    // lock, as it inserts and removes them (see `Registry::insert_grouped`).
    in_flight: AtomicUsize,
}

/// What a connection's peer cancels reach.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Cancels {
    /// The connection's own requests: a stream connection, whose ids are its own.
    Own,
    /// Every request of the scope: one exchange of a session whose ids are the session's.
    Scope,
}

/// Connection keys are unique in the process, so connections of one scope never share one.
static NEXT_KEY: AtomicU64 = AtomicU64::new(WHOLE_SCOPE + 1);

impl Connection {
    pub(crate) fn new(scope: Scope, outbox: Outbox, cancels: Cancels) -> Self {
        let key = NEXT_KEY.fetch_add(1, Ordering::Relaxed);
        let cancels = match cancels {
            Cancels::Own => key,
            Cancels::Scope => WHOLE_SCOPE,
        };
        let session = Arc::new(SessionState::default());
        // An exchange's calls are numbered with the scope's other exchanges, and answered on any of them.
        let exchanges = scope
            .exchanges()
            .filter(|_| cancels == WHOLE_SCOPE)
            .cloned();
        let peer = scope.dialect().map(|dialect| {
            Peer::with_session(dialect.clone(), outbox.clone(), session.clone(), exchanges)
        });
        Self {
            inner: Arc::new(Inner {
                key,
                cancels,
                scope,
                outbox,
                session,
                peer,
                refusing: OnceLock::new(),
                in_flight: AtomicUsize::new(0),
            }),
        }
    }

    // `receive` and `prepare`, what makes requests of the messages a connection reads, are with the request
    // envelope (`request.rs`): a connection is what a request carries, so it stands below it.

    /// A peer's cancel message: cancel this connection's request `id`, or remember the cancel for it (unless the
    /// scope keeps no early cancels: [`CancelOutcome::NotFound`]). On an
    /// [exchange](Scope::connect_exchange) the cancel reaches the request `id` of the whole scope instead.
    ///
    /// On an exchange of a scope attached to a replica ([`Replica::scope`](crate::bus::Replica::scope)), a cancel
    /// that finds nothing in flight here is also published to the other replicas.
    pub fn cancel(&self, id: &Id, reason: CancelReason) -> CancelOutcome {
        self.inner.scope.cancel_in(self.inner.cancels, id, reason)
    }

    /// A peer's group cancel (ACP's `session/cancel`): cancel the requests in flight in group `key` of this
    /// connection (of the whole scope, on an [exchange](Scope::connect_exchange)) with `reason`. Returns how many
    /// this call cancelled. Nothing is remembered for a group with nothing in flight.
    pub fn cancel_group(&self, key: &Id, reason: CancelReason) -> usize {
        self.inner
            .scope
            .registry()
            .cancel_group_in(self.inner.cancels, key, reason)
    }

    /// A peer's cancel message that its dialect answers (ABP's `capabilities/cancel`): cancel this connection's
    /// request `id` (the scope's, on an [exchange](Scope::connect_exchange)) and say what the cancel did, as the request's
    /// lifecycle decided it, atomically with the race against its completion (see [`CancelAck`]). An id not in
    /// flight is remembered as an early cancel, as with [`cancel`](Self::cancel), unless the scope keeps none (a
    /// scope of a dialect whose cancels cannot overtake their requests, ABP's: see
    /// [`Dialect::remembers_early_cancels`](crate::Dialect::remembers_early_cancels)).
    ///
    /// The answer tells a finished request from an unknown one only if the scope's registry remembers finished
    /// requests ([`Registry::remember_finished`]; on by default in a scope made with a dialect that acknowledges
    /// cancels).
    pub fn acknowledge_cancel(&self, id: &Id, reason: CancelReason) -> CancelAck {
        self.inner
            .scope
            .registry()
            .acknowledge_in(self.inner.cancels, id, reason)
    }

    /// The other side is gone, or this side is done: cancel every request of this connection with `reason`, refuse
    /// later ones, and fail the peer's pending calls with [`PeerError::Closed`](crate::PeerError::Closed).
    /// Requests of other connections of the scope are not touched. Returns how many requests this cancelled;
    /// calling it again does no harm.
    pub fn close(&self, reason: CancelReason) -> usize {
        self.refuse_and_close_peer(&reason);
        self.inner
            .scope
            .registry()
            .cancel_connection(self.inner.key, reason)
    }

    /// As [`close`](Self::close), for a connection that may have many requests in flight: the cancelling is done a
    /// batch at a time, giving the executor's other tasks a turn between batches, so that closing a connection
    /// with a million requests in flight (about a second of cancelling) does not stall the other connections
    /// served by the same worker. The requests are refused and the peer closed at once, before the first batch.
    pub async fn close_in_turns(&self, reason: CancelReason) -> usize {
        self.refuse_and_close_peer(&reason);
        self.inner
            .scope
            .registry()
            .cancel_connection_in_turns(self.inner.key, reason)
            .await
    }

    /// What both closes do before cancelling: later requests are refused with `reason` (the first close's reason
    /// stays), and the peer's pending calls fail.
    fn refuse_and_close_peer(&self, reason: &CancelReason) {
        let _ = self.inner.refusing.set(reason.clone());
        if let Some(peer) = &self.inner.peer {
            peer.close();
        }
    }

    /// Stop taking work on this connection: its requests registered from now on start out cancelled with
    /// `reason` (a graceful shutdown: they are answered as the dialect answers it, and never run). Requests in
    /// flight run on; other connections of the scope are not touched.
    pub fn refuse_new(&self, reason: CancelReason) {
        let _ = self.inner.refusing.set(reason);
    }

    /// How many of this connection's requests that can be cancelled are in flight now: what a close waits for,
    /// since each of them is settled by its cancel layer once cancelled. Requests that can never be cancelled
    /// (`initialize`) are not counted.
    pub fn in_flight(&self) -> usize {
        self.inner.in_flight.load(Ordering::Acquire)
    }

    /// The connection's peer: present when its scope has a dialect.
    pub fn peer(&self) -> Option<&Peer> {
        self.inner.peer.as_ref()
    }

    /// Where messages to the other side go.
    pub fn outbox(&self) -> &Outbox {
        &self.inner.outbox
    }

    /// The dialect's per-conversation state.
    pub fn session(&self) -> &SessionState {
        &self.inner.session
    }

    /// The scope this connection belongs to.
    pub fn scope(&self) -> &Scope {
        &self.inner.scope
    }

    /// The scope's registry.
    pub fn registry(&self) -> &Registry {
        self.inner.scope.registry()
    }

    pub(crate) fn key(&self) -> u64 {
        self.inner.key
    }

    /// Whether a request `id` that the peer's cancel of `id` would reach is in flight here.
    pub(crate) fn serves(&self, id: &Id) -> bool {
        self.registry().contains_in(self.inner.cancels, id)
    }

    /// Put a request in the scope's registry, tagged with this connection, and in group `group` of this
    /// connection if it has one.
    pub(crate) fn register(
        &self,
        lifecycle: SharedLifecycle,
        group: Option<Id>,
    ) -> Result<Registration, DuplicateId> {
        self.registry().insert_grouped(
            &lifecycle,
            &self.inner.refusing,
            group,
            Some(&self.inner.in_flight),
        )?;
        Ok(Registration {
            connection: self.clone(),
            lifecycle: Some(lifecycle),
        })
    }
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("key", &self.inner.key)
            .field("in_flight", &self.in_flight())
            .field("refusing", &self.inner.refusing.get())
            .finish()
    }
}

/// Keeps a request in its registry; dropping it removes the entry and counts the outcome.
pub(crate) struct Registration {
    connection: Connection,
    // `None` only in the drop, once the entry is gone: the handle is given back then (`lifecycle::release`: the
    // allocation is kept for the thread's next request when this is its last handle).
    lifecycle: Option<SharedLifecycle>,
}

impl Registration {
    pub(crate) fn connection(&self) -> &Connection {
        &self.connection
    }

    pub(crate) fn lifecycle(&self) -> &Lifecycle {
        self.shared()
    }

    fn shared(&self) -> &SharedLifecycle {
        self.lifecycle
            .as_ref()
            .expect("a registration's lifecycle is kept until its drop")
    }

    /// Settle the request if nobody settled it: its outcome was taken, or nobody will ever read it. Done by the
    /// drop too; calling it first lets the caller see how the request ended before the entry goes.
    pub(crate) fn let_go(&self) {
        let lifecycle = self.shared();
        if !lifecycle.is_cancellable() {
            // Either way it is over (progress stops).
            lifecycle.complete();
        } else if !lifecycle.is_completed() {
            // Dropped unsettled means nobody will ever read the handler's outcome (the response future was
            // dropped): settle it as cancelled so the token fires and sub-tasks stop too.
            lifecycle.cancel(CancelReason::local("response future dropped"));
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.let_go();
        self.connection
            .registry()
            .remove_counted(self.shared(), Some(&self.connection.inner.in_flight));
        // After the entry's own handle went with it: this one is often the last.
        if let Some(lifecycle) = self.lifecycle.take() {
            lifecycle::release(lifecycle);
        }
    }
}

impl fmt::Debug for Registration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registration")
            .field("id", self.shared().id())
            .finish()
    }
}
