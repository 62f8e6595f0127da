//! A cancel of a whole group of requests: ACP's `session/cancel {sessionId}` (a turn of a session), LSP's
//! `window/workDoneProgress/cancel {token}` (the request that created a progress token). The dialect reads it into a
//! [`GroupCancel`]; the cancel layer cancels the group's requests on the connection it arrived on, then passes the
//! notification on to the service (the application may own the group too).

use crate::{message::Id, reason::CancelReason};

/// A group cancel read off the wire (see [`Recognized::CancelGroup`](super::Recognized::CancelGroup)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupCancel {
    /// The group: the session id, the progress token.
    pub key: Id,
    /// What the group's requests are cancelled with, which decides their reply: [`CancelReason::Group`] where the
    /// dialect answers a group cancel in its own way (ACP), [`CancelReason::Peer`] where it answers it like the
    /// peer's cancel of each request (LSP).
    pub reason: CancelReason,
}
