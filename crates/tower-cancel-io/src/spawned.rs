//! A request run on a task of its own ([`Server::spawn_requests`](crate::Server::spawn_requests), and the requests
//! the adaptive mode moves: [`Server::adaptive_requests`](crate::Server::adaptive_requests)).
//!
//! The task runs the service's whole response future, cancel stack included: a cancel reaches it through its
//! lifecycle exactly as it reaches a future polled by the read loop, and aborting the task drops the future,
//! which removes its registry entry. The read loop keeps a [`Spawned`] for each task, and answers for it.

use std::{
    future::Future,
    pin::Pin,
    task::{ready, Context, Poll},
};

use futures_util::FutureExt;
use tokio::task::JoinHandle;
use tower_cancel::{BoxError, Id, Request, Response};
use tower_service::Service;

use crate::settled::{panicked, Outcome, Settled};

/// Calls the service and spawns the future it returns. A plain function pointer, made where the service's future
/// is known to be `Send + 'static`, so that the driver itself needs no such bound (the inline mode serves
/// services whose futures are neither).
pub(crate) type Spawn<S> = fn(&mut S, Request) -> JoinHandle<Outcome>;

/// The [`Spawn`] for services of type `S`.
pub(crate) fn spawner<S>() -> Spawn<S>
where
    S: Service<Request, Response = Option<Response>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    // A combinator, not an `async` block: the block would keep the service's future twice (the moved-in value
    // and the one it awaits), doubling each task.
    |service, request| {
        tokio::spawn(
            service
                .call(request)
                .map(|outcome| outcome.map_err(Into::into)),
        )
    }
}

/// The read loop's handle on a request's task: it resolves to the request's outcome, and dropping it aborts the
/// task, so that everything the read loop lets go of (after the close grace, or with its `serve` future) is
/// dropped as an inline future would be.
#[derive(Debug)]
pub(crate) struct Spawned {
    id: Option<Id>,
    task: JoinHandle<Outcome>,
}

impl Spawned {
    pub(crate) fn new(id: Option<Id>, task: JoinHandle<Outcome>) -> Self {
        Self { id, task }
    }

    /// Abort the task; it still resolves, once the runtime has dropped its future.
    pub(crate) fn abort(&self) {
        self.task.abort();
    }
}

impl Future for Spawned {
    type Output = Settled;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Settled> {
        let joined = ready!(Pin::new(&mut self.task).poll(cx));
        let outcome = match joined {
            Ok(outcome) => outcome,
            // The task holds no catch of its own: a panic that escaped the service's future (a service without a
            // cancel layer, or a panic in a drop) is answered as the inline mode answers one.
            Err(error) if error.is_panic() => Err(panicked(error.into_panic())),
            // Only an abort (the read loop letting go of the request) or the runtime shutting down: nobody reads
            // this answer any more, but it is an answer all the same.
            Err(error) => Err(error.into()),
        };
        Poll::Ready((self.id.take(), outcome))
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        // A task's JoinHandle detaches on drop; a request the read loop lets go of must stop.
        self.task.abort();
    }
}
