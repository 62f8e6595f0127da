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
}

impl fmt::Display for PeerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PeerError::Rejected(error) => write!(f, "the peer answered with an error: {error}"),
            PeerError::Cancelled => f.write_str("request cancelled"),
            PeerError::TimedOut => f.write_str("request timed out"),
            PeerError::Closed => f.write_str("connection closed"),
        }
    }
}

impl std::error::Error for PeerError {}
