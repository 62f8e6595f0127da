//! Why a request was cancelled: [`CancelReason`], the one value every source of cancellation ends in, and
//! [`Cancelled`], the outcome of a request whose cancel won.

use std::fmt;

use crate::message::Id;

/// The longest reason text kept, in bytes: a longer one (a peer's, most likely) is cut at a character boundary
/// there, so that a hostile peer cannot make every remembered or in-flight cancel hold a frame's worth of text.
pub const MAX_REASON_BYTES: usize = 256;

/// Why a request was cancelled. Every source ends in the same lifecycle; the dialect renders the reply from this.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CancelReason {
    /// The peer sent its dialect's cancel message, with its optional reason text.
    Peer {
        /// The reason the peer gave, if any (MCP's `reason`).
        reason: Option<String>,
    },
    /// The request's deadline passed.
    Timeout,
    /// The connection (or HTTP stream) closed.
    Disconnect,
    /// The server is shutting down.
    Shutdown,
    /// The request this one was made for was cancelled.
    Parent,
    /// Cancelled by code on this side (a handler, an application rule, the response future being dropped).
    Local {
        /// A description, for logs.
        reason: Option<String>,
    },
    /// The peer cancelled a whole group of requests the request was in (ACP's `session/cancel {sessionId}`: the
    /// requests grouped by that session). Dialects render it like [`Peer`](Self::Peer) unless they say
    /// otherwise (ACP answers a `session/prompt` ended this way with the result `{"stopReason":"cancelled"}`).
    Group {
        /// The group's key (the session id).
        key: Id,
    },
}

impl CancelReason {
    /// A peer's cancel, with the reason it gave (cut to [`MAX_REASON_BYTES`]).
    pub fn peer(reason: Option<String>) -> Self {
        CancelReason::Peer {
            reason: reason.map(bounded),
        }
    }

    /// A cancel by this side's own code (the text cut to [`MAX_REASON_BYTES`]).
    pub fn local(reason: impl Into<String>) -> Self {
        CancelReason::Local {
            reason: Some(bounded(reason.into())),
        }
    }

    /// The reason's text, where it carries one (a peer's or a local cancel's).
    pub fn text(&self) -> Option<&str> {
        match self {
            CancelReason::Peer { reason } | CancelReason::Local { reason } => reason.as_deref(),
            _ => None,
        }
    }
}

fn bounded(mut text: String) -> String {
    if text.len() > MAX_REASON_BYTES {
        let mut end = MAX_REASON_BYTES;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

impl fmt::Display for CancelReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CancelReason::Peer { reason: None } => f.write_str("cancelled by the peer"),
            CancelReason::Peer { reason: Some(r) } => write!(f, "cancelled by the peer: {r}"),
            CancelReason::Timeout => f.write_str("timed out"),
            CancelReason::Disconnect => f.write_str("connection closed"),
            CancelReason::Shutdown => f.write_str("server shutting down"),
            CancelReason::Parent => f.write_str("parent request cancelled"),
            CancelReason::Local { reason: None } => f.write_str("cancelled locally"),
            CancelReason::Local { reason: Some(r) } => write!(f, "cancelled locally: {r}"),
            CancelReason::Group { key } => write!(f, "group {key} cancelled by the peer"),
        }
    }
}

/// The request was cancelled: the outcome of a request whose cancel won the race against its handler.
///
/// The [`ErrorMapLayer`](crate::ErrorMapLayer) turns it into the dialect's cancelled reply (or no reply).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cancelled {
    reason: CancelReason,
    // The end was announced to the peer already (`Dialect::end_notice`): nothing more is sent for the request.
    announced: bool,
}

impl Cancelled {
    /// A cancellation for `reason`, for layers and services of your own that settle a request as cancelled.
    pub fn new(reason: CancelReason) -> Self {
        Self {
            reason,
            announced: false,
        }
    }

    /// A request whose end this side announced with the dialect's cancel message (an MCP server tearing down a
    /// subscription: see [`Dialect::ends_with_cancel`](crate::Dialect::ends_with_cancel)): that message was its
    /// end, and it gets no reply after it.
    pub(crate) fn announced(reason: CancelReason) -> Self {
        Self {
            reason,
            announced: true,
        }
    }

    /// Whether the request's end was announced to the peer with the dialect's cancel message, so that no reply
    /// follows.
    pub fn was_announced(&self) -> bool {
        self.announced
    }

    /// Why the request was cancelled.
    pub fn reason(&self) -> &CancelReason {
        &self.reason
    }
}

impl fmt::Display for Cancelled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "request cancelled ({})", self.reason)
    }
}

impl std::error::Error for Cancelled {}
