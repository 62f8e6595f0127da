use std::{
    fmt,
    future::Future,
    pin::Pin,
    sync::Arc,
    task::{ready, Context, Poll},
};

use pin_project_lite::pin_project;
use tokio::time::Sleep;
use tower::util::Oneshot;
use tower_service::Service;

use super::{Cancelled, Mode};
use crate::{
    context::CancelReason,
    lifecycle::Lifecycle,
    message::Request,
    registry::{Registration, Registry},
    BoxError,
};

pin_project! {
    /// Response future of [`Cancel`](super::Cancel).
    pub struct ResponseFuture<S>
    where
        S: Service<Request>,
    {
        #[pin]
        kind: Kind<S>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<S>
    where
        S: Service<Request>,
    {
        // A cancel notification or an early error: nothing to wait for.
        Ready { result: Option<Result<S::Response, BoxError>> },
        // A request that cannot be cancelled (a notification, `initialize`): just the inner service. For
        // `initialize`, `initializes` marks the scope's session initialized when it succeeds.
        Passthrough { #[pin] inner: Oneshot<S, Request>, initializes: Option<Registry> },
        Racing {
            #[pin]
            call: Call<S>,
            // Boxed: a timer is large, and only a cooperative cancel ever arms one.
            grace: Option<Pin<Box<Sleep>>>,
            lifecycle: Arc<Lifecycle>,
            mode: Mode,
            partial_allowed: bool,
            // Dropped (so the entry is removed) when this future completes or is dropped, on every path.
            registration: Option<Registration>,
        },
    }
}

pin_project! {
    // Readiness, then the call: like `Oneshot`, but the state says whether the handler exists yet. A request
    // cancelled while it waits for readiness (queued behind backpressure) has no handler to wind down, so it is
    // dropped at once in every mode and never runs.
    #[project = CallProj]
    enum Call<S>
    where
        S: Service<Request>,
    {
        Waiting { service: S, request: Option<Request> },
        Called { #[pin] future: S::Future },
        Done,
    }
}

impl<S: Service<Request>> ResponseFuture<S> {
    pub(crate) fn ready(result: Result<S::Response, BoxError>) -> Self {
        Self {
            kind: Kind::Ready {
                result: Some(result),
            },
        }
    }

    pub(crate) fn passthrough(inner: Oneshot<S, Request>, initializes: Option<Registry>) -> Self {
        Self {
            kind: Kind::Passthrough { inner, initializes },
        }
    }

    pub(crate) fn racing(
        service: S,
        request: Request,
        lifecycle: Arc<Lifecycle>,
        registration: Registration,
        mode: Mode,
        partial_allowed: bool,
    ) -> Self {
        Self {
            kind: Kind::Racing {
                call: Call::Waiting {
                    service,
                    request: Some(request),
                },
                grace: None,
                lifecycle,
                mode,
                partial_allowed,
                registration: Some(registration),
            },
        }
    }
}

impl<S: Service<Request>> fmt::Debug for ResponseFuture<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.kind {
            Kind::Ready { .. } => "ready",
            Kind::Passthrough { .. } => "passthrough",
            Kind::Racing { .. } => "racing",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .finish()
    }
}

impl<S> Future for ResponseFuture<S>
where
    S: Service<Request>,
    S::Error: Into<BoxError>,
{
    type Output = Result<S::Response, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Ready { result } => {
                Poll::Ready(result.take().expect("polled after completion"))
            }
            KindProj::Passthrough { inner, initializes } => {
                let output = ready!(inner.poll(cx));
                if let (Ok(_), Some(registry)) = (&output, initializes.take()) {
                    registry.session().mark_initialized();
                }
                Poll::Ready(output.map_err(Into::into))
            }
            KindProj::Racing {
                mut call,
                grace,
                lifecycle,
                mode,
                partial_allowed,
                registration,
            } => {
                // A cancel before the first poll stops the handler before it is even called.
                if lifecycle.is_cancelled() && grace.is_none() {
                    match *mode {
                        Mode::Cooperative { grace: period }
                            if matches!(*call, Call::Called { .. }) =>
                        {
                            *grace = Some(Box::pin(tokio::time::sleep(period)));
                        }
                        Mode::Abort | Mode::Cooperative { .. } => {
                            // Dropping the inner future stops the handler wherever it was parked.
                            call.set(Call::Done);
                            registration.take();
                            return Poll::Ready(Err(cancelled_error(lifecycle)));
                        }
                    }
                }
                if let Some(sleep) = grace.as_mut() {
                    if sleep.as_mut().poll(cx).is_ready() {
                        call.set(Call::Done);
                        registration.take();
                        return Poll::Ready(Err(cancelled_error(lifecycle)));
                    }
                }
                let output = match poll_call(call.as_mut(), cx) {
                    Poll::Ready(output) => output,
                    Poll::Pending => {
                        // The cancel wakes this future through the lifecycle (no token needed). Registering
                        // only now keeps a handler that answers at once from paying for it; a cancel that came
                        // between the check above and the registration is caught by the check after it.
                        if grace.is_none() {
                            lifecycle.wake_on_cancel(cx.waker());
                            if lifecycle.is_cancelled() {
                                cx.waker().wake_by_ref();
                            }
                        }
                        return Poll::Pending;
                    }
                };
                let output = output.map_err(Into::into);
                if let Err(error) = &output {
                    // tower's own timeout layer, placed below: its expiry is this request's Timeout cancellation,
                    // settled through the lifecycle like every other.
                    if error.is::<tower::timeout::error::Elapsed>() {
                        lifecycle.cancel(CancelReason::Timeout);
                    }
                }
                // Only now drop the inner future: tower's timeout future still holds the handler, and a handler
                // stopped by it must see reason Timeout in its context as it is dropped, as with every other
                // source (it saw no reason at all when this came before the cancel above).
                call.set(Call::Done);
                let result = if lifecycle.complete() {
                    output
                } else if *partial_allowed && grace.is_some() {
                    // The handler wound down within its grace period: its partial result or its own error is
                    // the one outcome of this request.
                    output
                } else {
                    // A cancel won the race (possibly a moment before this output): the cancel is the outcome.
                    Err(cancelled_error(lifecycle))
                };
                registration.take();
                Poll::Ready(result)
            }
        }
    }
}

/// Wait for the inner service's readiness, call it, then drive its future.
fn poll_call<S: Service<Request>>(
    mut call: Pin<&mut Call<S>>,
    cx: &mut Context<'_>,
) -> Poll<Result<S::Response, S::Error>> {
    loop {
        match call.as_mut().project() {
            CallProj::Waiting { service, request } => {
                if let Err(error) = ready!(service.poll_ready(cx)) {
                    return Poll::Ready(Err(error));
                }
                let request = request.take().expect("called once");
                let future = service.call(request);
                call.set(Call::Called { future });
            }
            CallProj::Called { future } => return future.poll(cx),
            CallProj::Done => panic!("polled after completion"),
        }
    }
}

fn cancelled_error(lifecycle: &Lifecycle) -> BoxError {
    let reason = lifecycle
        .reason()
        .cloned()
        .unwrap_or_else(|| CancelReason::local("cancelled"));
    Box::new(Cancelled::new(reason))
}
