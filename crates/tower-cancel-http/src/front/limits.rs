//! The bounds every front end puts on what a client sends.

use std::time::Duration;

/// The largest body read by default: 4 MiB, as the stream transports' frame limit. Each front end's
/// `max_body_bytes` changes it (an ABP app's is its largest WebSocket message, 1 MiB by default).
pub const DEFAULT_MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// How long a request's body may take to arrive, from when the front end starts reading it: a body dripped a
/// byte at a time must not hold its connection for ever. Past it the request is answered `408 Request Timeout`
/// (a RAP notice is ignored, as any notice it cannot read). Each front end's `body_timeout` changes it.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// The longest id taken from a client, in bytes: a RAP thread or tool call id, an ABP envelope id or `callId`.
/// Ids are the client's, kept in tables and written in logs: a longer one is refused.
pub const MAX_ID_BYTES: usize = 256;
