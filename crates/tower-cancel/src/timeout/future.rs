use std::{
    fmt,
    future::Future,
    pin::Pin,
    task::{Context, Poll},
};

use pin_project_lite::pin_project;
use tokio::time::Sleep;
use tower_service::Service;

use super::expiry::{Registration, Unplaced};
use crate::{
    context::RequestContext,
    dispatch::Dispatch,
    outcome::BoxError,
    reason::{CancelReason, Cancelled},
    request::Request,
};

pin_project! {
    /// Response future of [`Timeout`](super::Timeout).
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
        // The layer has no rule for any request: the inner service's future as it is.
        Direct { #[pin] future: S::Future },
        // Boxed, in one allocation with its timer: inline, a timed request's state (the request waiting for
        // readiness, the timer, the context) would make every future of this type that large, those of a layer
        // without rules (the stack's default) included, and they would carry the room for nothing.
        Timed { timed: Pin<Box<Timed<S>>> },
    }
}

pin_project! {
    struct Timed<S>
    where
        S: Service<Request>,
    {
        #[pin]
        dispatch: Dispatch<S>,
        // `None` for a request that got no deadline (a notification, a request that cannot be cancelled).
        #[pin]
        sleep: Option<Sleep>,
        // The request's context, when a cancel layer above gave it one: expiry cancels it, so the cancel layer
        // settles the request like any other cancel. Without one, expiry ends this future itself.
        context: Option<RequestContext>,
        // Instead of the timer, for a request its cancel layer can cancel: the layer's queue of deadlines, whose
        // task cancels it at the deadline (see `expiry`), so that there is no timer here to poll. The request goes
        // on the queue when this future first waits; its place there is dropped with this future.
        watch: Watch,
    }
}

enum Watch {
    None,
    Unplaced(Unplaced),
    // Held for its drop, which takes the request off the queue.
    Placed(Registration),
}

impl<S: Service<Request>> ResponseFuture<S> {
    pub(crate) fn direct(future: S::Future) -> Self {
        Self {
            kind: Kind::Direct { future },
        }
    }

    pub(crate) fn new(
        service: S,
        request: Request,
        sleep: Option<Sleep>,
        context: Option<RequestContext>,
    ) -> Self {
        Self::timed(Timed {
            dispatch: Dispatch::new(service, request),
            sleep,
            context,
            watch: Watch::None,
        })
    }

    pub(crate) fn watched(
        service: S,
        request: Request,
        deadline: Unplaced,
        context: RequestContext,
    ) -> Self {
        Self::timed(Timed {
            dispatch: Dispatch::new(service, request),
            sleep: None,
            context: Some(context),
            watch: Watch::Unplaced(deadline),
        })
    }

    fn timed(timed: Timed<S>) -> Self {
        Self {
            kind: Kind::Timed {
                timed: Box::pin(timed),
            },
        }
    }
}

impl<S: Service<Request>> fmt::Debug for ResponseFuture<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut debug = f.debug_struct("ResponseFuture");
        if let Kind::Timed { timed } = &self.kind {
            debug
                .field("deadline", &timed.sleep.as_ref().map(Sleep::deadline))
                .field("watched", &!matches!(timed.watch, Watch::None))
                .field("waiting", &timed.dispatch.is_waiting());
        }
        debug.finish()
    }
}

impl<S> Future for ResponseFuture<S>
where
    S: Service<Request>,
    S::Error: Into<BoxError>,
{
    type Output = Result<S::Response, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let timed = match self.project().kind.project() {
            KindProj::Direct { future } => return future.poll(cx).map_err(Into::into),
            KindProj::Timed { timed } => timed.as_mut().project(),
        };
        let (mut dispatch, mut sleep, context, watch) =
            (timed.dispatch, timed.sleep, timed.context, timed.watch);
        loop {
            // A request cancelled while it waits for readiness (its deadline passed, or any other source) is never
            // called: its handler does not exist yet, so there is nothing to wind down, whatever the mode.
            let waiting = dispatch.waiting_request();
            if let Some(reason) = waiting
                .and_then(Request::context)
                .and_then(RequestContext::reason)
            {
                return Poll::Ready(Err(Box::new(Cancelled::new(reason))));
            }
            if let Poll::Ready(output) = dispatch.as_mut().poll(cx) {
                return Poll::Ready(output);
            }
            match std::mem::replace(watch, Watch::None) {
                Watch::None => {}
                Watch::Placed(placed) => {
                    *watch = Watch::Placed(placed);
                    return Poll::Pending;
                }
                Watch::Unplaced(deadline) => {
                    let at = deadline.at();
                    match context
                        .as_ref()
                        .and_then(|context| deadline.place(context.lifecycle()))
                    {
                        Some(placed) => {
                            *watch = Watch::Placed(placed);
                            return Poll::Pending;
                        }
                        // Polled outside a tokio runtime: no task can watch the queue, so a timer of its own
                        // (which needs a runtime as much, and says so).
                        None => sleep.set(Some(tokio::time::sleep_until(at))),
                    }
                }
            }
            let Some(mut timer) = sleep.as_mut().as_pin_mut() else {
                return Poll::Pending;
            };
            if timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            let Some(context) = context else {
                return Poll::Ready(Err(Box::new(Cancelled::new(CancelReason::Timeout))));
            };
            // Progress may have pushed the deadline back since the timer was set: sleep on.
            match context.deadline() {
                Some(deadline) if deadline > timer.deadline() => timer.as_mut().reset(deadline),
                _ => {
                    tracing::debug!(id = %context.id(), "request timed out");
                    context.cancel_with(CancelReason::Timeout);
                    sleep.set(None);
                    // A request still waiting for readiness ends at the top of the loop. A running one is the
                    // cancel layer's to settle, woken by the cancel: it drops this future (abort), or lets the
                    // handler wind down within its grace period (cooperative), polling it again until then.
                    if !dispatch.is_waiting() {
                        return Poll::Pending;
                    }
                }
            }
        }
    }
}
