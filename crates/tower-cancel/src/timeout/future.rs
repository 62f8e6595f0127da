use std::{
    fmt,
    future::Future,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};

use pin_project_lite::pin_project;
use tokio::time::Sleep;

use crate::{cancel::Cancelled, context::CancelReason, lifecycle::Lifecycle, BoxError};

pin_project! {
    /// Response future of [`Timeout`](super::Timeout).
    pub struct ResponseFuture<F> {
        #[pin]
        inner: F,
        // Boxed: a timer is large (over 100 bytes), and a request without a timeout should not carry room for one.
        sleep: Option<Pin<Box<Sleep>>>,
        // The request's lifecycle, when a cancel layer above gave it one: expiry cancels it, so the cancel layer
        // settles the request like any other cancel. Without one, expiry ends this future itself.
        lifecycle: Option<Arc<Lifecycle>>,
    }
}

impl<F> ResponseFuture<F> {
    pub(crate) fn new(inner: F, sleep: Option<Sleep>, lifecycle: Option<Arc<Lifecycle>>) -> Self {
        Self {
            inner,
            sleep: sleep.map(Box::pin),
            lifecycle,
        }
    }
}

impl<F> fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("deadline", &self.sleep.as_ref().map(|s| s.deadline()))
            .finish()
    }
}

impl<F, T, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<T, E>>,
    E: Into<BoxError>,
{
    type Output = Result<T, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(output) = this.inner.poll(cx) {
            return Poll::Ready(output.map_err(Into::into));
        }
        while let Some(sleep) = this.sleep.as_mut() {
            if sleep.as_mut().poll(cx).is_pending() {
                break;
            }
            let Some(lifecycle) = this.lifecycle else {
                return Poll::Ready(Err(Box::new(Cancelled::new(CancelReason::Timeout))));
            };
            // Progress may have pushed the deadline back since the timer was set: sleep on.
            match lifecycle.deadline() {
                Some(deadline) if deadline > sleep.deadline() => sleep.as_mut().reset(deadline),
                _ => {
                    tracing::debug!(id = %lifecycle.id(), "request timed out");
                    lifecycle.cancel(CancelReason::Timeout);
                    // The cancel layer above settles the request: it drops this future (abort), or lets the
                    // handler wind down within its grace period (cooperative), so the inner future is still
                    // polled until then.
                    *this.sleep = None;
                }
            }
        }
        Poll::Pending
    }
}
