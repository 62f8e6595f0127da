//! The connection driver's configuration: what a [`Server`](crate::Server) is built with and its read loop reads.

use std::time::Duration;

use tower_cancel::Response;

use crate::frame::DEFAULT_MAX_FRAME_SIZE;

/// What the driver does with replies the peer sends to this side's own requests, when the connection has no
/// [`Peer`](tower_cancel::Peer) to take them.
pub type ResponseHandler = Box<dyn FnMut(Response) + Send>;

/// How long in-flight requests may run on after a graceful shutdown began, by default.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// How long in-flight requests may take to settle after the connection closed, by default.
pub const DEFAULT_CLOSE_GRACE: Duration = Duration::from_secs(1);

/// How long the driver keeps its reading stopped, by default, for a peer that does not read its replies, before it
/// closes the connection.
pub const DEFAULT_STALL_TIMEOUT: Duration = Duration::from_secs(30);

/// The driver's settings, one field per builder method of [`Server`](crate::Server) (which documents each).
/// A plain struct of its own so that the builder and the read loop both depend on it, not on each other.
pub(crate) struct Config {
    pub(crate) max_frame_size: usize,
    pub(crate) close_grace: Duration,
    pub(crate) drain_timeout: Duration,
    pub(crate) stall_timeout: Duration,
    pub(crate) on_response: ResponseHandler,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            max_frame_size: DEFAULT_MAX_FRAME_SIZE,
            close_grace: DEFAULT_CLOSE_GRACE,
            drain_timeout: DEFAULT_DRAIN_TIMEOUT,
            stall_timeout: DEFAULT_STALL_TIMEOUT,
            on_response: Box::new(|response| {
                tracing::debug!(id = ?response.id, "reply to an unknown outgoing request dropped");
            }),
        }
    }
}
