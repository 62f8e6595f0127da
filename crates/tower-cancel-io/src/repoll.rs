//! A connection's future polled again at once when it wakes itself during its own poll, instead of being requeued.
//!
//! A connection's read loop polls the requests it runs inline, and reading a cancel wakes one of them: a wake of
//! the task that is running, from inside its own poll. tokio treats such a task as one that yielded: it requeues it
//! at the back of its worker's queue and wakes an idle worker to steal it (a system call), and the reply the cancel
//! produced waits for that. Here the wake only sets a flag, and the future is polled again before the task's poll
//! ends. A wake from another thread, or after the poll, goes to the task as usual.

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

/// How many times in a row a future that keeps waking itself is polled again before its task gets a turn on the
/// runtime: bounded, so that such a future cannot keep a worker from its other tasks.
const REPOLLS: usize = 16;

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
        let here = this_thread();
        for _ in 0..REPOLLS {
            this.wake.polling.store(here, Ordering::Relaxed);
            let poll = this.future.as_mut().poll(&mut inner);
            this.wake.polling.store(NOBODY, Ordering::Relaxed);
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

impl Wake for SelfWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.polling.load(Ordering::Relaxed) == this_thread() {
            self.woken.store(true, Ordering::Relaxed);
        } else {
            self.task.wake();
        }
    }
}

/// This thread, as a number no other running thread has and that is never `NOBODY`: the address of a thread local.
fn this_thread() -> usize {
    thread_local! {
        static HERE: u8 = const { 0 };
    }
    // A thread being torn down has none: `NOBODY`, which its wakes never match, so they go to the task.
    HERE.try_with(|here| std::ptr::from_ref(here) as usize)
        .unwrap_or(NOBODY)
}

#[cfg(test)]
mod tests;
