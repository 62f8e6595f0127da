//! [`RedisBus`]: the replica's two tasks, one writing its cancels to the stream, one reading the others'.

use std::{
    fmt,
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, SystemTime},
};

use redis::{
    aio::MultiplexedConnection, streams::StreamReadReply, AsyncConnectionConfig, Client,
    RedisError, Value,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tower_cancel::bus::{CancelBus, RemoteCancel, Replica};

use crate::{config::Config, entry};

/// A replica's end of a Redis Stream shared by a deployment: the cancels its scopes miss locally are appended to
/// the stream (`XADD ... MAXLEN ~`), and every replica reads the stream from the last entry it saw (`XREAD`), so a
/// replica that loses its connection for a while reads what it missed once it is back (as long as the stream
/// still holds it). Redis being away never blocks a request: cancels wait in a bounded queue, local cancels work
/// as before, failures are counted and logged, and both tasks reconnect by themselves.
///
/// The bus runs until [`shutdown`](Self::shutdown) or until it is dropped.
///
/// # Example
///
/// ```no_run
/// use tower_cancel::Scope;
/// use tower_cancel_redis::{Config, RedisBus};
///
/// # #[tokio::main] async fn main() -> Result<(), redis::RedisError> {
/// let bus = RedisBus::start("redis://127.0.0.1:6379", "replica-a", Config::default()).await?;
/// // Every replica makes the scope of session S under the same key.
/// let scope = bus.replica().scope("session:S", Scope::new());
/// # let _ = scope; Ok(()) }
/// ```
pub struct RedisBus {
    replica: Replica,
    shared: Arc<Shared>,
    stop: CancellationToken,
}

/// What the two tasks and the handles share.
struct Shared {
    config: Config,
    client: Client,
    counters: Counters,
}

#[derive(Default)]
struct Counters {
    published: AtomicU64,
    publish_failures: AtomicU64,
    dropped: AtomicU64,
    received: AtomicU64,
    malformed: AtomicU64,
    reconnects: AtomicU64,
    reading: AtomicBool,
}

/// A bus's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BusStats {
    /// Cancels written to the stream.
    pub published: u64,
    /// Writes that failed (each retried after a reconnect, so a failure is not a loss).
    pub publish_failures: u64,
    /// Cancels never written: the queue was full while Redis was away. These are lost.
    pub dropped: u64,
    /// Entries read from the stream (this replica's own included).
    pub received: u64,
    /// Entries that were not cancels (ignored).
    pub malformed: u64,
    /// Connections lost and made again, by either task.
    pub reconnects: u64,
    /// Whether the reader is connected and reading now.
    pub reading: bool,
}

/// The publishing side, as the replica's scopes see it: a queue.
struct Publisher {
    queue: mpsc::Sender<RemoteCancel>,
    shared: Arc<Shared>,
}

impl CancelBus for Publisher {
    fn publish(&self, cancel: RemoteCancel) {
        if self.queue.try_send(cancel).is_err() {
            let dropped = self.shared.counters.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            tracing::warn!(
                dropped,
                "cancel bus: the queue is full (Redis away?): a cancel is lost"
            );
        }
    }
}

impl RedisBus {
    /// Replica `replica_id` of the deployment whose Redis is at `url`: connects once (so a wrong URL is an error
    /// here), then reads and writes in the background. Reading starts at the end of the stream: cancels published
    /// before this replica started are not for its requests.
    pub async fn start(
        url: &str,
        replica_id: impl Into<String>,
        config: Config,
    ) -> Result<Self, RedisError> {
        let client = Client::open(url)?;
        let shared = Arc::new(Shared {
            config,
            client,
            counters: Counters::default(),
        });
        let mut reader = shared.connect(None).await?;
        let start = last_entry(&mut reader, &shared.config.stream).await?;
        let writer = shared.connect(Some(shared.config.reply_timeout)).await?;

        let (queue, queued) = mpsc::channel(shared.config.queue.max(1));
        let publisher = Publisher {
            queue,
            shared: shared.clone(),
        };
        let replica = Replica::new(replica_id, Arc::new(publisher));
        let stop = CancellationToken::new();
        tokio::spawn(write(shared.clone(), writer, queued, stop.clone()));
        tokio::spawn(read(
            shared.clone(),
            replica.clone(),
            reader,
            start,
            stop.clone(),
        ));
        Ok(Self {
            replica,
            shared,
            stop,
        })
    }

    /// The replica: attach scopes to it ([`Replica::scope`]).
    pub fn replica(&self) -> &Replica {
        &self.replica
    }

    /// The bus's counters now.
    pub fn stats(&self) -> BusStats {
        let c = &self.shared.counters;
        BusStats {
            published: c.published.load(Ordering::Relaxed),
            publish_failures: c.publish_failures.load(Ordering::Relaxed),
            dropped: c.dropped.load(Ordering::Relaxed),
            received: c.received.load(Ordering::Relaxed),
            malformed: c.malformed.load(Ordering::Relaxed),
            reconnects: c.reconnects.load(Ordering::Relaxed),
            reading: c.reading.load(Ordering::Relaxed),
        }
    }

    /// Stop both tasks. Cancels still queued are not written.
    pub fn shutdown(&self) {
        self.stop.cancel();
    }
}

impl Drop for RedisBus {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl fmt::Debug for RedisBus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisBus")
            .field("replica", &self.replica.id())
            .field("stream", &self.shared.config.stream)
            .field("stats", &self.stats())
            .finish()
    }
}

impl Shared {
    /// A connection whose replies may take `reply_timeout` at most (`None`: the reader's, whose `XREAD` blocks
    /// on purpose; it bounds each read itself).
    async fn connect(
        &self,
        reply_timeout: Option<Duration>,
    ) -> Result<MultiplexedConnection, RedisError> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.config.reply_timeout))
            .set_response_timeout(reply_timeout);
        self.client
            .get_multiplexed_async_connection_with_config(&config)
            .await
    }

    /// Connect again after a failure, waiting longer after each one; `None` once the bus is stopped.
    async fn reconnect(
        &self,
        reply_timeout: Option<Duration>,
        stop: &CancellationToken,
    ) -> Option<MultiplexedConnection> {
        let mut wait = self.config.backoff;
        loop {
            tokio::select! {
                () = stop.cancelled() => return None,
                () = tokio::time::sleep(wait) => {}
            }
            match self.connect(reply_timeout).await {
                Ok(connection) => {
                    self.counters.reconnects.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(stream = %self.config.stream, "cancel bus: reconnected to Redis");
                    return Some(connection);
                }
                Err(error) => {
                    tracing::debug!(%error, "cancel bus: Redis still away");
                    wait = (wait * 2).min(self.config.max_backoff);
                }
            }
        }
    }
}

/// The writer: each queued cancel appended to the stream, in order; a failed write is retried on a new connection.
async fn write(
    shared: Arc<Shared>,
    mut connection: MultiplexedConnection,
    mut queued: mpsc::Receiver<RemoteCancel>,
    stop: CancellationToken,
) {
    let config = &shared.config;
    loop {
        let cancel = tokio::select! {
            () = stop.cancelled() => return,
            cancel = queued.recv() => match cancel {
                Some(cancel) => cancel,
                None => return,
            },
        };
        let fields = entry::to_fields(&cancel);
        loop {
            let mut xadd = redis::cmd("XADD");
            xadd.arg(&config.stream)
                .arg("MAXLEN")
                .arg("~")
                .arg(config.max_len)
                .arg("*");
            for (name, value) in &fields {
                xadd.arg(*name).arg(value);
            }
            match xadd.query_async::<String>(&mut connection).await {
                Ok(_) => {
                    shared.counters.published.fetch_add(1, Ordering::Relaxed);
                    break;
                }
                Err(error) => {
                    shared
                        .counters
                        .publish_failures
                        .fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(%error, scope = %cancel.scope, id = %cancel.id, "cancel bus: publishing failed; reconnecting to retry");
                    match shared.reconnect(Some(config.reply_timeout), &stop).await {
                        Some(fresh) => connection = fresh,
                        None => return,
                    }
                }
            }
        }
    }
}

/// The reader: every entry after `last`, applied to the replica, for as long as the bus runs.
async fn read(
    shared: Arc<Shared>,
    replica: Replica,
    mut connection: MultiplexedConnection,
    mut last: String,
    stop: CancellationToken,
) {
    let config = &shared.config;
    let counters = &shared.counters;
    // A read that takes longer than its block plus a reply's time went to a connection that died silently.
    let bound = config.block + config.reply_timeout;
    loop {
        counters.reading.store(true, Ordering::Relaxed);
        let mut xread = redis::cmd("XREAD");
        xread
            .arg("COUNT")
            .arg(512)
            .arg("BLOCK")
            .arg(config.block.as_millis() as u64)
            .arg("STREAMS")
            .arg(&config.stream)
            .arg(&last);
        let reply = tokio::select! {
            () = stop.cancelled() => return,
            reply = tokio::time::timeout(bound, xread.query_async::<Option<StreamReadReply>>(&mut connection)) => reply,
        };
        match reply {
            Ok(Ok(reply)) => {
                for id in reply.into_iter().flat_map(|r| r.keys).flat_map(|k| k.ids) {
                    last = id.id.clone();
                    apply(&shared, &replica, &id.map);
                }
            }
            failed => {
                counters.reading.store(false, Ordering::Relaxed);
                match failed {
                    Ok(Err(error)) => {
                        tracing::warn!(%error, "cancel bus: reading failed; reconnecting")
                    }
                    _ => tracing::warn!(
                        "cancel bus: no answer from Redis within {bound:?}; reconnecting"
                    ),
                }
                match shared.reconnect(None, &stop).await {
                    Some(fresh) => connection = fresh,
                    None => return,
                }
            }
        }
    }
}

fn apply(shared: &Shared, replica: &Replica, map: &std::collections::HashMap<String, Value>) {
    shared.counters.received.fetch_add(1, Ordering::Relaxed);
    let fields = map.iter().filter_map(|(name, value)| match value {
        Value::BulkString(bytes) => Some((name.as_str(), bytes.as_slice())),
        _ => None,
    });
    match entry::from_fields(fields) {
        Ok(cancel) => {
            let sent_at = cancel.sent_at;
            let applied = replica.apply(cancel);
            // The age is read only when the event is on (tracing evaluates fields after its level check).
            tracing::trace!(?applied, age = ?entry::age(sent_at, SystemTime::now()), "cancel bus: entry applied");
        }
        Err(why) => {
            shared.counters.malformed.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                why = why.0,
                "cancel bus: an entry of the stream is not a cancel"
            );
        }
    }
}

/// The id of the stream's newest entry (`0-0` if it has none): reading starts after it.
async fn last_entry(
    connection: &mut MultiplexedConnection,
    stream: &str,
) -> Result<String, RedisError> {
    let newest: redis::streams::StreamRangeReply = redis::cmd("XREVRANGE")
        .arg(stream)
        .arg("+")
        .arg("-")
        .arg("COUNT")
        .arg(1)
        .query_async(connection)
        .await?;
    Ok(newest
        .ids
        .into_iter()
        .next()
        .map_or_else(|| "0-0".to_owned(), |id| id.id))
}
