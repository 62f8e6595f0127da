//! How a [`RedisBus`](crate::RedisBus) uses Redis, with defaults that suit a deployment of a few replicas.

use std::time::Duration;

use tower_cancel::registry::DEFAULT_EARLY_CANCEL_CAPACITY;

/// The stream every replica of a deployment writes to and reads from.
pub const DEFAULT_STREAM: &str = "tower-cancel:cancels";

/// How many entries the stream keeps (approximately: `MAXLEN ~`). A replica that is away for longer than it takes
/// the deployment to publish this many cancels misses the oldest; matched to the early-cancel window, past which a
/// cancel would be forgotten anyway.
pub const DEFAULT_MAX_LEN: usize = DEFAULT_EARLY_CANCEL_CAPACITY * 10;

/// How many cancels wait to be published while Redis cannot be reached; past that the newest are dropped and
/// counted.
pub const DEFAULT_QUEUE: usize = 1024;

/// Settings of a [`RedisBus`](crate::RedisBus).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Config {
    /// The stream's key ([`DEFAULT_STREAM`]): one per deployment; replicas of other deployments use another.
    pub stream: String,
    /// How many entries it keeps ([`DEFAULT_MAX_LEN`]).
    pub max_len: usize,
    /// How many cancels wait while Redis is away ([`DEFAULT_QUEUE`]).
    pub queue: usize,
    /// How long one `XREAD` blocks waiting for entries (1 s). Each read is also how the reader finds out that its
    /// connection died without a word (an outage that never closed the socket): a read that does not come back
    /// within this plus [`reply_timeout`](Self::reply_timeout) makes it reconnect.
    pub block: Duration,
    /// How long a command may wait for its reply before the connection is taken for dead (2 s).
    pub reply_timeout: Duration,
    /// The first wait before reconnecting (50 ms); it doubles up to [`max_backoff`](Self::max_backoff).
    pub backoff: Duration,
    /// The longest wait between reconnects (2 s).
    pub max_backoff: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            stream: DEFAULT_STREAM.to_owned(),
            max_len: DEFAULT_MAX_LEN,
            queue: DEFAULT_QUEUE,
            block: Duration::from_secs(1),
            reply_timeout: Duration::from_secs(2),
            backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(2),
        }
    }
}

impl Config {
    /// The defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// The stream's key.
    pub fn stream(mut self, stream: impl Into<String>) -> Self {
        self.stream = stream.into();
        self
    }

    /// How many entries the stream keeps.
    pub fn max_len(mut self, max_len: usize) -> Self {
        self.max_len = max_len;
        self
    }

    /// How many cancels wait while Redis is away.
    pub fn queue(mut self, queue: usize) -> Self {
        self.queue = queue;
        self
    }

    /// How long one read blocks, and how long a reply may take.
    pub fn timing(mut self, block: Duration, reply_timeout: Duration) -> Self {
        self.block = block;
        self.reply_timeout = reply_timeout;
        self
    }

    /// The first and the longest wait between reconnects.
    pub fn backoff(mut self, first: Duration, max: Duration) -> Self {
        self.backoff = first;
        self.max_backoff = max;
        self
    }
}
