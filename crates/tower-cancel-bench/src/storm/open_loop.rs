//! An open-loop load on one connection: requests written at their scheduled times whatever the replies do, and the
//! replies read by another task, each stamped with when it was read.
//!
//! The writer is a thread of its own (a blocking-pool thread) that sleeps with `std::thread::sleep` until the next
//! scheduled request: tokio's timer rounds up to the millisecond, which would put up to a millisecond of the
//! harness's own lateness into every latency at these rates, where the requests take tens of microseconds. Latency is
//! taken from each request's *scheduled* time, so that a server that stalls the writer (by not reading) is charged
//! for every request that should have been sent meanwhile (no coordinated omission); how late the writer itself was
//! is reported beside it ([`Sent::lateness`]).

use std::{
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc, OnceLock,
    },
    time::{Duration, Instant},
};

use tokio::runtime::Handle;

use crate::client::{Client, Replies, HELD_MS};

/// The first id of the storm's requests; the ordinary ones count from 1 (request `k` of the schedule is `k + 1`).
/// Below 2^31: LSP ids are 32-bit integers, and the LSP peers reject a larger one.
pub const STORM_IDS: u64 = 1 << 30;

/// How long a storm request is held before its cancel is written.
pub const CANCEL_LAG: Duration = Duration::from_millis(1);

/// What to send, and when.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    /// Ordinary requests (`bench/work`, ms 0) per second.
    pub ordinary_rate: f64,
    /// Storm requests per second, each held by its handler and cancelled [`CANCEL_LAG`] after it is sent (at the
    /// writer's next wake after that, never in the write of the request itself); 0 for none.
    pub storm_rate: f64,
    /// How long to send for, unless stopped sooner.
    pub duration: Duration,
    /// How long the reader waits, after the last request is written, for the replies still due; and how long a
    /// write may block past the end of the plan before the writer gives up.
    pub grace: Duration,
}

impl Plan {
    /// Ordinary requests in the schedule.
    pub fn ordinary_count(&self) -> u64 {
        (self.duration.as_secs_f64() * self.ordinary_rate) as u64
    }

    /// Storm requests in the schedule.
    pub fn storm_count(&self) -> u64 {
        (self.duration.as_secs_f64() * self.storm_rate) as u64
    }

    /// When ordinary request `index` (from 0) is due.
    pub fn ordinary_at(&self, start: Instant, index: u64) -> Instant {
        start + Duration::from_secs_f64(index as f64 / self.ordinary_rate)
    }

    fn storm_at(&self, start: Instant, index: u64) -> Instant {
        start + Duration::from_secs_f64(index as f64 / self.storm_rate)
    }
}

/// What the writer did.
#[derive(Debug, Default)]
pub struct Sent {
    /// Ordinary requests written (fewer than planned when the writer was stopped, or blocked by the server).
    pub ordinary: u64,
    /// For each storm request, when its cancel began to be written (just before the write of the batch it is in);
    /// `None` if it never was.
    pub cancels_written: Vec<Option<Instant>>,
    /// For each ordinary request written, how late after its scheduled time the writer wrote it.
    pub lateness: Vec<Duration>,
}

/// Shared by the writer and the reader: how many replies are due, and until when to wait for them once the writer
/// is done.
#[derive(Debug, Default)]
pub struct Progress {
    replies_due: AtomicU64,
    wait_until: OnceLock<Instant>,
    stop: AtomicBool,
    storm_replies: bool,
}

impl Progress {
    /// For a connection whose cancelled storm requests are answered (`storm_replies`: LSP) or not (MCP).
    pub fn new(storm_replies: bool) -> Self {
        Self {
            storm_replies,
            ..Self::default()
        }
    }

    /// Ask the writer to stop at its next wake (for a plan whose end is not known in advance).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
    }
}

/// Write `plan`'s requests from `start` on, on this (blocking) thread, with `handle` the runtime the connection lives
/// on. A write that blocks past the end of the plan and its grace ends the sending: a server that stopped reading.
pub fn write_plan(
    client: &mut Client,
    handle: &Handle,
    plan: &Plan,
    start: Instant,
    progress: &Progress,
) -> Sent {
    let (ordinary_total, storm_total) = (plan.ordinary_count(), plan.storm_count());
    let mut sent = Sent {
        cancels_written: vec![None; storm_total as usize],
        lateness: Vec::with_capacity(ordinary_total as usize),
        ..Sent::default()
    };
    let give_up = start + plan.duration + plan.grace;
    let (mut storm_sent, mut cancels_sent) = (0, 0);
    let mut cancels_in_batch = Vec::new();
    loop {
        let next = [
            (sent.ordinary < ordinary_total).then(|| plan.ordinary_at(start, sent.ordinary)),
            (storm_sent < storm_total).then(|| plan.storm_at(start, storm_sent)),
            (cancels_sent < storm_total).then(|| plan.storm_at(start, cancels_sent) + CANCEL_LAG),
        ]
        .into_iter()
        .flatten()
        .min();
        let Some(next) = next else { break };
        if progress.stop.load(Ordering::Acquire) {
            break;
        }
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        }
        let now = Instant::now();
        while sent.ordinary < ordinary_total && plan.ordinary_at(start, sent.ordinary) <= now {
            client.queue_work(sent.ordinary + 1, 0);
            sent.lateness
                .push(now - plan.ordinary_at(start, sent.ordinary));
            sent.ordinary += 1;
        }
        // A cancel never goes in the write of its own request: the server reads the request first.
        let storm_written = storm_sent;
        while storm_sent < storm_total && plan.storm_at(start, storm_sent) <= now {
            client.queue_work(STORM_IDS + storm_sent, HELD_MS);
            storm_sent += 1;
        }
        while cancels_sent < storm_written && plan.storm_at(start, cancels_sent) + CANCEL_LAG <= now
        {
            client.queue_cancel(STORM_IDS + cancels_sent);
            cancels_in_batch.push(cancels_sent as usize);
            cancels_sent += 1;
        }
        let due = sent.ordinary
            + if progress.storm_replies {
                cancels_sent
            } else {
                0
            };
        let written = Instant::now();
        for index in cancels_in_batch.drain(..) {
            sent.cancels_written[index] = Some(written);
        }
        let flushed = handle
            .block_on(async { tokio::time::timeout_at(give_up.into(), client.flush()).await });
        progress.replies_due.store(due, Ordering::Release);
        if !matches!(flushed, Ok(Ok(()))) {
            // Blocked past the grace (the server stopped reading), or the connection closed.
            break;
        }
    }
    let _ = progress.wait_until.set(Instant::now() + plan.grace);
    sent
}

/// Read replies until every reply due has come, or the plan's grace after the writer finished, or the connection
/// closed:
/// each reply's id, and when it was read.
pub async fn read_replies(mut replies: Replies, progress: Arc<Progress>) -> Vec<(u64, Instant)> {
    let mut read = Vec::new();
    let mut counted = 0;
    // Wakes the reader now and then to look at the writer's progress when no reply comes.
    let mut look = tokio::time::interval(Duration::from_millis(20));
    loop {
        tokio::select! {
            biased;
            reply = replies.next_reply() => match reply {
                Ok(reply) => {
                    read.push((reply.id, Instant::now()));
                    counted += u64::from(reply.id < STORM_IDS || progress.storm_replies);
                }
                Err(_) => break,
            },
            _ = look.tick() => {}
        }
        if let Some(&wait_until) = progress.wait_until.get() {
            let due = progress.replies_due.load(Ordering::Acquire);
            if counted >= due || Instant::now() > wait_until {
                break;
            }
        }
    }
    read
}
