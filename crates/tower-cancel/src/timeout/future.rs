use std::{
    fmt,
    future::Future,
    pin::Pin,
    task::{Context, Poll},
};

use pin_project_lite::pin_project;
use tokio::time::Sleep;
use tower_service::Service;

use crate::{
    cancel::Cancelled, context::CancelReason, dispatch::Dispatch, message::Request, BoxError,
    RequestContext,
};

pin_project! {
    /// Response future of [`Timeout`](super::Timeout).
    pub struct ResponseFuture<S>
    where
        S: Service<Request>,
    {
        #[pin]
        dispatch: Dispatch<S>,
        // Boxed: a timer is large (over 100 bytes), and a request without a timeout should not carry room for one.
        sleep: Option<Pin<Box<Sleep>>>,
        // The request's context, when a cancel layer above gave it one: expiry cancels it, so the cancel layer
        // settles the request like any other cancel. Without one, expiry ends this future itself.
        context: Option<RequestContext>,
    }
}

impl<S: Service<Request>> ResponseFuture<S> {
    pub(crate) fn new(
        service: S,
        request: Request,
        sleep: Option<Sleep>,
        context: Option<RequestContext>,
    ) -> Self {
        Self {
            dispatch: Dispatch::new(service, request),
            sleep: sleep.map(Box::pin),
            context,
        }
    }
}

impl<S: Service<Request>> fmt::Debug for ResponseFuture<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("deadline", &self.sleep.as_ref().map(|s| s.deadline()))
            .field("waiting", &self.dispatch.is_waiting())
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
        let mut this = self.project();
        loop {
            // A request cancelled while it waits for readiness (its deadline passed, or any other source) is never
            // called: its handler does not exist yet, so there is nothing to wind down, whatever the mode.
            let waiting = this.dispatch.waiting_request();
            if let Some(reason) = waiting
                .and_then(Request::context)
                .and_then(RequestContext::reason)
            {
                return Poll::Ready(Err(Box::new(Cancelled::new(reason))));
            }
            if let Poll::Ready(output) = this.dispatch.as_mut().poll(cx) {
                return Poll::Ready(output);
            }
            let Some(sleep) = this.sleep.as_mut() else {
                return Poll::Pending;
            };
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            let Some(context) = this.context else {
                return Poll::Ready(Err(Box::new(Cancelled::new(CancelReason::Timeout))));
            };
            // Progress may have pushed the deadline back since the timer was set: sleep on.
            match context.deadline() {
                Some(deadline) if deadline > sleep.deadline() => sleep.as_mut().reset(deadline),
                _ => {
                    tracing::debug!(id = %context.id(), "request timed out");
                    context.cancel_with(CancelReason::Timeout);
                    *this.sleep = None;
                    // A request still waiting for readiness ends at the top of the loop. A running one is the
                    // cancel layer's to settle, woken by the cancel: it drops this future (abort), or lets the
                    // handler wind down within its grace period (cooperative), polling it again until then.
                    if !this.dispatch.is_waiting() {
                        return Poll::Pending;
                    }
                }
            }
        }
    }
}
