//! The adaptive mode ([`Server::adaptive_requests`](crate::Server::adaptive_requests)): a request is polled once
//! where it arrives, by the read loop, and moved to a task of its own only if it is still pending after that poll.
//!
//! A handler that answers at once (most requests of an editor or an agent) then costs no task and no trip through
//! the scheduler, and one that waits (on I/O, a timer, a lock) or goes on computing after an await no longer shares
//! the read loop's task with the reading of the connection's frames. What the read loop cannot move is the first
//! poll itself: a handler that computes before its first await would hold the reading up for as long. So the first
//! polls are timed, and while they take longer than a task costs many times over, requests are spawned from the
//! start, as in the spawned mode; one in [`PROBE_EVERY`] is still polled in place, so that the connection notices
//! when its handlers become quick again.

use std::{
    task::{Context, Poll},
    time::{Duration, Instant},
};

use futures_util::task::noop_waker_ref;

use crate::requests::{Movable, Started};

/// Above this mean time of their first poll, a connection's requests are spawned without one: a task costs 1 to
/// 2 µs (BENCHMARKS.md, figure 6), and a first poll this long delays every frame behind it, cancels included.
pub(crate) const SPAWN_FIRST_ABOVE: Duration = Duration::from_micros(10);

/// Below this mean, requests are polled in place again. Under [`SPAWN_FIRST_ABOVE`], so that a connection whose
/// handlers take about the threshold does not switch at every request.
pub(crate) const POLL_FIRST_BELOW: Duration = Duration::from_micros(5);

/// A first poll counts for at most this long in the mean: a poll that took longer because its thread was
/// preempted (a loaded machine) must not switch the connection alone, and a run of long ones switches it within
/// three requests however long they are.
pub(crate) const SAMPLE_CAP: Duration = Duration::from_micros(32);

/// While requests are spawned from the start, one in this many is still polled in place and timed.
pub(crate) const PROBE_EVERY: u32 = 64;

/// The weight of the newest first poll in the mean, as a power of two (1/8): with [`SAMPLE_CAP`], a single slow
/// poll does not switch the connection; a run of them does, within three requests.
const MEAN_SHIFT: u32 = 3;

/// What the adaptive mode knows of a connection's handlers: the moving mean of their first polls.
#[derive(Debug, Default)]
pub(crate) struct Pace {
    /// The mean, in nanoseconds.
    mean_ns: u64,
    spawn_first: bool,
    /// Requests spawned without a first poll since the last probe.
    since_probe: u32,
}

impl Pace {
    /// Start `future`: poll it once here and hand back its outcome if it is done, else move it to a task; or spawn
    /// it at once while first polls are slow.
    pub(crate) fn start<F>(&mut self, mut future: Movable) -> Started<F> {
        if self.spawn_first {
            self.since_probe += 1;
            if self.since_probe < PROBE_EVERY {
                return Started::Task(tokio::spawn(future));
            }
            self.since_probe = 0;
        }
        // No waker of the read loop's: a future still pending is polled by its task at once, which registers the
        // task's waker in place of this one (as every well-behaved future replaces the waker it keeps), and which
        // sees whatever happened in between.
        let mut cx = Context::from_waker(noop_waker_ref());
        let began = Instant::now();
        let polled = future.as_mut().poll(&mut cx);
        self.record(began.elapsed());
        match polled {
            Poll::Ready(outcome) => Started::Done(outcome),
            Poll::Pending => Started::Task(tokio::spawn(future)),
        }
    }

    fn record(&mut self, took: Duration) {
        let took = u64::try_from(took.min(SAMPLE_CAP).as_nanos()).unwrap_or(u64::MAX);
        // mean += (took - mean) / 8, in integers that cannot overflow.
        self.mean_ns = self.mean_ns - (self.mean_ns >> MEAN_SHIFT) + (took >> MEAN_SHIFT);
        let mean = Duration::from_nanos(self.mean_ns);
        if !self.spawn_first && mean > SPAWN_FIRST_ABOVE {
            tracing::debug!(
                ?mean,
                "first polls are slow: spawning requests from the start"
            );
            self.spawn_first = true;
            self.since_probe = 0;
        } else if self.spawn_first && mean < POLL_FIRST_BELOW {
            tracing::debug!(
                ?mean,
                "first polls are quick again: polling requests in place first"
            );
            self.spawn_first = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record_times(pace: &mut Pace, took: Duration, times: usize) {
        for _ in 0..times {
            pace.record(took);
        }
    }

    #[test]
    fn one_or_two_slow_first_polls_among_quick_ones_do_not_switch() {
        // However slow: a thread preempted for a whole time slice in the middle of a quick poll.
        let mut pace = Pace::default();
        record_times(&mut pace, Duration::from_micros(1), 100);
        record_times(&mut pace, Duration::from_secs(1), 2);
        assert!(!pace.spawn_first);
    }

    #[test]
    fn a_run_of_slow_first_polls_switches_and_quick_ones_switch_back() {
        let mut pace = Pace::default();
        record_times(&mut pace, Duration::from_micros(50), 2);
        assert!(!pace.spawn_first);
        pace.record(Duration::from_micros(50));
        assert!(pace.spawn_first, "the third in a row switches");
        // Between the two thresholds: no switch either way.
        record_times(&mut pace, Duration::from_micros(7), 100);
        assert!(pace.spawn_first);
        record_times(&mut pace, Duration::from_micros(1), 100);
        assert!(!pace.spawn_first);
        record_times(&mut pace, Duration::from_micros(7), 100);
        assert!(!pace.spawn_first);
    }

    #[test]
    fn the_mean_saturates_instead_of_overflowing() {
        let mut pace = Pace::default();
        record_times(&mut pace, Duration::MAX, 100);
        assert!(pace.spawn_first);
    }
}
