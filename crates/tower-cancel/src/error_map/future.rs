use std::{
    fmt,
    future::Future,
    panic::AssertUnwindSafe,
    pin::Pin,
    task::{ready, Context, Poll},
};

use futures_util::FutureExt;
use pin_project_lite::pin_project;
use serde_json::Value;

use super::render;
use crate::{
    dialect::Dialect,
    message::{ErrorObject, Id, Response},
    BoxError,
};

pin_project! {
    /// Response future of [`ErrorMap`](super::ErrorMap).
    pub struct ResponseFuture<F, D> {
        #[pin]
        inner: Option<futures_util::future::CatchUnwind<AssertUnwindSafe<F>>>,
        failed: Option<String>,
        id: Option<Id>,
        server_cancellable: bool,
        method: Option<String>,
        dialect: D,
    }
}

impl<F: Future, D> ResponseFuture<F, D> {
    pub(crate) fn new(
        inner: Option<F>,
        id: Option<Id>,
        server_cancellable: bool,
        method: Option<String>,
        dialect: D,
    ) -> Self {
        Self {
            inner: inner.map(|f| AssertUnwindSafe(f).catch_unwind()),
            failed: None,
            id,
            server_cancellable,
            method,
            dialect,
        }
    }
}

impl<F: Future, D> ResponseFuture<F, D> {
    pub(crate) fn failed(
        error: String,
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
            Some(inner) => match ready!(inner.poll(cx)) {
                Ok(result) => result.map(Into::into).map_err(Into::into),
                Err(panic) => Err(panicked(panic)),
            },
            None => match this.failed.take() {
                Some(error) => Err(error.into()),
                // `call` itself panicked.
                None => Err(Box::new(HandlerPanicked(None)) as BoxError),
            },
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

fn panicked(panic: Box<dyn std::any::Any + Send>) -> BoxError {
    let message = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned());
    Box::new(HandlerPanicked(message))
}

/// The handler panicked; answered with -32603.
#[derive(Debug)]
pub(crate) struct HandlerPanicked(pub(crate) Option<String>);

impl fmt::Display for HandlerPanicked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Some(message) => write!(f, "handler panicked: {message}"),
            None => f.write_str("handler panicked"),
        }
    }
}

impl std::error::Error for HandlerPanicked {}

impl From<&HandlerPanicked> for ErrorObject {
    fn from(_: &HandlerPanicked) -> Self {
        // The panic message stays in the server's log: it may say things about the server the peer should not see.
        ErrorObject::internal_error("handler panicked")
    }
}
