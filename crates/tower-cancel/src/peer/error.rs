use std::fmt;

use crate::message::ErrorObject;

/// Why a call to the peer did not give a result.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum PeerError {
    /// The peer answered with an error (after a cancel, LSP and ACP peers answer -32800).
    Rejected(ErrorObject),
    /// The call was cancelled by its token and stopped waiting.
    Cancelled,
    /// The call's timeout passed and it stopped waiting.
    TimedOut,
    /// The connection closed before the reply.
    Closed,
    /// The peer ended the call with its cancel, where the dialect lets it (MCP: a server tearing down the
    /// subscription a `subscriptions/listen` opened), with the reason it gave.
    CancelledByPeer {
        /// The peer's reason, if it gave one.
        reason: Option<String>,
    },
    /// Never sent: the conversation's revision has no such requests from this side (MCP's stateless revision
    /// has no requests from server to client).
    NotAllowed,
}

impl fmt::Display for PeerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PeerError::Rejected(error) => write!(f, "the peer answered with an error: {error}"),
            PeerError::Cancelled => f.write_str("request cancelled"),
            PeerError::TimedOut => f.write_str("request timed out"),
            PeerError::Closed => f.write_str("connection closed"),
            PeerError::CancelledByPeer { reason: None } => f.write_str("cancelled by the peer"),
            PeerError::CancelledByPeer {
                reason: Some(reason),
            } => write!(f, "cancelled by the peer: {reason}"),
            PeerError::NotAllowed => {
                f.write_str("this side may not send requests in this conversation's revision")
            }
        }
    }
}

impl std::error::Error for PeerError {}
