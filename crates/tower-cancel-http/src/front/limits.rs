//! The bounds every front end puts on what a client sends, and on what its requests may hold.

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

/// The most requests a front end runs at once by default, over all its clients (each front end's
/// `max_in_flight` changes it). Past it a request is refused before it runs, the protocol's way of saying
/// "busy": HTTP 503 with `Retry-After`, a RAP invocation refused with 503, ABP's `RATE_LIMITED`.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 10_000;

/// The most requests one scope runs at once by default: an MCP session, a JSON-RPC principal, a RAP thread, an
/// ABP session (each front end's `max_in_flight_per_*` changes it). Past it, refused as past
/// [`DEFAULT_MAX_IN_FLIGHT`]: one client cannot take the whole front end's room.
pub const DEFAULT_MAX_IN_FLIGHT_PER_SCOPE: usize = 1_000;

/// How long a client refused as busy is told to wait (`Retry-After`, in whole seconds).
pub const BUSY_RETRY_AFTER_SECS: u64 = 1;

/// How long a principal's scope is kept after its last request ended, by default (for cancels that come a little
/// late or early).
pub const DEFAULT_PRINCIPAL_LINGER: Duration = Duration::from_secs(60);
