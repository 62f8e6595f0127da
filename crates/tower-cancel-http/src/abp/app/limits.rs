//! The bounds an ABP app puts on what its agents make it hold: each WebSocket's message and outgoing queue, each
//! session's calls, and how many sessions are open.

use std::time::Duration;

/// The largest WebSocket message an app reads by default: an envelope past it closes the connection (as a
/// protocol error: one envelope is one frame).
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 1024 * 1024;

/// How many calls one session may have running at once by default; a call past it is answered `RATE_LIMITED`
/// (retryable) without running.
pub const DEFAULT_MAX_CALLS_PER_SESSION: usize = 1024;

/// How many bytes of answers (envelopes, pongs) may wait for an agent that does not read, by default, before its
/// session stops reading from it; as much again of progress reports, past which they are dropped. Lower than the
/// stream driver's 8 MiB per connection: an app has many sessions, and one envelope is at most a message's size.
pub const DEFAULT_MAX_QUEUED_BYTES: usize = 1024 * 1024;

/// How many WebSocket sessions an app keeps open at once by default; an upgrade past it is refused 503 with
/// `Retry-After`. A session holds at most a message being read ([`DEFAULT_MAX_MESSAGE_BYTES`]) and its outgoing
/// queue ([`DEFAULT_MAX_QUEUED_BYTES`] of replies, as much again of progress reports), about 3 MiB: this many
/// sessions bound what hostile agents can make the app hold to about 1.5 GiB, and each is closed after the
/// [`DEFAULT_STALL_TIMEOUT`] if it does not read. Half of [`serve`](crate::serve())'s default connection limit: a
/// WebSocket is never closed for being idle, so sessions alone must not fill a listener that serves other
/// clients too.
pub const DEFAULT_MAX_SESSIONS: usize = 512;

/// How long a session's reading may stay stopped by default (its outgoing queue over the bound, for an agent that
/// does not read), before the app closes it: the stream driver's default (`tower-cancel-io`'s
/// `DEFAULT_STALL_TIMEOUT`).
pub const DEFAULT_STALL_TIMEOUT: Duration = Duration::from_secs(30);

/// What a refused upgrade's `Retry-After` says, in seconds, when the app has all the sessions it takes: sessions
/// end as agents leave, so a retry soon may find room.
pub(crate) const SESSIONS_FULL_RETRY_AFTER_SECS: u64 = 1;
