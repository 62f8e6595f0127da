//! The per-request state machine: the one place where "who answers" is decided.
//!
//! # Invariants
//!
//! A request starts `RUNNING` and moves exactly once, by compare-and-swap, to `COMPLETED` (its handler's outcome
//! is the reply) or to `CANCELLED` (the dialect's cancelled reply is); a request its dialect never lets be
//! cancelled starts `UNCANCELLABLE` and never moves. Every failed swap means another party
//! settled the request first, so at most one outcome is ever acted on. The cancellation token fires only on the
//! move to `CANCELLED`, and the reason is written before that move, so whoever sees `CANCELLED` also sees a reason.

mod deadline;
mod spare;

use std::{
    sync::{atomic::Ordering, Arc},
    task::Waker,
};

#[cfg(feature = "metrics")]
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub(crate) use self::deadline::after;
pub use self::deadline::{Deadline, DEADLINE_FIELD};
pub(crate) use self::spare::{release, share};
use crate::{
    dialect::Dialect,
    loom::{fence, AtomicU8, AtomicWaker, OnceBox, OnceLock},
    message::{Id, WireRequest},
    reason::CancelReason,
};

const RUNNING: u8 = 0;
const COMPLETED: u8 = 1;
const CANCELLED: u8 = 2;
// A request its dialect never lets be cancelled (`initialize`; in the ACP draft, anything before initialization).
// No source can settle it as cancelled, so its token never fires and a timeout layer gives it no deadline; it only
// moves to `COMPLETED`, when its handler's outcome is taken (or its future let go of).
const UNCANCELLABLE: u8 = 3;

/// A handle to a request's [`Lifecycle`], shared by its future, its registry entry and its context. triomphe's
/// `Arc`: it has no weak count (nothing takes a weak handle to a lifecycle), so the last release is one atomic
/// read-modify-write where std's takes two, and each allocation is a word smaller.
pub(crate) type SharedLifecycle = triomphe::Arc<Lifecycle>;

/// The state one request shares between its future, its registry entry and its context.
///
/// It is allocated for every request and lives as long as the request is in flight, so it keeps inline only
/// what every request uses (72 bytes); the rest is in [`Rare`], made the first time a request needs any of it.
#[derive(Debug)]
pub(crate) struct Lifecycle {
    id: Id,
    // The connection the request arrived on (see `Registry`): the scope of its id and of the cancels its peer sends.
    conn: u64,
    // Fixed at creation: whether the request counts in the registry's counters.
    cancellable: bool,
    // Fixed at creation, for the cancel layer: whether the handler's own answer after a cooperative cancel is the
    // reply (the dialect allows partial results), and whether the request is `initialize` (its success marks the
    // session initialized). Here rather than in the layer's future: the lifecycle has room for them in its
    // padding, and the future (held for each request in flight) would grow a word.
    partial_allowed: bool,
    initializes: bool,
    // Whether the request is in a group of the registry's group index, so that leaving the registry looks it up
    // there only then. Read and written under the registry's lock only (std's: no ordering to model).
    grouped: std::sync::atomic::AtomicBool,
    state: AtomicU8,
    // The cancel layer's response future, woken on the move to `CANCELLED`.
    waker: AtomicWaker,
    // One word: a `OnceLock<Box<_>>` would take two.
    rare: OnceBox<Rare>,
}

/// What a request needs only once it is cancelled, asks for a token, or is given a deadline: most requests are
/// none of these, and each would otherwise cost every request's lifecycle its room.
#[derive(Debug, Default)]
struct Rare {
    reason: OnceLock<CancelReason>,
    // Made on first use: a token costs an allocation, and a lock on each clone, wait and drop. The cancel layer
    // waits on the lifecycle's `waker` instead.
    token: OnceLock<CancellationToken>,
    // Set by a timeout layer, at most once.
    deadline: OnceLock<Deadline>,
    // The group the request was put in at admission (its ACP session), for its handler and for its way out of
    // the registry's group index. The key is the index's own, shared: a request does not copy it.
    group: OnceLock<Arc<Id>>,
    // The groups it was bound to later (the LSP progress tokens its handler created), for its way out of the
    // index. Only touched under the registry's lock; a lock here rather than a cell because a request may be
    // bound more than once.
    bound: std::sync::Mutex<Vec<Arc<Id>>>,
    // The `_meta` field the layer that set the deadline reads (`TimeoutLayer::from_meta`): the one the request's
    // own calls write their remaining time into, for the next hop's layer to read the same way.
    deadline_field: OnceLock<Arc<str>>,
    // For a request the other side ends only by cancelling it (`Dialect::ends_with_cancel`): the dialect that
    // renders the notice this side sends when it ends the request itself.
    end_notice: OnceLock<EndNotice>,
    // When the request was cancelled, for the cancel-to-settle histogram (only with the `metrics` feature).
    #[cfg(feature = "metrics")]
    cancelled_at: OnceLock<Instant>,
}

impl Lifecycle {
    /// A request `id` that arrived on connection `conn`.
    pub(crate) fn new(id: Id, conn: u64) -> Self {
        Self::with_state(id, conn, RUNNING)
    }

    /// A request that can never be cancelled (see `UNCANCELLABLE`): [`cancel`](Self::cancel) is always a no-op.
    pub(crate) fn uncancellable(id: Id, conn: u64) -> Self {
        Self::with_state(id, conn, UNCANCELLABLE)
    }

    fn with_state(id: Id, conn: u64, state: u8) -> Self {
        Self {
            id,
            conn,
            cancellable: state == RUNNING,
            partial_allowed: false,
            initializes: false,
            grouped: std::sync::atomic::AtomicBool::new(false),
            state: AtomicU8::new(state),
            waker: AtomicWaker::new(),
            rare: OnceBox::new(),
        }
    }

    /// The rare parts, made now if they were not.
    fn rare(&self) -> &Rare {
        self.rare.get_or_init(Box::default)
    }

    /// Let a handler's own answer after a cooperative cancel be the reply (where the dialect allows partial
    /// results).
    pub(crate) fn with_partial_results(mut self, allowed: bool) -> Self {
        self.partial_allowed = allowed;
        self
    }

    /// Mark the request as one whose success initializes its session (`initialize`).
    pub(crate) fn with_initializes(mut self, initializes: bool) -> Self {
        self.initializes = initializes;
        self
    }

    /// Mark the request as in (or out of) a group of the registry's group index. Under the registry's lock.
    pub(crate) fn set_grouped(&self, grouped: bool) {
        self.grouped
            .store(grouped, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether the request is in a group of the registry's group index. Under the registry's lock.
    pub(crate) fn is_grouped(&self) -> bool {
        self.grouped.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Record a group of the registry's group index that the request joined: at admission (`at_admission`, the
    /// handler's [`group`](Self::group); the first one only), or bound to it later. Under the registry's lock.
    pub(crate) fn record_group(&self, key: Arc<Id>, at_admission: bool) {
        let rare = self.rare();
        if at_admission {
            let _ = rare.group.set(key);
        } else {
            bound(rare).push(key);
        }
    }

    /// Whether the request is in group `key` of the registry's group index. Under the registry's lock.
    pub(crate) fn in_group(&self, key: &Id) -> bool {
        let Some(rare) = self.rare.get() else {
            return false;
        };
        rare.group.get().is_some_and(|group| **group == *key)
            || bound(rare).iter().any(|group| **group == *key)
    }

    /// Call `leave` with every group of the index the request is in, and forget the ones it was bound to (the
    /// group of its admission stays its handler's). Under the registry's lock, as it leaves the index.
    pub(crate) fn leave_groups(&self, mut leave: impl FnMut(&Id)) {
        let Some(rare) = self.rare.get() else {
            return;
        };
        if let Some(group) = rare.group.get() {
            leave(group);
        }
        for group in bound(rare).drain(..) {
            leave(&group);
        }
    }

    /// The group the request was put in at admission, if any.
    pub(crate) fn group(&self) -> Option<&Id> {
        self.rare.get()?.group.get().map(|group| &**group)
    }

    pub(crate) fn allows_partial_result(&self) -> bool {
        self.partial_allowed
    }

    pub(crate) fn initializes(&self) -> bool {
        self.initializes
    }

    /// Whether any source may cancel the request (fixed when it is made).
    pub(crate) fn is_cancellable(&self) -> bool {
        self.cancellable
    }

    /// Give the request a deadline. Only the first call counts (the outermost timeout layer wins).
    pub(crate) fn set_deadline(&self, deadline: Deadline) -> bool {
        self.rare().deadline.set(deadline).is_ok()
    }

    /// Mark the request as one whose end this side announces in `dialect`'s words when it ends it itself (see
    /// `Dialect::ends_with_cancel`).
    pub(crate) fn announce_end(&self, dialect: Arc<dyn Dialect>) {
        let _ = self.rare().end_notice.set(EndNotice(dialect));
    }

    /// The notice this side sends for the request's end, if it announces its end and this side ended it: its
    /// handler answered (`answered`), or it was cancelled by anything but the peer (whose cancel or hang-up ended
    /// it). A handler's error is no end to announce: the request never became what the notice would end (a
    /// subscription refused is answered with its error).
    pub(crate) fn end_notice(&self, answered: bool) -> Option<WireRequest> {
        let EndNotice(dialect) = self.rare.get()?.end_notice.get()?;
        let reason = match self.reason() {
            Some(
                CancelReason::Peer { .. } | CancelReason::Group { .. } | CancelReason::Disconnect,
            ) => return None,
            None if !answered => return None,
            reason => reason,
        };
        Some(dialect.end_notice(&self.id, reason))
    }

    /// The request's deadline, if it has one.
    pub(crate) fn deadline(&self) -> Option<&Deadline> {
        self.rare.get()?.deadline.get()
    }

    /// Name the `_meta` field the request's deadline came in (see `Rare::deadline_field`). Only the first call
    /// counts, as for the deadline.
    pub(crate) fn set_deadline_field(&self, field: Arc<str>) {
        let _ = self.rare().deadline_field.set(field);
    }

    /// The `_meta` field the request's deadline came in, if the layer that set it reads one.
    pub(crate) fn deadline_field(&self) -> Option<&Arc<str>> {
        self.rare.get()?.deadline_field.get()
    }

    pub(crate) fn id(&self) -> &Id {
        &self.id
    }

    pub(crate) fn conn(&self) -> u64 {
        self.conn
    }

    /// The request's token, made on first use and fired if the request is (or becomes) cancelled.
    pub(crate) fn token(&self) -> &CancellationToken {
        let token = self.rare().token.get_or_init(CancellationToken::new);
        // Pairs with the fence in `cancel`. A token made while a cancel is under way is seen by that cancel (which
        // fires it), or this sees `CANCELLED` (and fires it here): with both fences, they cannot both miss.
        fence(Ordering::SeqCst);
        if self.is_cancelled() {
            token.cancel();
        }
        token
    }

    /// Wake `waker` on the move to `CANCELLED`. Check [`is_cancelled`](Self::is_cancelled) after registering: a
    /// cancel that came before is not woken for.
    pub(crate) fn wake_on_cancel(&self, waker: &Waker) {
        self.waker.register(waker);
    }

    /// Settle as cancelled. Returns `false` if the request was already settled (completed, or cancelled by an
    /// earlier source) or another source's cancel is settling it now: the caller's cancel is then a no-op.
    pub(crate) fn cancel(&self, reason: CancelReason) -> bool {
        if self.state.load(Ordering::Acquire) != RUNNING {
            return false;
        }
        // The reason is written before the swap, and only the cancel that writes it may make the swap: with two
        // cancels racing, the one whose reason is kept is the one that wins (or neither, if a completion is first),
        // so no caller is told it cancelled the request while the reply names another source.
        // A cancel that loses the race to a completion leaves a reason nobody reads: `reason()` only answers in
        // `CANCELLED`.
        let rare = self.rare();
        if rare.reason.set(reason).is_err() {
            return false;
        }
        // Before the swap, like the reason, so that whoever sees `CANCELLED` sees the instant too. Only the
        // reason's writer gets here, so the cell is always empty.
        #[cfg(feature = "metrics")]
        let _ = rare.cancelled_at.set(Instant::now());
        let won = self
            .state
            .compare_exchange(RUNNING, CANCELLED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if won {
            // See `token`.
            fence(Ordering::SeqCst);
            if let Some(token) = rare.token.get() {
                token.cancel();
            }
            self.waker.wake();
        }
        won
    }

    /// Settle as completed. Returns `false` if a cancel won first.
    pub(crate) fn complete(&self) -> bool {
        let from = if self.cancellable {
            RUNNING
        } else {
            UNCANCELLABLE
        };
        self.state
            .compare_exchange(from, COMPLETED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Whether the request is still unsettled: neither completed nor cancelled.
    pub(crate) fn is_running(&self) -> bool {
        matches!(self.state.load(Ordering::Acquire), RUNNING | UNCANCELLABLE)
    }

    pub(crate) fn is_cancelled(&self) -> bool {
        self.state.load(Ordering::Acquire) == CANCELLED
    }

    pub(crate) fn is_completed(&self) -> bool {
        self.state.load(Ordering::Acquire) == COMPLETED
    }

    /// When the request moved to `CANCELLED`, once it has.
    #[cfg(feature = "metrics")]
    pub(crate) fn cancelled_at(&self) -> Option<Instant> {
        if self.is_cancelled() {
            self.rare.get()?.cancelled_at.get().copied()
        } else {
            None
        }
    }

    /// The reason, once the request is cancelled.
    pub(crate) fn reason(&self) -> Option<&CancelReason> {
        if self.is_cancelled() {
            self.rare.get()?.reason.get()
        } else {
            None
        }
    }
}

/// The groups `rare`'s request was bound to. A poisoned lock is kept using: its holders only push and drain.
fn bound(rare: &Rare) -> std::sync::MutexGuard<'_, Vec<Arc<Id>>> {
    rare.bound
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The dialect of a request that announces its end (a wrapper: dialects are not `Debug`).
struct EndNotice(Arc<dyn Dialect>);

impl std::fmt::Debug for EndNotice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("EndNotice").field(&self.0.name()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_uncancellable_request_is_never_cancelled() {
        let l = Lifecycle::uncancellable(1.into(), 1);
        assert!(!l.is_cancellable());
        assert!(!l.cancel(CancelReason::Timeout));
        assert!(!l.is_cancelled());
        assert_eq!(l.reason(), None);
        assert!(!l.token().is_cancelled());
        assert!(l.is_running());
        assert!(l.complete(), "it completes");
        assert!(!l.is_running());
        assert!(!l.cancel(CancelReason::Timeout));
        assert!(Lifecycle::new(2.into(), 1).is_cancellable());
    }

    #[test]
    fn a_request_that_is_never_cancelled_keeps_its_lifecycle_small() {
        // What the registry and the bytes per request held are made of (BENCHMARKS.md): the rare parts stay out.
        assert!(std::mem::size_of::<Lifecycle>() <= 72);
        let l = Lifecycle::new(1.into(), 1);
        assert!(l.complete());
        assert!(l.deadline().is_none() && l.reason().is_none());
        assert!(l.rare.get().is_none(), "nothing rare was made");
    }

    #[test]
    fn first_settlement_wins() {
        let l = Lifecycle::new(1.into(), 1);
        assert!(l.cancel(CancelReason::Timeout));
        assert!(!l.complete());
        assert!(!l.cancel(CancelReason::Disconnect));
        assert_eq!(l.reason(), Some(&CancelReason::Timeout));
        assert!(l.token().is_cancelled());

        let l = Lifecycle::new(2.into(), 1);
        assert!(l.complete());
        assert!(!l.cancel(CancelReason::peer(None)));
        assert_eq!(l.reason(), None);
        assert!(!l.token().is_cancelled());
    }

    #[test]
    fn the_token_is_made_on_first_use_and_fires_whenever_it_was_made() {
        let early = Lifecycle::new(1.into(), 1);
        let token = early.token().clone();
        assert!(!token.is_cancelled());
        assert!(early.cancel(CancelReason::Timeout));
        assert!(token.is_cancelled(), "a token made before the cancel fires");

        let late = Lifecycle::new(2.into(), 1);
        assert!(late.rare.get().is_none(), "no token until asked for");
        assert!(late.cancel(CancelReason::Timeout));
        assert!(
            late.token().is_cancelled(),
            "a token made after the cancel is fired"
        );
    }

    #[test]
    fn the_cancel_wakes_the_waiting_future_and_a_completion_does_not() {
        use std::{
            sync::{atomic::AtomicUsize, Arc},
            task::Wake,
        };
        struct Count(AtomicUsize);
        impl Wake for Count {
            fn wake(self: Arc<Self>) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());

        let completed = Lifecycle::new(1.into(), 1);
        completed.wake_on_cancel(&waker);
        assert!(completed.complete());
        assert!(!completed.cancel(CancelReason::Timeout));
        assert_eq!(count.0.load(Ordering::SeqCst), 0);

        let cancelled = Lifecycle::new(2.into(), 1);
        cancelled.wake_on_cancel(&waker);
        assert!(cancelled.cancel(CancelReason::Timeout));
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
    }
}
