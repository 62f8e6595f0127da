//! An outgoing call's timeout: fixed, or idle and pushed back by activity up to a maximum.

use std::{future::Future, pin::Pin, task::Context, time::Duration};

use tokio::time::{Instant, Sleep};

use crate::lifecycle::Deadline;

/// What a call's deadline is made of, and the sleep that wakes the call when it may have passed. Set before the
/// call is first polled, in any order; each setting remakes the deadline from the call's start.
pub(super) struct Timeout {
    started: Instant,
    timeout: Option<Duration>,
    // For an idle timeout, the cap on the whole call.
    max_total: Option<Duration>,
    // A moment the call never runs past, whatever its timeout (or without one): its parent request's deadline.
    not_after: Option<Instant>,
    timer: Option<Timer>,
}

/// The deadline as it stands, and its sleep. The sleep is boxed so that the call stays `Unpin` and small; it is
/// made only for a call that has a timeout, when the call is first polled: a call made outside a runtime (where a
/// sleep cannot be made) is fine as long as it is polled inside one, as every future is, and a timeout replaced
/// before that (a peer's default overridden by the call's own) costs no sleep.
struct Timer {
    deadline: Deadline,
    sleep: Option<Pin<Box<Sleep>>>,
}

impl Timeout {
    /// No timeout yet; one set later runs from now.
    pub(super) fn new() -> Self {
        Self {
            started: Instant::now(),
            timeout: None,
            max_total: None,
            not_after: None,
            timer: None,
        }
    }

    pub(super) fn set(&mut self, timeout: Duration) {
        self.timeout = Some(timeout);
        self.arm();
    }

    /// No timeout after all (a maximum set stays, and makes none without a timeout; a cap stays, and is the
    /// deadline).
    pub(super) fn clear(&mut self) {
        self.timeout = None;
        self.timer = None;
        self.arm();
    }

    /// Never later than `at`, whatever the timeout is or becomes.
    pub(super) fn cap(&mut self, at: Instant) {
        self.not_after = Some(self.not_after.map_or(at, |cap| cap.min(at)));
        self.arm();
    }

    pub(super) fn set_max_total(&mut self, max_total: Duration) {
        self.max_total = Some(max_total);
        self.arm();
    }

    /// When the call times out as the deadline stands now, if it has a timeout.
    pub(super) fn at(&self) -> Option<Instant> {
        self.timer.as_ref().map(|timer| timer.deadline.at())
    }

    /// (Re)make the deadline from the call's start, as the timeout, the maximum and the cap now stand. A maximum
    /// without a timeout makes none; a cap without a timeout is the deadline.
    fn arm(&mut self) {
        let deadline = match (self.timeout, self.not_after) {
            (Some(timeout), cap) => {
                let deadline = Deadline::new(self.started, timeout, self.max_total);
                match cap {
                    Some(cap) => deadline.not_after(cap),
                    None => deadline,
                }
            }
            (None, Some(cap)) => Deadline::fixed(cap, Duration::ZERO),
            (None, None) => return,
        };
        let at = deadline.at();
        match &mut self.timer {
            Some(timer) => {
                timer.deadline = deadline;
                if let Some(sleep) = &mut timer.sleep {
                    sleep.as_mut().reset(at);
                }
            }
            None => {
                self.timer = Some(Timer {
                    deadline,
                    sleep: None,
                });
            }
        }
    }

    /// Whether the timeout has passed; registers the waker otherwise. The sleep is set for the deadline as it
    /// stood; when it wakes, the last activity (read only then, so that activity costs the call nothing while it
    /// sleeps) pushes an idle deadline back, and the sleep with it.
    pub(super) fn passed(
        &mut self,
        cx: &mut Context<'_>,
        last_activity: impl Fn() -> Option<Instant>,
    ) -> bool {
        let Some(timer) = &mut self.timer else {
            return false;
        };
        let deadline = timer.deadline.at();
        let sleep = timer
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        while sleep.as_mut().poll(cx).is_ready() {
            if let Some(last) = last_activity() {
                timer.deadline.push_back(last);
            }
            let at = timer.deadline.at();
            if at <= Instant::now() {
                return true;
            }
            sleep.as_mut().reset(at);
        }
        false
    }
}
