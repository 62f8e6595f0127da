//! The bounds every front end puts on what a client sends.

/// The largest body read by default: 4 MiB, as the stream transports' frame limit. Each front end's
/// `max_body_bytes` changes it (an ABP app's is its largest WebSocket message, 1 MiB by default).
pub const DEFAULT_MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// The longest id taken from a client, in bytes: a RAP thread or tool call id, an ABP envelope id or `callId`.
/// Ids are the client's, kept in tables and written in logs: a longer one is refused.
pub const MAX_ID_BYTES: usize = 256;
