//! Lifecycle allocations given back and taken again, a few per thread: a request that settles while its
//! registration holds the last handle to its lifecycle (the handler let go of its context, the table of its entry)
//! leaves the allocation to the thread's next request instead of freeing it.
//!
//! That is nearly every request: the cancel layer settles most of them where its handler answers. The allocator's
//! free and the next malloc are then skipped (about 160 instructions a request with glibc's, of which this list
//! takes back about 90), and so is the last release's atomic decrement: a handle found unique is taken back with
//! one load.
//!
//! A lifecycle is blanked as it is given back: it keeps no waker, token, reason or id of the request that had it
//! (a kept waker would keep its task alive). The gain needs a request to settle on the thread that made it, as
//! a connection's requests polled by its read loop do; where requests settle on other threads (each request a
//! task of its own, on a work-stealing runtime) a thread's list may fill while another allocates.
//! At most [`SPARE_PER_THREAD`] wait on a thread; past that, and on a thread that is ending, a lifecycle is freed
//! as before. Not in the model-checking build: loom's atomics inside a lifecycle cannot outlive the model run that
//! made them.

use super::{Lifecycle, SharedLifecycle};
#[cfg(not(loom))]
use crate::{
    loom::{AtomicWaker, OnceBox},
    message::Id,
};

#[cfg(not(loom))]
/// How many lifecycles a thread keeps for its next requests: enough for a read loop's burst of requests that
/// settle at once, few enough to be no memory to speak of (80 bytes each, under 3 KiB a thread).
const SPARE_PER_THREAD: usize = 32;

#[cfg(not(loom))]
thread_local! {
    static SPARE: std::cell::RefCell<Vec<triomphe::UniqueArc<Lifecycle>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Share `lifecycle`, in an allocation this thread gave back if it has one.
pub(crate) fn share(lifecycle: Lifecycle) -> SharedLifecycle {
    #[cfg(not(loom))]
    if let Ok(Some(mut spare)) = SPARE.try_with(|spare| spare.borrow_mut().pop()) {
        // A blank owns nothing (see `blank`), so it is written over without its drop glue: 18 instructions a
        // request (the list saves 39 with it, 21 without).
        std::mem::forget(std::mem::replace(&mut *spare, lifecycle));
        return triomphe::UniqueArc::shareable(spare);
    }
    SharedLifecycle::new(lifecycle)
}

/// Let go of `lifecycle`: kept for this thread's next request if this was its last handle and the thread has
/// room, else released as any handle is.
pub(crate) fn release(lifecycle: SharedLifecycle) {
    #[cfg(not(loom))]
    if let Ok(mut unique) = triomphe::Arc::try_unique(lifecycle) {
        let _ = SPARE.try_with(|spare| {
            // A full list frees it as it is, without blanking it first (a thread where requests settle but are
            // not made, a worker of a runtime that spawns each request, is full most of the time).
            if spare.borrow().len() >= SPARE_PER_THREAD {
                return;
            }
            // Outside any borrow of the list: a drop that blanking runs (a waker's, a token's) may come back here.
            blank(&mut unique);
            let mut spare = spare.borrow_mut();
            if spare.len() < SPARE_PER_THREAD {
                spare.push(unique);
            }
        });
    }
    #[cfg(loom)]
    drop(lifecycle);
}

/// Clear each field of `lifecycle` that can own something (an id's text, a waker and so its task, the rare parts
/// with a token and a reason), now rather than when the allocation is taken again: a blank then owns nothing, and
/// `share` writes over it without dropping it. The other fields are plain values, all written again by `share`;
/// that they own nothing is checked as this compiles, and every field is named, so that a field added to
/// `Lifecycle` is added here too.
#[cfg(not(loom))]
fn blank(lifecycle: &mut Lifecycle) {
    let Lifecycle {
        id,
        conn,
        cancellable,
        partial_allowed,
        initializes,
        grouped,
        state,
        waker,
        rare,
    } = lifecycle;
    owns_nothing(conn);
    owns_nothing(cancellable);
    owns_nothing(partial_allowed);
    owns_nothing(initializes);
    owns_nothing(grouped);
    owns_nothing(state);
    *id = Id::Number(0);
    *waker = AtomicWaker::new();
    *rare = OnceBox::new();
}

/// Fails to compile for a field whose type owns something to drop.
#[cfg(not(loom))]
fn owns_nothing<T>(_: &T) {
    const {
        assert!(
            !std::mem::needs_drop::<T>(),
            "a field a blank keeps must own nothing"
        )
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::{
        sync::Arc,
        task::{Wake, Waker},
    };

    use super::*;
    use crate::reason::CancelReason;

    /// This thread's list, emptied: each test counts from nothing.
    fn empty_list() {
        SPARE.with(|spare| spare.borrow_mut().clear());
    }

    fn spares() -> usize {
        SPARE.with(|spare| spare.borrow().len())
    }

    struct Task;

    impl Wake for Task {
        fn wake(self: Arc<Self>) {}
    }

    #[test]
    fn a_last_handle_is_kept_blank_and_its_allocation_taken_again() {
        empty_list();
        let task = Arc::new(Task);
        let first = share(Lifecycle::new(Id::from("first"), 1));
        first.wake_on_cancel(&Waker::from(task.clone()));
        first.cancel(CancelReason::local("gone"));
        // The cancel woke the task; a waker registered after it stays in the lifecycle until it goes.
        first.wake_on_cancel(&Waker::from(task.clone()));
        assert_eq!(
            Arc::strong_count(&task),
            2,
            "the lifecycle holds the task's waker"
        );
        let place = triomphe::Arc::as_ptr(&first);
        release(first);
        assert_eq!(spares(), 1);
        assert_eq!(
            Arc::strong_count(&task),
            1,
            "the kept lifecycle let go of the waker"
        );
        SPARE.with(|spare| {
            let spare = spare.borrow();
            let kept = spare.last().expect("kept");
            assert_eq!(kept.id(), &Id::Number(0), "no id of the request");
            assert!(
                kept.rare.get().is_none(),
                "no reason, token or deadline of the request"
            );
        });
        let second = share(Lifecycle::new(Id::from(2), 7));
        assert_eq!(triomphe::Arc::as_ptr(&second), place, "the same allocation");
        assert_eq!(spares(), 0);
        assert_eq!((second.id(), second.conn()), (&Id::from(2), 7));
        assert!(!second.is_cancelled() && second.reason().is_none());
    }

    #[test]
    fn a_handle_that_is_not_the_last_is_only_released() {
        empty_list();
        let shared = share(Lifecycle::new(Id::from(1), 1));
        let other = shared.clone();
        release(shared);
        assert_eq!(spares(), 0, "another handle holds it");
        assert_eq!(other.id(), &Id::from(1));
    }

    #[test]
    fn a_thread_keeps_a_bounded_number() {
        empty_list();
        let handles: Vec<_> = (0..SPARE_PER_THREAD as i64 * 2)
            .map(|n| share(Lifecycle::new(Id::from(n), 1)))
            .collect();
        handles.into_iter().for_each(release);
        assert_eq!(spares(), SPARE_PER_THREAD);
    }
}
