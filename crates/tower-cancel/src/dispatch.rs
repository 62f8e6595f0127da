//! Readiness, then the call: [`tower::util::Oneshot`], but with its state in view, so that a layer can tell a
//! request still queued behind backpressure (no handler exists yet) from one whose handler runs.

use std::{
    future::Future,
    pin::Pin,
    task::{ready, Context, Poll},
};

use pin_project_lite::pin_project;
use tower_service::Service;

use crate::{
    outcome::{BoxError, Panicked, Unavailable},
    request::Request,
    unwind,
};

pin_project! {
    #[project = DispatchProj]
    pub(crate) enum Dispatch<S>
    where
        S: Service<Request>,
    {
        Waiting { service: S, request: Option<Request> },
        Called { #[pin] future: S::Future },
        // Readiness failed, or the service's `call` panicked, before the request's future was first polled
        // (`start`): that is its outcome, handed out on the first poll.
        Failed { error: Option<BoxError> },
        Done,
    }
}

impl<S: Service<Request>> Dispatch<S> {
    pub(crate) fn new(service: S, request: Request) -> Self {
        Dispatch::Waiting {
            service,
            request: Some(request),
        }
    }

    /// The service called at once if it is ready now, else as [`new`](Self::new): a request whose service is
    /// ready (no backpressure) is handed to it here, not parked in its future until the first poll. Readiness is
    /// asked with a waker that does nothing: a service that is not ready is asked again by the request's future,
    /// with its own, and the request waits there (where its cancel still reaches it) as every request did before.
    /// A failed readiness ([`Unavailable`]) or a panic in the service's `call` ([`Panicked`]) is the outcome the
    /// first poll gives.
    pub(crate) fn start(mut service: S, request: Request) -> Self
    where
        S::Error: Into<BoxError>,
    {
        let mut cx = Context::from_waker(futures_util::task::noop_waker_ref());
        let ready = match unwind::call(|| service.poll_ready(&mut cx)) {
            Ok(ready) => ready,
            Err(payload) => return Self::failed(Box::new(Panicked::from_payload(&*payload))),
        };
        match ready {
            Poll::Ready(Ok(())) => match unwind::call(|| service.call(request)) {
                Ok(future) => Dispatch::Called { future },
                Err(payload) => Self::failed(Box::new(Panicked::from_payload(&*payload))),
            },
            Poll::Ready(Err(error)) => Self::failed(Box::new(Unavailable::new(error.into()))),
            Poll::Pending => Self::new(service, request),
        }
    }

    fn failed(error: BoxError) -> Self {
        Dispatch::Failed { error: Some(error) }
    }

    /// Whether the request still waits for the service's readiness: its handler was never called.
    pub(crate) fn is_waiting(&self) -> bool {
        matches!(self, Dispatch::Waiting { .. })
    }

    /// The request, while it waits for the service's readiness.
    pub(crate) fn waiting_request(&self) -> Option<&Request> {
        match self {
            Dispatch::Waiting { request, .. } => request.as_ref(),
            _ => None,
        }
    }

    /// Wait for readiness, call the service, then drive its future. A readiness failure is the request's
    /// outcome: [`Unavailable`] (the one policy for a service that fails readiness, whichever layer sees it).
    pub(crate) fn poll(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<S::Response, BoxError>>
    where
        S::Error: Into<BoxError>,
    {
        loop {
            match self.as_mut().project() {
                DispatchProj::Waiting { service, request } => {
                    if let Err(error) = ready!(service.poll_ready(cx)) {
                        self.set(Dispatch::Done);
                        return Poll::Ready(Err(Box::new(Unavailable::new(error.into()))));
                    }
                    let request = request.take().expect("called once");
                    let future = service.call(request);
                    self.set(Dispatch::Called { future });
                }
                DispatchProj::Called { future } => {
                    let output = ready!(future.poll(cx));
                    return Poll::Ready(output.map_err(Into::into));
                }
                DispatchProj::Failed { error } => {
                    let error = error.take().expect("polled after completion");
                    self.set(Dispatch::Done);
                    return Poll::Ready(Err(error));
                }
                DispatchProj::Done => panic!("polled after completion"),
            }
        }
    }
}
