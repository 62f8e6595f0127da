//! A progress token a handler's calls create, bound to the handler's request: the peer's cancel of the token
//! (LSP's `window/workDoneProgress/cancel`) then cancels the request.

use super::{Parent, Peer};
use crate::{message::WireRequest, registry::Registry};

impl Peer {
    /// This child handle binds the progress tokens its calls create to its request, in `registry` (the one the
    /// request is in). [`Request::peer`](crate::Request::peer) gives handlers such a handle.
    pub(crate) fn binding_progress_in(mut self, registry: Registry) -> Self {
        self.groups = Some(registry);
        self
    }

    /// If `request` creates a progress token (the dialect says which: LSP's `window/workDoneProgress/create`),
    /// bind the token to this handle's request, for as long as the request is in flight. Called before the request
    /// is written, so that no cancel of the token can come before the binding.
    pub(super) fn bind_created_progress(&self, request: &WireRequest) {
        let (Some(registry), Some(Parent::Request(lifecycle))) = (&self.groups, &self.parent)
        else {
            return;
        };
        if let Some(token) = self.shared.dialect.progress_created(request) {
            tracing::debug!(%token, request = %lifecycle.id(), "progress token bound to its request");
            registry.bind_group(lifecycle, token);
        }
    }
}
