//! The request a child [`Peer`](super::Peer) handle's calls belong to.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::lifecycle::Lifecycle;

/// What a child handle's calls are cancelled with.
#[derive(Clone, Debug)]
pub(crate) enum Parent {
    /// A token the caller gave ([`Peer::child_of`](super::Peer::child_of)).
    Token(CancellationToken),
    /// A request's lifecycle ([`CascadeLayer`](crate::CascadeLayer)): its token is made only when a call is sent
    /// through the handle. The cascade layer gives every request of a connection with a peer such a handle, and
    /// most never call the peer: asking for the token up front would cost each of them one.
    Request(Arc<Lifecycle>),
}

impl Parent {
    /// Whether the parent request was cancelled (the token fires exactly on the lifecycle's move to cancelled).
    pub(crate) fn is_cancelled(&self) -> bool {
        match self {
            Parent::Token(token) => token.is_cancelled(),
            Parent::Request(lifecycle) => lifecycle.is_cancelled(),
        }
    }

    /// The token that fires when the parent is cancelled.
    pub(crate) fn token(&self) -> CancellationToken {
        match self {
            Parent::Token(token) => token.clone(),
            Parent::Request(lifecycle) => lifecycle.token().clone(),
        }
    }
}
