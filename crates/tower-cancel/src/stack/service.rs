use std::{
    convert::Infallible,
    fmt,
    future::Future,
    pin::Pin,
    task::{Context, Poll},
};

use pin_project_lite::pin_project;
use serde_json::Value;
use tower_service::Service;

use crate::{
    cancel::{self, Cancel},
    cascade::Cascade,
    dialect::Dialect,
    error_map::Subject,
    message::Response,
    outcome::BoxError,
    registry::Registry,
    request::Request,
    timeout::Timeout,
};

/// The service built by [`CancelStack`](super::CancelStack): the four layers in one.
///
/// It answers as an [`ErrorMap`](crate::error_map::ErrorMap) over a [`Cancel`] over a [`Timeout`] over a
/// [`Cascade`] would, reply for reply, without the error map's future: the cancel layer's future renders the reply
/// as the request settles, in the dialect of the request's scope, read from the request's own registration (the
/// error map's future kept a clone of the request's connection for it).
#[derive(Clone)]
pub struct Stacked<S, D> {
    inner: Cancel<Timeout<Cascade<S>>, D>,
}

impl<S, D> Stacked<S, D> {
    pub(super) fn new(inner: Cancel<Timeout<Cascade<S>>, D>) -> Self {
        Self { inner }
    }

    /// The registry of requests that arrive without a connection (see
    /// [`CancelStack::registry`](super::CancelStack::registry)).
    pub fn registry(&self) -> &Registry {
        self.inner.registry()
    }

    /// The service the stack wraps.
    pub fn get_ref(&self) -> &S {
        self.inner.get_ref().get_ref().get_ref()
    }

    /// The service the stack wraps, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        self.inner.get_mut().get_mut().get_mut()
    }

    /// Consume this, giving the service the stack wraps.
    pub fn into_inner(self) -> S {
        self.inner.into_inner().into_inner().into_inner()
    }
}

impl<S: fmt::Debug, D: fmt::Debug> fmt::Debug for Stacked<S, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stacked")
            .field("inner", &self.inner)
            .finish()
    }
}

impl<S, D> Service<Request> for Stacked<S, D>
where
    S: Service<Request> + Clone,
    S::Response: Into<Value> + Default,
    S::Error: Into<BoxError>,
    D: Dialect + Clone,
{
    type Response = Option<Response>;
    type Error = Infallible;
    type Future = ResponseFuture<Timeout<Cascade<S>>, D>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // The cancel layer is always ready (each request waits for the inner service's readiness in its own
        // future), so there is never a readiness failure to answer here: the error map's answer to one is not
        // needed. Checked, in case that ever changes.
        debug_assert!(matches!(self.inner.poll_ready(cx), Poll::Ready(Ok(()))));
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request) -> Self::Future {
        // The dialect of the request's scope is read from its registration as it settles: no clone of its
        // connection is kept for it.
        let (subject, _) = Subject::of(&req, self.inner.dialect());
        let dialect = self.inner.dialect().clone();
        ResponseFuture {
            inner: self.inner.call(req),
            subject,
            dialect,
        }
    }
}

pin_project! {
    /// Response future of [`Stacked`]. `S` is the service under the cancel layer (the timeout layer's).
    pub struct ResponseFuture<S, D>
    where
        S: Service<Request>,
    {
        #[pin]
        inner: cancel::ResponseFuture<S>,
        subject: Subject,
        dialect: D,
    }
}

impl<S: Service<Request>, D> fmt::Debug for ResponseFuture<S, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("inner", &self.inner)
            .field("subject", &self.subject)
            .finish()
    }
}

impl<S, D> Future for ResponseFuture<S, D>
where
    S: Service<Request>,
    S::Response: Into<Value>,
    S::Error: Into<BoxError>,
    D: Dialect,
{
    type Output = Result<Option<Response>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let (subject, dialect) = (this.subject, &*this.dialect);
        this.inner.poll_replying::<true, _>(cx, |outcome, spoken| {
            Ok(subject.answer(outcome.map(Into::into), spoken, dialect))
        })
    }
}
