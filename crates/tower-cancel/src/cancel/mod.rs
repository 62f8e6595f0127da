//! Make requests cancellable.
//!
//! [`CancelLayer`] sits near the top of the stack (just inside [`ErrorMapLayer`](crate::ErrorMapLayer)):
//!
//! - It reads each message in the dialect of the request's scope ([`Scope::with_dialect`](crate::Scope::with_dialect),
//!   the dialect its transport's peer speaks), or in its own where the scope speaks none: a stack and its
//!   transport cannot disagree.
//! - It consumes the dialect's cancel notifications: a cancel for an in-flight request of the same scope cancels
//!   it with [`CancelReason::Peer`](crate::CancelReason::Peer); a cancel for an unknown id is remembered for a
//!   while (the request may still be on its way); a malformed cancel is ignored. Cancel notifications never reach
//!   the inner service.
//! - It registers every request in its scope's [`Registry`], through the [`Connection`] the transport tied it to
//!   ([`Request::connection`](crate::Request::connection); a request without one joins the layer's own scope), and
//!   gives the request a [`RequestContext`](crate::RequestContext) ([`Request::context`](crate::Request::context)). A second request
//!   with an id already in flight on the same connection is refused ([`DuplicateId`](crate::registry::DuplicateId)).
//! - It races the inner future against the request's cancellation (its lifecycle, which also fires the token).
//!   The first of completion and cancel to reach the request's lifecycle wins; the other is a no-op. A cancelled
//!   request resolves to a [`Cancelled`] error.
//!
//! # Outcomes
//!
//! This layer decides each request's one outcome, in one place:
//!
//! | what happened | outcome |
//! |---|---|
//! | the handler answered, before any cancel | its answer |
//! | a cancel from any source won (peer, timeout, disconnect, shutdown, parent, local) | [`Cancelled`] with that reason |
//! | tower's `Elapsed` from a timeout layer below | a Timeout cancel (for `initialize`, which cannot be cancelled, an ordinary failure) |
//! | the handler panicked (in `call` or its future) | [`Panicked`], unless a cancel won first: then the cancel |
//! | the inner service failed readiness | [`Unavailable`] for that request (the service is not called) |
//! | cooperative mode: the handler answered within its grace | its partial result or its own error, where the dialect allows partial results; else the cancel |
//!
//! # Tracing
//!
//! Each request with an id gets a DEBUG span `request` with fields `id` and `method`, entered around every poll
//! of its future (the handler's events are inside it). When the request ends, `outcome` is recorded:
//!
//! | `outcome` | when |
//! |---|---|
//! | `completed` | the handler's answer is the reply |
//! | `failed` | the handler's own error, a readiness failure ([`Unavailable`]), or tower's `Elapsed` for a request that cannot be cancelled |
//! | `panicked` | the handler panicked before any cancel |
//! | `cancelled` | a cancel won; `reason` says its source: `peer`, `timeout`, `disconnect`, `shutdown`, `parent`, `local` (the response future dropped) |
//! | `duplicate` | refused: its id was already in flight on the connection |
//! | `dropped` | a request that can never be cancelled (`initialize`) whose future was dropped before it answered |
//!
//! The span is kept with the request only when a subscriber enables it; otherwise the request keeps an empty
//! pointer-sized slot. An enabled span also gets the OpenTelemetry fields of the request's reply and status, and a
//! `cancel` event when the cancel is first seen (the crate docs' "Tracing").
//!
//! # Backpressure
//!
//! The service is always ready. A request waits for the inner service's readiness inside its own future, raced
//! against its token, so cancels are never stuck behind the requests they target: a request queued behind a
//! saturated `ConcurrencyLimit` can be cancelled, and then never runs.
//!
//! # Modes
//!
//! In [`Mode::Abort`] (the default) a cancelled handler's future is dropped at once. In [`Mode::Cooperative`] the
//! token fires and the handler may answer within a grace period: a partial result where the dialect allows one,
//! or its own error.
//!
//! # Example
//!
//! ```
//! use tower::{service_fn, ServiceBuilder, ServiceExt};
//! use tower_cancel::{dialect::Lsp, CancelLayer, Request};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let service = ServiceBuilder::new()
//!     .layer(CancelLayer::new(Lsp))
//!     .service(service_fn(|req: Request| async move {
//!         let ctx = req.context().expect("set by the cancel layer");
//!         Ok::<_, tower_cancel::BoxError>(serde_json::json!({ "id": ctx.id().to_string() }))
//!     }));
//! let reply = service.oneshot(Request::new(1, "hello", ())).await.unwrap();
//! assert_eq!(reply, serde_json::json!({ "id": "1" }));
//! # }
//! ```

mod admit;
mod future;
mod group_by;
mod layer;
mod settlement;
mod traced;

use std::{
    fmt,
    sync::Arc,
    task::{Context, Poll},
};

use tower_service::Service;

use self::admit::{admit, Admitted};
pub use self::{
    future::ResponseFuture,
    group_by::GroupBy,
    layer::{CancelLayer, Mode},
};
use crate::{
    dialect::Dialect, dispatch::Dispatch, outcome::BoxError, registry::Registry, request::Request,
    scope::Connection,
};
pub use crate::{
    outcome::{Panicked, Unavailable},
    reason::Cancelled,
};

/// The service built by [`CancelLayer`].
#[derive(Clone)]
pub struct Cancel<S, D> {
    inner: S,
    dialect: D,
    mode: Mode,
    // For requests that arrive without a connection (the layer used without a transport).
    own: Connection,
    // The dialect once more, shared, for the progress reports of every request's context.
    progress: Arc<dyn Dialect>,
    // Which param puts a request in a group at admission, if any.
    group_by: Option<GroupBy>,
}

impl<S: fmt::Debug, D: fmt::Debug> fmt::Debug for Cancel<S, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cancel")
            .field("inner", &self.inner)
            .field("dialect", &self.dialect)
            .field("mode", &self.mode)
            .field("own", &self.own)
            .finish()
    }
}

impl<S, D: Dialect + Clone> Cancel<S, D> {
    pub(crate) fn new(inner: S, dialect: D, mode: Mode, own: Connection) -> Self {
        Self {
            inner,
            progress: Arc::new(dialect.clone()),
            dialect,
            mode,
            own,
            group_by: None,
        }
    }

    pub(crate) fn grouping(mut self, group_by: Option<GroupBy>) -> Self {
        self.group_by = group_by;
        self
    }
}

impl<S, D> Cancel<S, D> {
    /// The layer's own dialect (the stand-in for a scope that speaks none).
    pub(crate) fn dialect(&self) -> &D {
        &self.dialect
    }

    /// The registry of requests that arrive without a connection.
    pub fn registry(&self) -> &Registry {
        self.own.registry()
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

impl<S, D> Service<Request> for Cancel<S, D>
where
    S: Service<Request> + Clone,
    S::Error: Into<BoxError>,
    S::Response: Default,
    D: Dialect + Clone,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = ResponseFuture<S>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Always ready, so that cancel notifications are never stuck behind backpressure: each request waits for
        // the inner service's readiness inside its own future (`Oneshot`), where its cancel can still reach it.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut req: Request) -> Self::Future {
        // The clone takes the readiness-free copy of the inner service into the request's own future, which
        // waits for readiness there (raced against the request's cancel) and then calls it.
        let inner = self.inner.clone();
        // Borrowed, not cloned: the registration keeps the one clone a request needs.
        let connection = req.connection().unwrap_or(&self.own);
        // The request's dialect is its scope's, the one owner that its transport's peer speaks too; the layer's
        // own only stands in for a scope that speaks none (`Scope::new`, a request without a connection).
        let admitted = match connection.scope().dialect() {
            Some(dialect) => admit(
                &**dialect,
                dialect,
                connection,
                self.group_by.as_ref(),
                &req,
            ),
            None => admit(
                &self.dialect,
                &self.progress,
                connection,
                self.group_by.as_ref(),
                &req,
            ),
        };
        match admitted {
            Admitted::Consumed => ResponseFuture::ready(Ok(S::Response::default())),
            Admitted::Notification => ResponseFuture::notification(Dispatch::new(inner, req)),
            Admitted::Duplicate(duplicate) => ResponseFuture::ready(Err(Box::new(duplicate))),
            Admitted::Request(context, settlement) => {
                req.set_context(context);
                ResponseFuture::racing(Dispatch::new(inner, req), settlement, self.mode)
            }
        }
    }
}
