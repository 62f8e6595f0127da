//! A connection's future polled again at once when it wakes itself during its own poll, instead of being requeued.
//!
//! A connection's read loop polls the requests it runs inline, and reading a cancel wakes one of them: a wake of
//! the task that is running, from inside its own poll. tokio treats such a task as one that yielded: it requeues it
//! at the back of its worker's queue and wakes an idle worker to steal it (a system call), and the reply the cancel
//! produced waits for that. Here the wake only sets a flag, and the future is polled again before the task's poll
//! ends. A wake from another thread, or after the poll, goes to the task as usual.
//!
//! What this takes from the future inside is the turn a self-wake would have given the runtime. tokio's own yields
//! keep theirs (`tokio::task::yield_now`, and a task out of its coop budget: since tokio 1.44 their wakes are
//! deferred until the task's poll has ended, and reach the task). Other yields made of a self-wake become polls
//! again, at most [`POLLS`] in a turn: `FuturesUnordered`'s own (it yields after polling a future that woke itself
//! twice), or a handler's that yields with a wake of its own. A future that ends its work with such yields (a
//! closing connection's turns given back) is not polled through this.

use std::{
    future::Future,
    pin::Pin,
    sync::{
        atomic::{AtomicBool, AtomicUsize, Ordering},
        Arc,
    },
    task::{Context, Poll, Wake, Waker},
};

use futures_util::task::AtomicWaker;
use pin_project_lite::pin_project;

/// How many times the future is polled in one poll of its task at most, when it keeps waking itself: then it is
/// requeued as any task woken during its poll is, so that it cannot keep a worker from its other tasks. The wake
/// of a cancel needs one poll more.
const POLLS: usize = 4;

pin_project! {
    /// `future`, polled again in place when it woke itself during its poll (see the module docs).
    pub(crate) struct Repoll<F> {
        #[pin]
        future: F,
        wake: Arc<SelfWake>,
        // Made once: the futures inside compare it with the waker they hold (`will_wake`) and keep theirs.
        waker: Waker,
    }
}

impl<F> Repoll<F> {
    pub(crate) fn new(future: F) -> Self {
        let wake = Arc::new(SelfWake::default());
        let waker = Waker::from(wake.clone());
        Self {
            future,
            wake,
            waker,
        }
    }
}

impl<F: Future> Future for Repoll<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let mut this = self.project();
        this.wake.task.register(cx.waker());
        let mut inner = Context::from_waker(this.waker);
        // For all the polls of this turn: between two of them nothing else runs on this thread.
        let _polling = Polling::start(this.wake);
        for _ in 0..POLLS {
            let poll = this.future.as_mut().poll(&mut inner);
            // Only this thread sets the flag, and only while it polls: no other thread reads or writes it then.
            let woken = this.wake.woken.swap(false, Ordering::Relaxed);
            if poll.is_ready() || !woken {
                return poll;
            }
        }
        // Woken by itself every time: requeued as any task woken during its poll is.
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// `polling` when no thread polls the future.
const NOBODY: usize = 0;

/// What [`this_thread`] says on a thread that cannot tell (its thread locals torn down): a value `polling` never
/// holds, so that such a thread's wakes always go to the task.
const UNKNOWN: usize = usize::MAX;

/// The waker the future inside is given.
#[derive(Default)]
struct SelfWake {
    // The thread polling the future now (`this_thread`), or `NOBODY`. A thread compares it with its own only: one
    // that reads it stale sees another thread's or nobody, never its own, and wakes the task, which is right.
    polling: AtomicUsize,
    // Set by a wake from the polling thread during the poll.
    woken: AtomicBool,
    // The task's waker, from its last poll.
    task: AtomicWaker,
}

impl SelfWake {
    /// A wake from thread `here`.
    fn wake_from(&self, here: usize) {
        if self.polling.load(Ordering::Relaxed) == here {
            self.woken.store(true, Ordering::Relaxed);
        } else {
            self.task.wake();
        }
    }
}

impl Wake for SelfWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.wake_from(this_thread());
    }
}

/// Marks this thread as the one polling, until dropped (a panic of the future inside included).
struct Polling<'a>(&'a SelfWake);

impl<'a> Polling<'a> {
    fn start(wake: &'a SelfWake) -> Self {
        // A thread that cannot tell which it is takes no wake for its own: they all go to the task.
        let here = match this_thread() {
            UNKNOWN => NOBODY,
            here => here,
        };
        wake.polling.store(here, Ordering::Relaxed);
        Self(wake)
    }
}

impl Drop for Polling<'_> {
    fn drop(&mut self) {
        self.0.polling.store(NOBODY, Ordering::Relaxed);
    }
}

/// This thread, as a number no other running thread has and that is neither `NOBODY` nor `UNKNOWN`: the address of
/// a thread local.
fn this_thread() -> usize {
    thread_local! {
        static HERE: u8 = const { 0 };
    }
    HERE.try_with(|here| std::ptr::from_ref(here) as usize)
        .unwrap_or(UNKNOWN)
}

#[cfg(test)]
mod tests;
