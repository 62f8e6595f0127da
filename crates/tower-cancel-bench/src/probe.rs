//! When handlers stop: the guard every target's handler holds while it works.
//!
//! MCP answers nothing to a cancelled request, so its cancel latency is the time from the cancel frame written to
//! the handler stopped. The guard records that moment, for every target alike.

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicU64, Ordering},
        Mutex, OnceLock,
    },
    time::{Duration, Instant},
};

/// Held by a handler while it works on request `tag`. Dropped before [`Work::done`], it records that the handler
/// stopped (its future was dropped, or it returned early on a cancel).
#[derive(Debug)]
pub struct Work {
    tag: u64,
    done: bool,
}

impl Work {
    /// A handler begins work on `tag`.
    pub fn start(tag: u64) -> Self {
        Self { tag, done: false }
    }

    /// The handler finished its work normally.
    pub fn done(mut self) {
        self.done = true;
    }
}

impl Drop for Work {
    fn drop(&mut self) {
        if !self.done {
            let now = Instant::now();
            stops().lock().unwrap().insert(self.tag, now);
        }
    }
}

fn stops() -> &'static Mutex<HashMap<u64, Instant>> {
    static STOPS: OnceLock<Mutex<HashMap<u64, Instant>>> = OnceLock::new();
    STOPS.get_or_init(Default::default)
}

/// When the handler for `tag` stopped, if it did; the record is taken.
pub fn take_stop(tag: u64) -> Option<Instant> {
    stops().lock().unwrap().remove(&tag)
}

/// Wait up to `patience` for the handler of `tag` to stop; when it did. It yields between looks, so the server's
/// tasks run meanwhile, even on a single-threaded runtime.
pub async fn wait_for_stop(tag: u64, patience: Duration) -> Option<Instant> {
    let deadline = Instant::now() + patience;
    loop {
        if let Some(stopped) = take_stop(tag) {
            return Some(stopped);
        }
        if Instant::now() > deadline {
            return None;
        }
        tokio::task::yield_now().await;
    }
}

/// Forget every stop recorded (between runs).
pub fn clear() {
    stops().lock().unwrap().clear();
}

/// The tag of the handler that last began its work, for a client that must wait until its request runs
/// ([`mark_started`], [`wait_for_start`]: the HTTP workloads, which hold one request at a time).
static LAST_STARTED: AtomicU64 = AtomicU64::new(u64::MAX);

/// A handler has begun work on `tag` (its [`Work`] guard is held).
pub fn mark_started(tag: u64) {
    LAST_STARTED.store(tag, Ordering::Release);
}

/// Wait up to `patience` for the handler of `tag` to begin; whether it did. It yields between looks, as
/// [`wait_for_stop`] does.
pub async fn wait_for_start(tag: u64, patience: Duration) -> bool {
    let deadline = Instant::now() + patience;
    while LAST_STARTED.load(Ordering::Acquire) != tag {
        if Instant::now() > deadline {
            return false;
        }
        tokio::task::yield_now().await;
    }
    true
}

/// The arguments of one unit of work.
#[derive(Clone, Copy, Debug, serde::Deserialize)]
pub struct WorkParams {
    /// How long the handler sleeps, in milliseconds (0: it answers at once).
    pub ms: u64,
    /// Which request this is, for [`take_stop`].
    #[serde(default)]
    pub tag: u64,
    /// Whether the handler awaits once before its work: a handler ready on its first poll never has the stack
    /// arm a waker or a timer, one that awaits does (as real handlers do).
    #[serde(default)]
    pub yields: bool,
}

/// The work itself: await once if asked, then sleep `ms` (nothing for 0), all the while holding the guard.
pub async fn work(params: WorkParams) {
    let guard = Work::start(params.tag);
    if params.yields {
        tokio::task::yield_now().await;
    }
    if params.ms > 0 {
        tokio::time::sleep(Duration::from_millis(params.ms)).await;
    }
    guard.done();
}
