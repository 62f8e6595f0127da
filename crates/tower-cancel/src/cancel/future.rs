use std::{
    fmt,
    future::Future,
    pin::Pin,
    sync::Arc,
    task::{ready, Context, Poll},
};

use pin_project_lite::pin_project;
use tokio::time::Sleep;
use tokio_util::sync::WaitForCancellationFutureOwned;

use super::{Cancelled, Mode};
use crate::{
    context::CancelReason,
    lifecycle::Lifecycle,
    registry::{Registration, Registry},
    BoxError,
};

pin_project! {
    /// Response future of [`Cancel`](super::Cancel).
    pub struct ResponseFuture<F, T> {
        #[pin]
        kind: Kind<F, T>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F, T> {
        // A cancel notification or an early error: nothing to wait for.
        Ready { result: Option<Result<T, BoxError>> },
        // A request that cannot be cancelled (a notification, `initialize`): just the inner future. For
        // `initialize`, `initializes` marks the scope's session initialized when it succeeds.
        Passthrough { #[pin] inner: F, initializes: Option<Registry> },
        Racing {
            #[pin]
            inner: Option<F>,
            #[pin]
            cancelled: WaitForCancellationFutureOwned,
            #[pin]
            grace: Option<Sleep>,
            lifecycle: Arc<Lifecycle>,
            mode: Mode,
            partial_allowed: bool,
            // Dropped (so the entry is removed) when this future completes or is dropped, on every path.
            registration: Option<Registration>,
        },
    }
}

impl<F, T> ResponseFuture<F, T> {
    pub(crate) fn ready(result: Result<T, BoxError>) -> Self {
        Self {
            kind: Kind::Ready {
                result: Some(result),
            },
        }
    }

    pub(crate) fn passthrough(inner: F, initializes: Option<Registry>) -> Self {
        Self {
            kind: Kind::Passthrough { inner, initializes },
        }
    }

    pub(crate) fn racing(
        inner: F,
        lifecycle: Arc<Lifecycle>,
        registration: Registration,
        mode: Mode,
        partial_allowed: bool,
    ) -> Self {
        Self {
            kind: Kind::Racing {
                inner: Some(inner),
                cancelled: lifecycle.token().clone().cancelled_owned(),
                grace: None,
                lifecycle,
                mode,
                partial_allowed,
                registration: Some(registration),
            },
        }
    }
}

impl<F, T> fmt::Debug for ResponseFuture<F, T> {
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

impl<F, T, E> Future for ResponseFuture<F, T>
where
    F: Future<Output = Result<T, E>>,
    E: Into<BoxError>,
{
    type Output = Result<T, BoxError>;

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
                mut inner,
                cancelled,
                mut grace,
                lifecycle,
                mode,
                partial_allowed,
                registration,
            } => {
                // Checking the state first avoids polling the token's future again once it has fired.
                let is_cancelled = lifecycle.is_cancelled() || cancelled.poll(cx).is_ready();
                if is_cancelled && grace.is_none() {
                    match *mode {
                        Mode::Abort => {
                            // Dropping the inner future stops the handler wherever it was parked.
                            inner.set(None);
                            registration.take();
                            return Poll::Ready(Err(cancelled_error(lifecycle)));
                        }
                        Mode::Cooperative { grace: period } => {
                            grace.set(Some(tokio::time::sleep(period)));
                        }
                    }
                }
                if let Some(sleep) = grace.as_mut().as_pin_mut() {
                    if sleep.poll(cx).is_ready() {
                        inner.set(None);
                        registration.take();
                        return Poll::Ready(Err(cancelled_error(lifecycle)));
                    }
                }
                let fut = inner
                    .as_mut()
                    .as_pin_mut()
                    .expect("polled after completion");
                let output = ready!(fut.poll(cx));
                inner.set(None);
                let result = if lifecycle.complete() {
                    output.map_err(Into::into)
                } else if *partial_allowed && grace.is_some() {
                    // The handler wound down within its grace period: its partial result or its own error is
                    // the one outcome of this request.
                    output.map_err(Into::into)
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

fn cancelled_error(lifecycle: &Lifecycle) -> BoxError {
    let reason = lifecycle
        .reason()
        .cloned()
        .unwrap_or_else(|| CancelReason::local("cancelled"));
    Box::new(Cancelled::new(reason))
}
