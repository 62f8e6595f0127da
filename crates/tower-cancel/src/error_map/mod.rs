//! Turn every outcome into the dialect's wire reply.
//!
//! [`ErrorMapLayer`] is the outermost layer of the stack. Its service answers each request with exactly one
//! `Option<`[`Response`]`>`, and never fails:
//!
//! | outcome of the inner service | reply |
//! |---|---|
//! | `Ok(value)` | `{"result": value}` |
//! | [`Cancelled`] | the dialect's cancelled reply: -32800 (LSP, ACP), or nothing at all (MCP) |
//! | tower's `Elapsed` | the same, for reason Timeout |
//! | an [`ErrorObject`] | that error object, as it is |
//! | [`DuplicateId`] | -32600 |
//! | a panic (in `call` or in the future) | -32603, the panic message logged, not sent |
//! | any other error | -32603 with the error's text |
//!
//! Notifications are never answered; their errors are logged.
//!
//! # Example
//!
//! ```
//! use tower::{service_fn, ServiceBuilder, ServiceExt};
//! use tower_cancel::{dialect::Lsp, ErrorMapLayer, ErrorObject, Request};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let service = ServiceBuilder::new()
//!     .layer(ErrorMapLayer::new(Lsp))
//!     .service(service_fn(|req: Request| async move {
//!         Err::<serde_json::Value, _>(ErrorObject::method_not_found(req.method()))
//!     }));
//! let reply = service.oneshot(Request::new(3, "nope", ())).await.unwrap().unwrap();
//! assert_eq!(reply.outcome.unwrap_err().code, -32601);
//! # }
//! ```

mod future;
mod layer;

use std::{
    convert::Infallible,
    panic::AssertUnwindSafe,
    task::{Context, Poll},
};

use serde_json::Value;
use tower_service::Service;

pub use self::{future::ResponseFuture, layer::ErrorMapLayer};
use tower::timeout::error::Elapsed;

use crate::{
    cancel::Cancelled,
    context::CancelReason,
    dialect::{CancelledReply, Dialect},
    message::{ErrorObject, Id, Request, Response},
    registry::DuplicateId,
    BoxError,
};
use future::HandlerPanicked;

/// The service built by [`ErrorMapLayer`].
#[derive(Clone, Debug)]
pub struct ErrorMap<S, D> {
    inner: S,
    dialect: D,
    // Set when the inner service failed readiness: the next call is answered with it, without calling inner.
    not_ready: Option<String>,
}

impl<S, D> ErrorMap<S, D> {
    pub(crate) fn new(inner: S, dialect: D) -> Self {
        Self {
            inner,
            dialect,
            not_ready: None,
        }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Consume this, giving the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, D> Service<Request> for ErrorMap<S, D>
where
    S: Service<Request>,
    S::Response: Into<Value>,
    S::Error: Into<BoxError>,
    D: Dialect,
{
    type Response = Option<Response>;
    type Error = Infallible;
    type Future = ResponseFuture<S::Future, D>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // There is no reply to give for a readiness failure yet (no request has been handed over), so report
        // ready and answer the next call with the failure, without calling the inner service.
        match self.inner.poll_ready(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(())) => Poll::Ready(Ok(())),
            Poll::Ready(Err(error)) => {
                self.not_ready = Some(error.into().to_string());
                Poll::Ready(Ok(()))
            }
        }
    }

    fn call(&mut self, req: Request) -> Self::Future {
        let id = req.id().cloned();
        // The method is only kept for notifications, whose failures are logged (requests' failures are answered).
        let method = id.is_none().then(|| req.method().to_owned());
        if let Some(error) = self.not_ready.take() {
            return ResponseFuture::failed(error, id, method, self.dialect.clone());
        }
        let server_cancellable = id.is_some() && self.dialect.is_server_cancellable(req.method());
        let inner = std::panic::catch_unwind(AssertUnwindSafe(|| self.inner.call(req))).ok();
        ResponseFuture::new(inner, id, server_cancellable, method, self.dialect.clone())
    }
}

/// The reply for `outcome` of request `id`, or `None` where the dialect sends none.
pub(crate) fn render<D: Dialect>(
    id: Id,
    outcome: Result<Value, BoxError>,
    server_cancellable: bool,
    dialect: &D,
) -> Option<Response> {
    let error = match outcome {
        Ok(value) => return Some(Response::ok(id, value)),
        Err(error) => error,
    };
    // tower's timeout layer without a cancel layer around it: the same Timeout cancellation.
    let timed_out = Cancelled::new(CancelReason::Timeout);
    let cancelled = match error.downcast_ref::<Cancelled>() {
        Some(cancelled) => Some(cancelled),
        None if error.is::<Elapsed>() => Some(&timed_out),
        None => None,
    };
    if let Some(cancelled) = cancelled {
        return match dialect.cancelled_reply(cancelled.reason(), server_cancellable) {
            CancelledReply::Error(object) => Some(Response::error(Some(id), object)),
            CancelledReply::Nothing => {
                tracing::debug!(%id, reason = %cancelled.reason(), "cancelled request gets no reply");
                None
            }
        };
    }
    let object = if let Some(object) = error.downcast_ref::<ErrorObject>() {
        object.clone()
    } else if let Some(duplicate) = error.downcast_ref::<DuplicateId>() {
        ErrorObject::invalid_request(duplicate)
    } else if let Some(panicked) = error.downcast_ref::<HandlerPanicked>() {
        tracing::error!(%id, "{panicked}");
        ErrorObject::from(panicked)
    } else {
        tracing::debug!(%id, %error, "handler failed");
        ErrorObject::internal_error(&error)
    };
    Some(Response::error(Some(id), object))
}
