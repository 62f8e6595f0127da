//! Turn every outcome into the dialect's wire reply.
//!
//! [`ErrorMapLayer`] is the outermost layer of the stack. Its service answers each request with exactly one
//! `Option<`[`Response`]`>`, and never fails:
//!
//! | outcome of the inner service | reply |
//! |---|---|
//! | `Ok(value)` | `{"result": value}` |
//! | [`Cancelled`] | the dialect's cancelled reply: -32800 (LSP, ACP), or nothing at all (MCP) |
//! | an [`ErrorObject`] | that error object, as it is |
//! | [`DuplicateId`] | -32600 |
//! | [`Panicked`] | -32603 `handler panicked`, the panic message logged, not sent |
//! | [`Unavailable`], or the inner service failing readiness | -32603 `service unavailable`, the error logged |
//! | any other error | -32603 with the error's text |
//!
//! Notifications are never answered; their errors are logged. The dialect is the request's scope's, where its
//! scope speaks one ([`Scope::with_dialect`](crate::Scope::with_dialect)), else the layer's own.
//!
//! The outcome itself (which of a completion, a cancel, a timeout, a panic counts) is decided by the
//! [`CancelLayer`](crate::CancelLayer) below, which also catches the handler's panics; this layer only renders it.
//! Without a cancel layer, a panic goes on to the transport (whose safety net answers it the same way) and
//! tower's `Elapsed` is an ordinary error.
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
    task::{Context, Poll},
};

use serde_json::Value;
use tower_service::Service;

pub(crate) use self::future::Subject;
pub use self::{future::ResponseFuture, layer::ErrorMapLayer};

use crate::{
    dialect::{CancelledReply, Dialect},
    message::{ErrorObject, Id, Response},
    outcome::{BoxError, Panicked, Unavailable},
    reason::{CancelReason, Cancelled},
    registry::DuplicateId,
    request::Request,
    unwind::Payload,
};

/// The service built by [`ErrorMapLayer`].
#[derive(Debug)]
pub struct ErrorMap<S, D> {
    inner: S,
    dialect: D,
    // Set when the inner service failed readiness: the next call is answered with it, without calling inner.
    not_ready: Option<BoxError>,
}

// By hand: a clone must not inherit a readiness failure that this service saw.
impl<S: Clone, D: Clone> Clone for ErrorMap<S, D> {
    fn clone(&self) -> Self {
        Self::new(self.inner.clone(), self.dialect.clone())
    }
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
    D: Dialect + Clone,
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
                self.not_ready = Some(error.into());
                Poll::Ready(Ok(()))
            }
        }
    }

    fn call(&mut self, req: Request) -> Self::Future {
        let (subject, spoken) = Subject::of(&req, &self.dialect);
        let spoken = spoken.cloned();
        if let Some(error) = self.not_ready.take() {
            let error: BoxError = Box::new(Unavailable::new(error));
            return ResponseFuture::failed(error, subject, spoken, self.dialect.clone());
        }
        ResponseFuture::new(self.inner.call(req), subject, spoken, self.dialect.clone())
    }
}

/// The reply for `outcome` of request `id`, or `None` where the dialect sends none. The dialect is read for a
/// [`Cancelled`] outcome alone (the presets' future hands in the scope's dialect for those only).
pub(crate) fn render<D: Dialect + ?Sized>(
    id: Id,
    outcome: Result<Value, BoxError>,
    server_cancellable: bool,
    answers_group: bool,
    dialect: &D,
) -> Option<Response> {
    let error = match outcome {
        Ok(value) => return Some(Response::ok(id, value)),
        Err(error) => error,
    };
    if let Some(cancelled) = error.downcast_ref::<Cancelled>() {
        if cancelled.was_announced() {
            tracing::debug!(%id, reason = %cancelled.reason(), "the request's end was announced: no reply");
            return None;
        }
        if let (true, CancelReason::Group { .. }) = (answers_group, cancelled.reason()) {
            return Some(Response::ok(
                id,
                dialect.group_cancelled_result(cancelled.reason()),
            ));
        }
        return match dialect.cancelled_reply(cancelled.reason(), server_cancellable) {
            CancelledReply::Error(object) => Some(Response::error(Some(id), object)),
            CancelledReply::Nothing => {
                tracing::debug!(%id, reason = %cancelled.reason(), "cancelled request gets no reply");
                None
            }
        };
    }
    log_failure(&id, &error);
    Some(Response::error(Some(id), error_object(&*error)))
}

/// The failure a transport answers for a panic it caught in a service without a cancel layer (through the one
/// safety net, [`unwind`](crate::unwind)): [`Panicked`], answered -32603 `handler panicked` by
/// [`error_object`]; its message goes to the server's log only, here.
pub fn caught_panic(payload: Payload) -> BoxError {
    let panicked = Panicked::from_payload(&*payload);
    tracing::error!("{panicked}");
    Box::new(panicked)
}

/// The error object that answers `error`, a failure that is not a cancellation (see the table in the
/// [module docs](self)). Transports use it for the failures they answer themselves (a service without this layer
/// that fails readiness or panics), so that every failure is answered the same way.
pub fn error_object(error: &(dyn std::error::Error + Send + Sync + 'static)) -> ErrorObject {
    if let Some(object) = error.downcast_ref::<ErrorObject>() {
        object.clone()
    } else if let Some(duplicate) = error.downcast_ref::<DuplicateId>() {
        ErrorObject::invalid_request(duplicate)
    } else if error.is::<Panicked>() {
        // The panic message stays in the server's log: it may say things about the server the peer should not see.
        ErrorObject::internal_error("handler panicked")
    } else {
        // `Unavailable` says only "service unavailable"; its source stays in the log.
        ErrorObject::internal_error(error)
    }
}

fn log_failure(id: &Id, error: &BoxError) {
    if let Some(panicked) = error.downcast_ref::<Panicked>() {
        tracing::error!(%id, "{panicked}");
    } else if let Some(unavailable) = error.downcast_ref::<Unavailable>() {
        let source = std::error::Error::source(unavailable).map(ToString::to_string);
        tracing::error!(%id, error = source.as_deref(), "service unavailable");
    } else {
        tracing::debug!(%id, %error, "handler failed");
    }
}
