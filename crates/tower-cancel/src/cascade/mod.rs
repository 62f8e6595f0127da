//! Cancel the requests a handler made when the handler's own request is cancelled.
//!
//! [`CascadeLayer`] goes innermost, just above your service. For a request that came over a connection with a
//! [`Peer`](crate::Peer) ([`Request::connection`](crate::Request::connection)) and passed a [`CancelLayer`](crate::CancelLayer),
//! it gives the handler [`Request::peer`](crate::Request::peer): the connection's peer as a child of the request.
//! When the request is cancelled, from any source (the peer's cancel, a timeout, a disconnect, a shutdown, its own
//! parent), every outstanding request made through that peer is cancelled and the peer is sent the dialect's cancel
//! for it. In abort mode this also follows from the handler's future being dropped with its calls; the child handle
//! makes it hold for calls moved into spawned tasks and for cooperative handlers too.
//!
//! In-process sub-operations take a child token with
//! [`RequestContext::child_token`](crate::RequestContext::child_token).
//!
//! # Example
//!
//! ```
//! use tower::{service_fn, ServiceBuilder};
//! use tower_cancel::{dialect::Acp, CancelLayer, CascadeLayer, ErrorMapLayer, ErrorObject, Request};
//!
//! async fn prompt(req: Request) -> Result<serde_json::Value, ErrorObject> {
//!     if let Some(client) = req.peer() {
//!         // Cancelled, and the client told, if this prompt is cancelled while it waits.
//!         let _answer = client
//!             .request("session/request_permission", serde_json::json!({ "sessionId": "s" }))
//!             .await;
//!     }
//!     Ok(serde_json::json!({ "stopReason": "end_turn" }))
//! }
//!
//! // What `CancelStack::acp()` builds, without the timeout layer.
//! let _service = ServiceBuilder::new()
//!     .layer(ErrorMapLayer::new(Acp))
//!     .layer(CancelLayer::new(Acp))
//!     .layer(CascadeLayer::new())
//!     .service(service_fn(prompt));
//! ```

mod layer;

use std::task::{Context, Poll};

use tower_service::Service;

pub use self::layer::CascadeLayer;
use crate::request::Request;

/// The service built by [`CascadeLayer`].
#[derive(Clone, Debug)]
pub struct Cascade<S> {
    inner: S,
}

impl<S> Cascade<S> {
    pub(crate) fn new(inner: S) -> Self {
        Self { inner }
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

impl<S: Service<Request>> Service<Request> for Cascade<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request) -> Self::Future {
        // The child handle is made when the handler asks for it (`Request::peer`): most never call the peer.
        req.give_child_peer();
        self.inner.call(req)
    }
}
