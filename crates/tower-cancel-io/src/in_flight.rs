//! The requests a connection has in flight, whichever way they run: polled by the read loop itself (inline), or
//! each on a task of its own ([`Spawned`]: the spawned mode's, and the adaptive mode's once moved). The read loop sees
//! one stream of settled requests either way (a request the adaptive mode settles in its first poll never enters).

use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
};

use futures_util::{stream::FuturesUnordered, Stream, StreamExt};

use crate::{settled::Settled, spawned::Spawned};

/// The requests in flight. Two sets rather than one set of either kind: a spawned request's future lives in its
/// task, so its entry here stays a handle's size instead of taking the size of the largest inline future.
pub(crate) struct InFlight<T> {
    // Boxed: the read loop polls each request once before it enters, and a future polled once cannot move.
    inline: FuturesUnordered<Pin<Box<T>>>,
    spawned: FuturesUnordered<Spawned>,
}

impl<T: Future<Output = Settled>> InFlight<T> {
    pub(crate) fn new() -> Self {
        Self {
            inline: FuturesUnordered::new(),
            spawned: FuturesUnordered::new(),
        }
    }

    /// A request the read loop polls itself.
    pub(crate) fn push_inline(&mut self, future: Pin<Box<T>>) {
        self.inline.push(future);
    }

    /// A request running on its own task.
    pub(crate) fn push_spawned(&mut self, spawned: Spawned) {
        self.spawned.push(spawned);
    }

    pub(crate) fn len(&self) -> usize {
        self.inline.len() + self.spawned.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.inline.is_empty() && self.spawned.is_empty()
    }

    /// Drop every request left: the inline futures at once, and the spawned tasks aborted and waited for, so that
    /// when the connection's `serve` returns, no request of it still runs or holds a registry entry.
    pub(crate) async fn drop_all(mut self) {
        drop(self.inline);
        for task in self.spawned.iter_mut() {
            task.abort();
        }
        // A task that settled meanwhile is not answered: the read loop let go of it, as of an inline future.
        while self.spawned.next().await.is_some() {}
    }
}

impl<T: Future<Output = Settled>> Stream for InFlight<T> {
    type Item = Settled;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Settled>> {
        // A connection uses one of the two sets, and an empty set is not polled: a poll registers the waker (two
        // atomic read-modify-writes), even on a set with nothing to wake it for. One that gains a request is polled
        // from the read loop's next turn.
        if !self.inline.is_empty() {
            if let Poll::Ready(Some(settled)) = self.inline.poll_next_unpin(cx) {
                return Poll::Ready(Some(settled));
            }
        }
        if !self.spawned.is_empty() {
            if let Poll::Ready(Some(settled)) = self.spawned.poll_next_unpin(cx) {
                return Poll::Ready(Some(settled));
            }
        }
        if self.is_empty() {
            Poll::Ready(None)
        } else {
            Poll::Pending
        }
    }
}
