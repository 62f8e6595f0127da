//! A session's reading: the agent's frames, stopped while the session's outgoing queue is full, and the stall
//! timeout that ends a session whose agent reads too little of what it is sent (the stream driver's rule).

use std::{
    pin::Pin,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::Duration,
};

use futures_util::{stream::SplitStream, StreamExt};
use tokio::time::{Instant, Sleep};
use tokio_tungstenite::tungstenite::{Error as WsError, Message as WsMessage};

use super::{outgoing::Queue, upgrade::Socket};

/// What the reading gives.
pub(super) enum Read {
    /// A frame (`None` once the socket is closed).
    Frame(Option<Result<WsMessage, WsError>>),
    /// The reading stayed stopped for the stall timeout: the agent does not read.
    Stalled,
}

pub(super) struct Reading {
    frames: SplitStream<Socket>,
    queue: Queue,
    stall_timeout: Duration,
    // Armed when the reading stops; the session ends if it is still stopped when it passes.
    stall: Pin<Box<Sleep>>,
    // Held while the reading is stopped: the app's count of such sessions.
    stopped: Option<Stopped>,
    stopped_count: Arc<AtomicUsize>,
}

/// One session whose reading is stopped, counted in the app's stats while it lasts.
struct Stopped(Arc<AtomicUsize>);

impl Drop for Stopped {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Reading {
    /// Read `frames` while `queue` has room; `stopped` counts the sessions whose reading is stopped.
    pub(super) fn new(
        frames: SplitStream<Socket>,
        queue: Queue,
        stall_timeout: Duration,
        stopped: Arc<AtomicUsize>,
    ) -> Self {
        Self {
            frames,
            queue,
            stall_timeout,
            stall: Box::pin(tokio::time::sleep(Duration::ZERO)),
            stopped: None,
            stopped_count: stopped,
        }
    }

    /// The next frame, once the outgoing queue has room for what it may make the app answer. Cancel-safe: a
    /// stopped reading keeps its stall deadline across calls.
    pub(super) async fn next(&mut self) -> Read {
        loop {
            if !self.queue.is_full() {
                if self.stopped.take().is_some() {
                    tracing::debug!("the agent read its replies: reading again");
                }
                return Read::Frame(self.frames.next().await);
            }
            if self.stopped.is_none() {
                tracing::debug!("the agent is not reading its replies: reading stopped");
                self.stall
                    .as_mut()
                    .reset(Instant::now() + self.stall_timeout);
                self.stopped_count.fetch_add(1, Ordering::AcqRel);
                self.stopped = Some(Stopped(self.stopped_count.clone()));
            }
            tokio::select! {
                () = self.queue.room() => {}
                () = self.stall.as_mut() => {
                    tracing::warn!(timeout = ?self.stall_timeout, "the agent read too little of its replies: closing the session");
                    return Read::Stalled;
                }
            }
        }
    }
}
