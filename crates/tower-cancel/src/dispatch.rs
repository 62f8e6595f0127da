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
    outcome::{BoxError, Unavailable},
    request::Request,
};

pin_project! {
    #[project = DispatchProj]
    pub(crate) enum Dispatch<S>
    where
        S: Service<Request>,
    {
        Waiting { service: S, request: Option<Request> },
        Called { #[pin] future: S::Future },
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

    /// Whether the request still waits for the service's readiness: its handler was never called.
    pub(crate) fn is_waiting(&self) -> bool {
        matches!(self, Dispatch::Waiting { .. })
    }

    /// Whether the handler's future is gone: it answered, or it was dropped.
    pub(crate) fn is_done(&self) -> bool {
        matches!(self, Dispatch::Done)
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
                DispatchProj::Done => panic!("polled after completion"),
            }
        }
    }
}
