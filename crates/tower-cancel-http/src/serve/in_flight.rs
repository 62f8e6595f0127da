//! The service hyper calls for each request of a connection: the user's, with the request counted in flight on
//! its connection until its response's body is done with (an SSE stream's whole life), and the client's address
//! in its extensions as axum's [`ConnectInfo`].

use std::{
    convert::Infallible,
    future::Future,
    pin::Pin,
    sync::Arc,
    task::{ready, Context, Poll},
};

use axum::{
    body::{Body, Bytes, HttpBody},
    extract::{ConnectInfo, Request},
    response::Response,
};
use http::{Method, StatusCode};
use hyper::body::{Frame, Incoming, SizeHint};
use pin_project_lite::pin_project;
use tower::{util::Oneshot, ServiceExt};
use tower_service::Service;

use super::entry::{Entry, RequestGuard};

#[derive(Debug)]
pub(super) struct InFlight<S, A> {
    service: S,
    entry: Arc<Entry>,
    remote: A,
}

impl<S, A> InFlight<S, A> {
    pub(super) fn new(service: S, entry: Arc<Entry>, remote: A) -> Self {
        Self {
            service,
            entry,
            remote,
        }
    }
}

impl<S, A> hyper::service::Service<http::Request<Incoming>> for InFlight<S, A>
where
    S: Service<Request, Response = Response, Error = Infallible> + Clone,
    A: Clone + Send + Sync + 'static,
{
    type Response = http::Response<Counted>;
    type Error = Infallible;
    type Future = Respond<S>;

    fn call(&self, request: http::Request<Incoming>) -> Self::Future {
        let guard = self.entry.begin_request();
        // HTTP/2's extended CONNECT: a WebSocket on a stream of the connection.
        let connect = request.method() == Method::CONNECT;
        let mut request = request.map(Body::new);
        request
            .extensions_mut()
            .insert(ConnectInfo(self.remote.clone()));
        Respond {
            response: self.service.clone().oneshot(request),
            guard: Some(guard),
            connect,
        }
    }
}

pin_project! {
    /// The user's response, its body counted.
    pub(super) struct Respond<S>
    where
        S: Service<Request>,
    {
        #[pin]
        response: Oneshot<S, Request>,
        guard: Option<RequestGuard>,
        connect: bool,
    }
}

impl<S> Future for Respond<S>
where
    S: Service<Request, Response = Response, Error = Infallible>,
{
    type Output = Result<http::Response<Counted>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let response = ready!(this.response.poll(cx))?;
        let guard = this.guard.take().expect("polled after it was ready");
        let upgraded = response.status() == StatusCode::SWITCHING_PROTOCOLS
            || (*this.connect && response.status().is_success());
        if upgraded {
            guard.entry().hold();
        }
        Poll::Ready(Ok(response.map(|body| Counted {
            body,
            _guard: guard,
        })))
    }
}

/// A response's body, its request in flight until hyper drops it.
#[derive(Debug)]
pub(super) struct Counted {
    body: Body,
    _guard: RequestGuard,
}

impl HttpBody for Counted {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
