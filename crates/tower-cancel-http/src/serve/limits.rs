//! The bounds [`serve`](super::serve()) puts on every connection, and their defaults.

use std::time::Duration;

use super::open_files;

/// How long an HTTP/1 request's head may take to arrive, counted from when the connection starts waiting for
/// it (it opened, or its previous response was sent); also how long any connection may take to begin its first
/// request. 30 s, hyper's own default once it has a timer.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a connection may stay open with no request in flight after its last one ended.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// The most connections a listener keeps open, unless the process's limit on open files is lower: then three
/// quarters of that limit, so that the files the rest of the process needs (and the connection being refused or
/// admitted) still fit.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;

/// How long a connection asked to close (idle, or the server shutting down) has to say goodbye (an HTTP/2
/// GOAWAY waits for the client's answer to a ping) before it is closed anyway, when it has no request in flight.
pub(super) const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// HTTP/2 pings a connection that has received nothing for this long, and closes it if the ping is not answered
/// within as long again: a peer that vanished without closing does not hold a stream (an SSE response) forever.
pub(super) const HTTP2_KEEP_ALIVE: Duration = Duration::from_secs(20);

/// The `Retry-After` of the 503 a client gets when every connection is busy, in seconds.
pub(super) const RETRY_AFTER_SECONDS: u32 = 1;

/// The bounds one listener serves with.
#[derive(Clone, Copy, Debug)]
pub(super) struct Limits {
    pub(super) header_read_timeout: Duration,
    pub(super) idle_timeout: Duration,
    pub(super) max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_connections: default_max_connections(),
        }
    }
}

/// [`DEFAULT_MAX_CONNECTIONS`], or three quarters of the open-file limit where that is lower.
fn default_max_connections() -> usize {
    match open_files::soft_limit() {
        Some(limit) => DEFAULT_MAX_CONNECTIONS.min(limit / 4 * 3).max(1),
        None => DEFAULT_MAX_CONNECTIONS,
    }
}
