use std::{
    fmt,
    future::Future,
    pin::Pin,
    task::{ready, Context, Poll},
};

use pin_project_lite::pin_project;
use serde_json::Value;

use super::render;
use crate::{
    message::{Id, Response},
    BoxError, Dialect,
};

pin_project! {
    /// Response future of [`ErrorMap`](super::ErrorMap).
    pub struct ResponseFuture<F, D> {
        #[pin]
        inner: Option<F>,
        failed: Option<BoxError>,
        id: Option<Id>,
        server_cancellable: bool,
        method: Option<String>,
        dialect: D,
    }
}

impl<F: Future, D> ResponseFuture<F, D> {
    pub(crate) fn new(
        inner: F,
        id: Option<Id>,
        server_cancellable: bool,
        method: Option<String>,
        dialect: D,
    ) -> Self {
        Self {
            inner: Some(inner),
            failed: None,
            id,
            server_cancellable,
            method,
            dialect,
        }
    }

    pub(crate) fn failed(
        error: BoxError,
        id: Option<Id>,
        method: Option<String>,
        dialect: D,
    ) -> Self {
        Self {
            inner: None,
            failed: Some(error),
            id,
            server_cancellable: false,
            method,
            dialect,
        }
    }
}

impl<F, D> fmt::Debug for ResponseFuture<F, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("id", &self.id)
            .finish()
    }
}

impl<F, D, T, E> Future for ResponseFuture<F, D>
where
    F: Future<Output = Result<T, E>>,
    T: Into<Value>,
    E: Into<BoxError>,
    D: Dialect,
{
    type Output = Result<Option<Response>, std::convert::Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let outcome = match this.inner.as_pin_mut() {
            Some(inner) => ready!(inner.poll(cx)).map(Into::into).map_err(Into::into),
            None => Err(this.failed.take().expect("polled after completion")),
        };
        let Some(id) = this.id.take() else {
            if let Err(error) = outcome {
                tracing::warn!(method = this.method.as_deref(), %error, "notification handler failed");
            }
            return Poll::Ready(Ok(None));
        };
        Poll::Ready(Ok(render(
            id,
            outcome,
            *this.server_cancellable,
            this.dialect,
        )))
    }
}
