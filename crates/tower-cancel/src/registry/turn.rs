//! A turn given back to the executor, for work long enough to starve the tasks queued behind it.

use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
};

/// How many requests a closing connection cancels before it gives the executor a turn: about a hundred
/// microseconds of cancelling (each wakes its request's task).
pub(crate) const CLOSE_BATCH: usize = 128;

/// Pending once, with its waker woken: the executor runs what is queued before it polls the task again. Written
/// here rather than taken from tokio so that the core stays free of tokio's runtime (on tokio, a task woken while it
/// runs goes to the back of its worker's queue, as with `tokio::task::yield_now`).
#[derive(Debug, Default)]
pub(crate) struct YieldOnce {
    yielded: bool,
}

impl Future for YieldOnce {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.yielded {
            return Poll::Ready(());
        }
        self.yielded = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}
