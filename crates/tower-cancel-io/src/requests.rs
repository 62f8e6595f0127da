//! Where a connection's requests run: polled by the read loop (inline), each on a task of its own (spawned), or
//! polled once by the read loop and moved to a task of its own only if still pending (adaptive).

use std::{future::Future, pin::Pin};

use futures_util::FutureExt;
use tokio::task::JoinHandle;
use tower_cancel::{unwind::CatchUnwind, BoxError, Request, Response};
use tower_service::Service;

use crate::{
    settled::{outcome, Outcome},
    spawned::Spawn,
};

/// How a connection runs its requests (notifications always run inline: see the read loop). The spawned and
/// adaptive modes carry a function made where the service's future is known to be `Send + 'static`, so that the
/// driver itself needs no such bound.
pub(crate) enum Mode<S> {
    Inline,
    Spawned(Spawn<S>),
    Adaptive(Call<S>),
}

// By hand: a derive would ask `S: Copy`, and the variants hold only function pointers.
impl<S> Clone for Mode<S> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<S> Copy for Mode<S> {}

impl<S> Mode<S> {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Mode::Inline => "inline",
            Mode::Spawned(_) => "spawned",
            Mode::Adaptive(_) => "adaptive",
        }
    }
}

/// A request the service took, as it starts.
pub(crate) enum Started<F> {
    /// Its future, for the read loop to poll.
    Inline(F),
    /// Its task.
    Task(JoinHandle<Outcome>),
    /// Already settled in its first poll: nothing left to run.
    Done(Outcome),
}

/// A request's future under the net, boxed so that it can move to a task after its first poll: one allocation,
/// cheaper than a task (and the inline mode's set allocates a node per request too).
pub(crate) type Movable = Pin<Box<dyn Future<Output = Outcome> + Send>>;

/// Calls the service and boxes the future it returns. A plain function pointer, made where the service's future is
/// known to be `Send + 'static` (as [`Spawn`] is).
pub(crate) type Call<S> = fn(&mut S, Request) -> Movable;

/// The [`Call`] for services of type `S`.
pub(crate) fn caller<S>() -> Call<S>
where
    S: Service<Request, Response = Option<Response>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    // A closure, not a function generic over the error: the box must be `'static`, which a function item generic over the
    // service's error type would be only for errors that are `'static` too.
    #[allow(clippy::redundant_closure)]
    |service, request| {
        Box::pin(CatchUnwind::new(service.call(request)).map(|caught| outcome(caught)))
    }
}
