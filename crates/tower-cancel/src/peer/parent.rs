//! The request a child [`Peer`](super::Peer) handle's calls belong to.

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::{
    lifecycle::{Deadline, SharedLifecycle, DEADLINE_FIELD},
    reason::CancelReason,
};

/// What a child handle's calls are cancelled with.
#[derive(Clone, Debug)]
pub(crate) enum Parent {
    /// A token the caller gave ([`Peer::child_of`](super::Peer::child_of)).
    Token(CancellationToken),
    /// A request's lifecycle ([`CascadeLayer`](crate::CascadeLayer)): its token is made only when a call is sent
    /// through the handle. The cascade layer gives every request of a connection with a peer such a handle, and
    /// most never call the peer: asking for the token up front would cost each of them one.
    Request(SharedLifecycle),
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

    /// The parent request's deadline as it stands now, if it has one (a token carries none).
    pub(crate) fn deadline(&self) -> Option<Instant> {
        match self {
            Parent::Token(_) => None,
            Parent::Request(lifecycle) => lifecycle.deadline().map(Deadline::at),
        }
    }

    /// The `_meta` field the parent request's deadline came in: its calls write their remaining time there.
    pub(crate) fn deadline_field(&self) -> &str {
        match self {
            Parent::Request(lifecycle) => lifecycle.deadline_field().map_or(DEADLINE_FIELD, |f| f),
            Parent::Token(_) => DEADLINE_FIELD,
        }
    }

    /// The parent request's deadline has passed: it times out now, as its timeout layer is about to say. A call
    /// whose cap (the parent's deadline) fired first does this, so that the parent's answer is its timeout reply
    /// rather than whatever its handler makes of the call's error in the same instant. A deadline pushed back
    /// since (an idle one) has not passed: nothing happens.
    pub(crate) fn expire_if_passed(&self) {
        if let Parent::Request(lifecycle) = self {
            if lifecycle
                .deadline()
                .is_some_and(|d| d.at() <= Instant::now())
            {
                lifecycle.cancel(CancelReason::Timeout);
            }
        }
    }
}
