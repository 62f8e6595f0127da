//! Make requests cancellable.
//!
//! [`CancelLayer`] sits near the top of the stack (just inside [`ErrorMapLayer`](crate::ErrorMapLayer)):
//!
//! - It consumes the dialect's cancel notifications: a cancel for an in-flight request of the same scope cancels
//!   it with [`CancelReason::Peer`]; a cancel for an unknown id is remembered for a
//!   while (the request may still be on its way); a malformed cancel is ignored. Cancel notifications never reach
//!   the inner service.
//! - It registers every cancellable request in its scope's [`Registry`] (taken from the request's extensions, put
//!   there by the transport; else the layer's own) and gives the request a [`RequestContext`]
//!   ([`Request::context`](crate::Request::context)).
//! - It races the inner future against the request's cancellation (its lifecycle, which also fires the token).
//!   The first of completion and cancel to reach the request's lifecycle wins; the other is a no-op. A cancelled
//!   request resolves to a [`Cancelled`] error.
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

mod error;
mod future;
mod layer;

use std::{
    fmt,
    sync::Arc,
    task::{Context, Poll},
};

use tower::ServiceExt;
use tower_service::Service;

pub use self::{
    error::Cancelled,
    future::ResponseFuture,
    layer::{CancelLayer, Mode},
};
use crate::{
    context::{CancelReason, RequestContext},
    dialect::{Dialect, Recognized},
    lifecycle::Lifecycle,
    message::Request,
    progress::ProgressFormat,
    registry::{CancelOutcome, Registry},
    BoxError,
};

/// The service built by [`CancelLayer`].
#[derive(Clone)]
pub struct Cancel<S, D> {
    inner: S,
    dialect: D,
    mode: Mode,
    registry: Registry,
    // The dialect once more, shared, for the progress reports of every request's context.
    progress: Arc<dyn ProgressFormat>,
}

impl<S: fmt::Debug, D: fmt::Debug> fmt::Debug for Cancel<S, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cancel")
            .field("inner", &self.inner)
            .field("dialect", &self.dialect)
            .field("mode", &self.mode)
            .field("registry", &self.registry)
            .finish()
    }
}

impl<S, D: Dialect> Cancel<S, D> {
    pub(crate) fn new(inner: S, dialect: D, mode: Mode, registry: Registry) -> Self {
        Self {
            inner,
            progress: Arc::new(dialect.clone()),
            dialect,
            mode,
            registry,
        }
    }
}

impl<S, D> Cancel<S, D> {
    /// The registry used for requests that arrive without one in their extensions.
    pub fn registry(&self) -> &Registry {
        &self.registry
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
    D: Dialect,
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
        let registry = req
            .extensions()
            .get::<Registry>()
            .unwrap_or(&self.registry)
            .clone();
        let session = registry.session();
        // The clone takes the readiness-free copy of the inner service into the request's own future, which
        // waits for readiness there (raced against the request's token) and then calls it.
        let inner = self.inner.clone();

        let Some(id) = req.id().cloned() else {
            return match self.dialect.recognize(&req, session) {
                Recognized::Cancel(notice) => {
                    let outcome =
                        registry.cancel(&notice.id, CancelReason::peer(notice.reason.clone()));
                    tracing::debug!(
                        dialect = self.dialect.name(),
                        id = %notice.id,
                        reason = notice.reason.as_deref().unwrap_or(""),
                        ?outcome,
                        "cancel received"
                    );
                    if outcome == CancelOutcome::Cancelled {
                        if let Some(reason) = &notice.reason {
                            tracing::info!(id = %notice.id, reason, "request cancelled by the peer");
                        }
                    }
                    ResponseFuture::ready(Ok(S::Response::default()))
                }
                Recognized::Malformed => {
                    tracing::debug!(
                        dialect = self.dialect.name(),
                        params = req.params().map(|p| p.get()),
                        "malformed cancel ignored"
                    );
                    ResponseFuture::ready(Ok(S::Response::default()))
                }
                Recognized::NotACancel => ResponseFuture::passthrough(inner.oneshot(req), None),
            };
        };

        self.dialect.observe_request(&req, session);
        let cancellable = self.dialect.is_cancellable(req.method(), session);
        let lifecycle = Arc::new(if cancellable {
            Lifecycle::new(id)
        } else {
            // Its context is still given (id, progress), but nothing can cancel it: no timeout either.
            Lifecycle::uncancellable(id)
        });
        let context = RequestContext::new(lifecycle.clone(), Some(self.progress.clone()));
        req.set_context(context);
        if !cancellable {
            let initializes = (req.method() == "initialize").then_some(registry);
            return ResponseFuture::passthrough(inner.oneshot(req), initializes);
        }
        match registry.register(lifecycle.clone()) {
            Ok(registration) => ResponseFuture::racing(
                inner,
                req,
                lifecycle,
                registration,
                self.mode,
                self.dialect.allows_partial_result(),
            ),
            Err(duplicate) => ResponseFuture::ready(Err(Box::new(duplicate))),
        }
    }
}
