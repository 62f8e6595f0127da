//! The per-conversation facts a dialect's lifecycle rules depend on: [`SessionState`].

use std::sync::atomic::{AtomicBool, Ordering};

/// Per-conversation facts that a dialect's lifecycle rules depend on (the ACP draft's: whether `initialize`
/// completed, whether the peer declared `cancellation.request`). Each [`Connection`](crate::scope::Connection) has its
/// own, shared by its cancel layer and its [`Peer`](crate::Peer).
#[derive(Debug, Default)]
pub struct SessionState {
    initialized: AtomicBool,
    peer_accepts_cancel: AtomicBool,
    sends_no_cancels: AtomicBool,
}

impl SessionState {
    /// Whether an `initialize` request of this conversation has completed successfully.
    pub fn is_initialized(&self) -> bool {
        self.initialized.load(Ordering::Acquire)
    }

    /// Record that `initialize` completed.
    pub fn mark_initialized(&self) {
        self.initialized.store(true, Ordering::Release);
    }

    /// Whether the peer declared that it handles cancels of the requests it receives (ACP draft's
    /// `cancellation.request`).
    pub fn peer_accepts_cancel(&self) -> bool {
        self.peer_accepts_cancel.load(Ordering::Acquire)
    }

    /// Record what the peer declared.
    pub fn set_peer_accepts_cancel(&self, accepts: bool) {
        self.peer_accepts_cancel.store(accepts, Ordering::Release);
    }

    /// Whether the conversation's revision forbids this side to cancel its own requests with a message (MCP
    /// `2026-07-28`, where a server sends `notifications/cancelled` only to tear down a subscription).
    pub fn sends_no_cancels(&self) -> bool {
        self.sends_no_cancels.load(Ordering::Acquire)
    }

    /// Record that the conversation's revision forbids this side's cancel messages.
    pub fn forbid_cancels(&self) {
        self.sends_no_cancels.store(true, Ordering::Release);
    }
}
