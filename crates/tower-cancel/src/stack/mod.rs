//! Presets: the layers of a dialect in the right order, in one line ([`CancelStack`]), and the service they build
//! ([`Stacked`]).

mod service;

use std::time::Duration;

use tower_layer::Layer;

use crate::{
    cancel::{CancelLayer, Mode},
    cascade::CascadeLayer,
    dialect::{Abp, Acp, AcpDraft, Dialect, Lsp, Mcp, Rap},
    registry::Registry,
    scope::Scope,
    timeout::TimeoutLayer,
};

pub use self::service::{ResponseFuture, Stacked};

/// The whole stack for a dialect: [`ErrorMapLayer`](crate::ErrorMapLayer) outside, then [`CancelLayer`], then
/// [`TimeoutLayer`] (no deadline unless you set one with [`CancelStack::timeout`] or [`CancelStack::timeouts`]),
/// then [`CascadeLayer`].
///
/// The service it builds, [`Stacked`], answers reply for reply as those four layers stacked by hand would, without
/// the error map's future around the cancel layer's: the cancel layer's future renders the reply as the request
/// settles.
///
/// It is a [`Layer`], so it goes into a [`tower::ServiceBuilder`] next to tower's own layers. Put layers that
/// apply backpressure (`ConcurrencyLimit`, `RateLimit`) *below* it, so that cancels still reach queued requests.
///
/// # Example
///
/// ```
/// use tower::{service_fn, ServiceBuilder, ServiceExt};
/// use tower_cancel::{CancelStack, Request};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let service = ServiceBuilder::new()
///     .layer(CancelStack::lsp())
///     .concurrency_limit(64)
///     .service(service_fn(|_req: Request| async {
///         Ok::<_, tower_cancel::BoxError>(serde_json::json!(null))
///     }));
/// let reply = service.oneshot(Request::new(1, "shutdown", ())).await.unwrap();
/// assert_eq!(reply.unwrap().outcome, Ok(serde_json::Value::Null));
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct CancelStack<D> {
    // The error map takes the cancel layer's dialect: one dialect for the stack, given once.
    cancel: CancelLayer<D>,
    timeout: TimeoutLayer,
}

impl CancelStack<Lsp> {
    /// The stack for the Language Server Protocol.
    pub fn lsp() -> Self {
        Self::new(Lsp)
    }
}

impl CancelStack<Acp> {
    /// The stack for the Agent Client Protocol (`$/cancel_request`).
    pub fn acp() -> Self {
        Self::new(Acp)
    }
}

impl CancelStack<AcpDraft> {
    /// The stack for the first ACP draft (`$/cancelRequest` behind the capability, declared).
    pub fn acp_draft() -> Self {
        Self::new(AcpDraft::new())
    }
}

impl CancelStack<Mcp> {
    /// The stack for the Model Context Protocol (no reply for a cancelled request).
    pub fn mcp() -> Self {
        Self::new(Mcp)
    }
}

impl CancelStack<Abp> {
    /// The stack for the Agentic Browser Protocol (a cancelled call is answered `cancelled: true`; a call's own
    /// `options.timeout` is honoured as a [`RequestedTimeout`](crate::timeout::RequestedTimeout)).
    pub fn abp() -> Self {
        Self::new(Abp)
    }
}

impl CancelStack<Rap> {
    /// The stack of a tool server of the Remote Action Protocol (no result for a call the runtime cancelled).
    pub fn rap() -> Self {
        Self::new(Rap)
    }
}

impl<D: Dialect + Clone> CancelStack<D> {
    /// The stack for any dialect.
    pub fn new(dialect: D) -> Self {
        Self {
            cancel: CancelLayer::new(dialect),
            timeout: TimeoutLayer::none(),
        }
    }

    /// A new scope speaking the stack's dialect, for a transport serving this stack: its connections' peers and
    /// the layers then speak the same dialect, given once.
    pub fn scope(&self) -> Scope {
        Scope::with_dialect(self.dialect().clone())
    }
}

impl<D> CancelStack<D> {
    /// Requests time out after `timeout` (see [`TimeoutLayer::new`]).
    pub fn timeout(self, timeout: Duration) -> Self {
        self.timeouts(TimeoutLayer::new(timeout))
    }

    /// The timeout layer in full: per-method timeouts, per-request ones, idle timeouts (see [`TimeoutLayer`]).
    pub fn timeouts(mut self, timeout: TimeoutLayer) -> Self {
        self.timeout = timeout;
        self
    }

    /// Set the handler mode (see [`Mode`]).
    pub fn mode(mut self, mode: Mode) -> Self {
        self.cancel = self.cancel.mode(mode);
        self
    }

    /// Cooperative mode with a grace period.
    pub fn cooperative(self, grace: Duration) -> Self {
        self.mode(Mode::Cooperative { grace })
    }

    /// The dialect the stack was built for. The layers read each request in its scope's dialect (the one its
    /// transport's peer speaks); this one stands in for a scope that speaks none ([`Scope::new`], a request
    /// without a connection). [`scope`](Self::scope) makes a scope that speaks it.
    pub fn dialect(&self) -> &D {
        self.cancel.dialect()
    }

    /// Group requests by their param `param` at admission, so that the peer's group cancel reaches them (ACP:
    /// `CancelStack::acp().group_by_param("sessionId")`, and `session/cancel {sessionId}` ends the session's
    /// turn). See [`CancelLayer::group_by_param`].
    pub fn group_by_param(mut self, param: impl Into<std::sync::Arc<str>>) -> Self {
        self.cancel = self.cancel.group_by_param(param);
        self
    }

    /// The registry for requests that arrive without a connection (see [`CancelLayer::registry`]).
    pub fn registry(mut self, registry: Registry) -> Self {
        self.cancel = self.cancel.registry(registry);
        self
    }
}

impl<S, D: Dialect + Clone> Layer<S> for CancelStack<D> {
    type Service = Stacked<S, D>;

    fn layer(&self, inner: S) -> Self::Service {
        let cascade = CascadeLayer::new().layer(inner);
        Stacked::new(self.cancel.layer(self.timeout.layer(cascade)))
    }
}
