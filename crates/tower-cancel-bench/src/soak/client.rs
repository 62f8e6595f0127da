//! The soak's clients: each keeps a window of requests in flight on one connection after another, cancels some,
//! lets some time out, drops some connections, and checks every reply against what its request allows.

use std::{
    cmp::Reverse,
    collections::{BinaryHeap, HashMap},
    sync::atomic::{AtomicU64, Ordering},
    time::{Duration, Instant},
};

use super::{CancelAt, Endpoint, Plan, ReplyKind, Rng};
use crate::{
    client::{Client, Reply},
    target::Protocol,
};

/// How long a slow request's handler sleeps: far past any timeout the soak is run with.
const SLOW_MS: u64 = 10_000;
/// Per thousand requests: slow ones, and those cancelled before, during and after.
const SLOW: u64 = 30;
const CANCEL_BEFORE: u64 = 40;
const CANCEL_DURING: u64 = 40;
const CANCEL_AFTER: u64 = 40;
/// Per thousand requests, a cancel for an id never used is sent too.
const CANCEL_UNKNOWN: u64 = 10;
/// Ids never used by a request: the unknown cancels count up from here.
const UNKNOWN_IDS: u64 = 1 << 40;
/// A connection's length, in requests.
const SESSION: (u64, u64) = (100, 5_000);
/// Per thousand connections, dropped abruptly with requests in flight.
const DISCONNECT: u64 = 250;
/// How long a connection may go without a reply while it waits for some before it counts as stalled.
const STALL: Duration = Duration::from_secs(30);

/// What every client of a run shares: the requests left to send, the deadline, the servers' addresses.
#[derive(Debug)]
pub struct Run {
    total: u64,
    claimed: AtomicU64,
    deadline: Instant,
    window: usize,
    timeout_ms: u64,
    endpoints: HashMap<Protocol, Endpoint>,
}

impl Run {
    /// A run of `total` requests at most, sent until `deadline` at most, `window` in flight per connection, against
    /// servers whose timeout is `timeout`, at `endpoints` (one per protocol).
    pub fn new(
        total: u64,
        deadline: Instant,
        window: usize,
        timeout: Duration,
        endpoints: impl IntoIterator<Item = (Protocol, Endpoint)>,
    ) -> Self {
        Self {
            total,
            claimed: AtomicU64::new(0),
            deadline,
            window,
            timeout_ms: timeout.as_millis() as u64,
            endpoints: endpoints.into_iter().collect(),
        }
    }

    /// Requests sent so far, by every client: the claims granted (a client sends each as soon as it is granted).
    pub fn sent(&self) -> u64 {
        self.claimed.load(Ordering::Relaxed).min(self.total)
    }

    fn more(&self) -> bool {
        self.claimed.load(Ordering::Relaxed) < self.total && Instant::now() < self.deadline
    }

    fn claim(&self) -> bool {
        Instant::now() < self.deadline && self.claimed.fetch_add(1, Ordering::Relaxed) < self.total
    }

    /// Where the server of `protocol` listens.
    pub fn endpoint(&self, protocol: Protocol) -> &Endpoint {
        &self.endpoints[&protocol]
    }
}

/// The protocol's name in the report.
pub fn name(protocol: Protocol) -> &'static str {
    match protocol {
        Protocol::Lsp => "LSP",
        Protocol::Mcp => "MCP",
    }
}

/// What clients did and saw.
#[derive(Debug, Default)]
pub struct Counts {
    /// Requests sent.
    pub sent: u64,
    /// Replies with the handler's result.
    pub ok: u64,
    /// Replies -32800 (LSP: cancelled by the client).
    pub cancelled: u64,
    /// Replies that say the request timed out.
    pub timed_out: u64,
    /// Of those, fast requests: the machine's load pushed them past the deadline.
    pub fast_timed_out: u64,
    /// Any other reply: never allowed.
    pub other: u64,
    /// Cancels sent before their request.
    pub cancels_before: u64,
    /// Cancels sent while their request ran.
    pub cancels_during: u64,
    /// Cancels sent after their request's reply.
    pub cancels_after: u64,
    /// Cancels for ids never used.
    pub cancels_unknown: u64,
    /// Connections opened.
    pub sessions: u64,
    /// Connections dropped abruptly with requests in flight.
    pub disconnects: u64,
    /// Of those, dropped in the middle of a frame.
    pub partial_frames: u64,
    /// MCP requests cancelled by the client that got no reply by the end of their connection.
    pub mcp_unanswered: u64,
    /// Checks that failed.
    pub failures: u64,
    /// What the first few failed checks of each client saw.
    pub notes: Vec<String>,
}

impl Counts {
    fn fail(&mut self, note: String) {
        self.failures += 1;
        if self.notes.len() < 5 {
            self.notes.push(note);
        }
    }

    /// Add another client's counts.
    pub fn merge(&mut self, other: Counts) {
        self.sent += other.sent;
        self.ok += other.ok;
        self.cancelled += other.cancelled;
        self.timed_out += other.timed_out;
        self.fast_timed_out += other.fast_timed_out;
        self.other += other.other;
        self.cancels_before += other.cancels_before;
        self.cancels_during += other.cancels_during;
        self.cancels_after += other.cancels_after;
        self.cancels_unknown += other.cancels_unknown;
        self.sessions += other.sessions;
        self.disconnects += other.disconnects;
        self.partial_frames += other.partial_frames;
        self.mcp_unanswered += other.mcp_unanswered;
        self.failures += other.failures;
        self.notes.extend(other.notes);
    }

    /// Cancels sent, of every kind.
    pub fn cancels(&self) -> u64 {
        self.cancels_before + self.cancels_during + self.cancels_after + self.cancels_unknown
    }
}

/// How a connection ended.
enum End {
    /// Every reply read; the connection can close cleanly (or stay open for the final tables).
    Drained,
    /// Dropped abruptly with requests in flight.
    Dropped,
    /// A check failed in a way that leaves the connection useless.
    Failed,
}

/// One connection's requests in flight, from the client's side.
#[derive(Debug)]
struct Session {
    protocol: Protocol,
    next_unknown: u64,
    /// Requests sent; the last one's id.
    sent: u64,
    /// Requests whose reply is awaited.
    awaited: HashMap<u64, Plan>,
    /// MCP requests cancelled by the client: a reply may come (the request completed or timed out first) or not.
    maybe: HashMap<u64, Plan>,
    /// When to cancel the requests cancelled while they run.
    timers: BinaryHeap<Reverse<(Instant, u64)>>,
}

impl Session {
    fn new(protocol: Protocol) -> Self {
        Self {
            protocol,
            next_unknown: UNKNOWN_IDS,
            sent: 0,
            awaited: HashMap::new(),
            maybe: HashMap::new(),
            timers: BinaryHeap::new(),
        }
    }

    async fn run(
        &mut self,
        client: &mut Client,
        shared: &Run,
        rng: &mut Rng,
        counts: &mut Counts,
        len: u64,
        drop_at: Option<u64>,
    ) -> End {
        let mut last_reply = Instant::now();
        loop {
            while self.awaited.len() < shared.window && self.sent < len && shared.claim() {
                self.send(client, shared, rng, counts);
            }
            if drop_at.is_some_and(|at| self.sent >= at) && !self.awaited.is_empty() {
                if rng.chance(500) {
                    // The connection goes down in the middle of a frame.
                    let partial: &[u8] = match self.protocol {
                        Protocol::Lsp => b"Content-Length: 90\r\n\r\n{\"jsonrpc\":\"2.0\",\"id\":",
                        Protocol::Mcp => b"{\"jsonrpc\":\"2.0\",\"id\":",
                    };
                    client.queue_raw(partial);
                    counts.partial_frames += 1;
                }
                let _ = client.flush().await;
                return End::Dropped;
            }
            let now = Instant::now();
            while let Some(&Reverse((due, id))) = self.timers.peek() {
                if due > now {
                    break;
                }
                self.timers.pop();
                self.cancel_during(client, id, counts);
            }
            if let Err(error) = client.flush().await {
                counts.fail(format!("{}: writing failed: {error}", name(self.protocol)));
                return End::Failed;
            }
            if self.awaited.is_empty() {
                if self.sent >= len || !shared.more() {
                    counts.mcp_unanswered += self.maybe.len() as u64;
                    return End::Drained;
                }
                continue;
            }
            if now.duration_since(last_reply) > STALL {
                counts.fail(format!(
                    "{}: no reply for {STALL:?} with {} requests awaited",
                    name(self.protocol),
                    self.awaited.len()
                ));
                return End::Failed;
            }
            let wait = self.timers.peek().map_or(STALL, |&Reverse((due, _))| {
                due.saturating_duration_since(now).min(STALL)
            });
            let mut reply = match tokio::time::timeout(wait, client.next_reply()).await {
                Err(_) => continue,
                Ok(Err(error)) => {
                    counts.fail(format!("{}: connection lost: {error}", name(self.protocol)));
                    return End::Failed;
                }
                Ok(Ok(reply)) => Some(reply),
            };
            last_reply = Instant::now();
            // That one, then every reply already readable.
            while let Some(read) = reply {
                self.read(client, read, counts);
                reply = match client.ready_reply() {
                    Ok(reply) => reply,
                    Err(error) => {
                        counts.fail(format!("{}: bad frame: {error}", name(self.protocol)));
                        return End::Failed;
                    }
                };
            }
        }
    }

    fn send(&mut self, client: &mut Client, shared: &Run, rng: &mut Rng, counts: &mut Counts) {
        self.sent += 1;
        let id = self.sent;
        let slow = rng.chance(SLOW);
        let cancel = match rng.below(1000) {
            r if r < CANCEL_BEFORE => CancelAt::Before,
            r if r < CANCEL_BEFORE + CANCEL_DURING => CancelAt::During,
            r if r < CANCEL_BEFORE + CANCEL_DURING + CANCEL_AFTER => CancelAt::After,
            _ => CancelAt::Never,
        };
        let ms = match (slow, cancel) {
            (true, _) => SLOW_MS,
            (false, CancelAt::During) => rng.between(1, 20),
            (false, _) if rng.chance(250) => rng.between(1, 5),
            (false, _) => 0,
        };
        if cancel == CancelAt::Before {
            client.queue_cancel(id);
            counts.cancels_before += 1;
        }
        // One tag for every request: the probe's record of stopped handlers stays one entry.
        client.queue_work_tagged(id, ms, 0);
        counts.sent += 1;
        let plan = Plan { slow, cancel };
        if cancel == CancelAt::Before && self.protocol == Protocol::Mcp {
            // Never answered: it does not hold a place in the window, and any reply to it is a failure.
            self.maybe.insert(id, plan);
        } else {
            self.awaited.insert(id, plan);
        }
        if cancel == CancelAt::During {
            // A slow one's cancel races its timeout; a fast one's, its completion.
            let delay = if slow {
                rng.between(0, 2 * shared.timeout_ms)
            } else {
                rng.between(0, ms)
            };
            let due = Instant::now() + Duration::from_millis(delay);
            self.timers.push(Reverse((due, id)));
        }
        if rng.chance(CANCEL_UNKNOWN) {
            client.queue_cancel(self.next_unknown);
            self.next_unknown += 1;
            counts.cancels_unknown += 1;
        }
    }

    fn cancel_during(&mut self, client: &mut Client, id: u64, counts: &mut Counts) {
        // Sent even if the reply already came: then it is one more cancel for an id no longer in flight.
        client.queue_cancel(id);
        counts.cancels_during += 1;
        if self.protocol == Protocol::Mcp {
            if let Some(plan) = self.awaited.remove(&id) {
                self.maybe.insert(id, plan);
            }
        }
    }

    fn read(&mut self, client: &mut Client, reply: Reply, counts: &mut Counts) {
        let kind = ReplyKind::of(self.protocol, reply.is_error, reply.code);
        match kind {
            ReplyKind::Ok => counts.ok += 1,
            ReplyKind::Cancelled => counts.cancelled += 1,
            ReplyKind::TimedOut => counts.timed_out += 1,
            ReplyKind::Other(_) => counts.other += 1,
        }
        let protocol = name(self.protocol);
        let Some(plan) = (self.awaited.remove(&reply.id)).or_else(|| self.maybe.remove(&reply.id))
        else {
            counts.fail(format!(
                "{protocol}: a reply ({kind:?}) to id {} that was not awaited (unknown, or answered twice)",
                reply.id
            ));
            return;
        };
        if !plan.allows(self.protocol, kind) {
            counts.fail(format!(
                "{protocol}: id {} ({plan:?}) answered {kind:?}",
                reply.id
            ));
        }
        if kind == ReplyKind::TimedOut && !plan.slow {
            counts.fast_timed_out += 1;
        }
        if plan.cancel == CancelAt::After {
            client.queue_cancel(reply.id);
            counts.cancels_after += 1;
        }
    }
}

/// One client: connections one after another until the run's requests are sent. The last one, drained, is
/// returned still open, so that the tables can be read with every connection quiet.
pub async fn drive(
    shared: &Run,
    protocol: Protocol,
    rng: &mut Rng,
    counts: &mut Counts,
) -> Option<Client> {
    let mut connect_failures = 0;
    while shared.more() {
        let connected = async {
            let mut client = shared.endpoint(protocol).connect(protocol).await?;
            client.handshake().await?;
            std::io::Result::Ok(client)
        };
        let connected = tokio::time::timeout(STALL, connected)
            .await
            .unwrap_or_else(|_| Err(std::io::Error::other("timed out")));
        let mut client = match connected {
            Ok(client) => client,
            Err(error) => {
                counts.fail(format!("{}: connecting failed: {error}", name(protocol)));
                connect_failures += 1;
                if connect_failures > 10 {
                    return None;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        counts.sessions += 1;
        let len = rng.between(SESSION.0, SESSION.1);
        let drop_at = rng.chance(DISCONNECT).then(|| rng.between(1, len));
        let mut session = Session::new(protocol);
        match session
            .run(&mut client, shared, rng, counts, len, drop_at)
            .await
        {
            End::Drained if !shared.more() => return Some(client),
            End::Drained => {
                client.close(Duration::ZERO).await;
            }
            // Either way the client is dropped here, abruptly.
            End::Dropped => counts.disconnects += 1,
            End::Failed => {}
        }
    }
    None
}
