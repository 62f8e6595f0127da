//! The requests a connection has in flight, whichever way they run: polled by the read loop itself (inline), or
//! each on a task of its own ([`Spawned`]). The read loop sees one stream of settled requests either way.

use std::{
    future::Future,
    panic::AssertUnwindSafe,
    pin::Pin,
    task::{Context, Poll},
};

use futures_util::{stream::FuturesUnordered, FutureExt, Stream, StreamExt};
use tower_cancel::{BoxError, Id, Panicked, Response};

use crate::spawned::Spawned;

/// A request's id and its outcome: what the read loop answers.
pub(crate) type Settled = (Option<Id>, Result<Option<Response>, BoxError>);

/// The requests in flight. Two sets rather than one set of either kind: a spawned request's future lives in its
/// task, so its entry here stays a handle's size instead of taking the size of the largest inline future.
pub(crate) struct InFlight<T> {
    inline: FuturesUnordered<T>,
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
    pub(crate) fn push_inline(&mut self, future: T) {
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
        // A connection uses one of the two sets; polling the empty one costs nothing.
        let inline = self.inline.poll_next_unpin(cx);
        if let Poll::Ready(Some(settled)) = inline {
            return Poll::Ready(Some(settled));
        }
        match self.spawned.poll_next_unpin(cx) {
            Poll::Ready(Some(settled)) => Poll::Ready(Some(settled)),
            Poll::Ready(None) if inline.is_ready() => Poll::Ready(None),
            _ => Poll::Pending,
        }
    }
}

/// A request polled by the read loop: its outcome with its id.
pub(crate) fn settle<F, E>(id: Option<Id>, future: F) -> impl Future<Output = Settled>
where
    F: Future<Output = Result<Option<Response>, E>>,
    E: Into<BoxError>,
{
    // A safety net for services without a cancel layer (which catches its handlers' panics itself): a panic is
    // answered as the stack answers one, and the connection goes on.
    AssertUnwindSafe(future).catch_unwind().map(move |outcome| {
        let outcome = match outcome {
            Ok(result) => result.map_err(Into::into),
            Err(payload) => Err(panicked(payload)),
        };
        (id, outcome)
    })
}

/// A caught panic as the failure the stack answers -32603; its message goes to the log only.
pub(crate) fn panicked(payload: Box<dyn std::any::Any + Send>) -> BoxError {
    let panicked = Panicked::from_payload(&*payload);
    tracing::error!("{panicked}");
    Box::new(panicked)
}
