//! A session's outgoing queue: the envelopes the app answers with and the pongs it owes, on their way to the
//! writer, counted in bytes until the writer has handed them to the socket.
//!
//! The rule is the stream driver's (see [`tower_cancel::outbox`]): everything queued here answers something the
//! agent sent, so the reader stops reading while more than the bound waits, and resumes once the writer brings it
//! back under. An agent that sends and never reads fills the queue once, and then is read no more.
//!
//! A pong is counted too. The WebSocket library answers a ping as it reads it, in a write buffer of its own that
//! grows without bound while the agent does not read; so each ping read queues a [`Outgoing::Flush`] that costs
//! its pong's bytes and is released only once the writer has flushed the socket, pong included.

use std::sync::{
    atomic::{AtomicUsize, Ordering},
    Arc,
};

use tokio::sync::{mpsc, Notify};

/// A pong frame's header: two bytes (a server's frames are not masked, and a ping's payload is at most 125 bytes).
const PONG_HEADER_BYTES: usize = 2;

/// One thing for the writer.
#[derive(Debug)]
pub(super) enum Outgoing {
    /// An envelope, as text.
    Text(String),
    /// Flush the socket: the pong the library queued for a ping is written with it. Holds the pong's bytes.
    Flush(usize),
}

impl Outgoing {
    /// The pong owed for a ping of `payload` bytes.
    pub(super) fn pong(payload: usize) -> Self {
        Self::Flush(PONG_HEADER_BYTES + payload)
    }

    fn bytes(&self) -> usize {
        match self {
            Self::Text(text) => text.len(),
            Self::Flush(bytes) => *bytes,
        }
    }
}

/// The sending side: the session's reader and its calls' tasks. Clones send to the same queue.
#[derive(Clone, Debug)]
pub(super) struct Queue {
    tx: mpsc::UnboundedSender<Outgoing>,
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    // Bytes queued and not yet handed to the socket, this session's; `app` is every session's.
    queued: AtomicUsize,
    app: Arc<AtomicUsize>,
    max: usize,
    // Woken when `queued` falls to the bound or below, and when the writer is gone.
    room: Notify,
}

/// The writer's side.
#[derive(Debug)]
pub(super) struct Receiver {
    rx: mpsc::UnboundedReceiver<Outgoing>,
    shared: Arc<Shared>,
    // The bytes of the item taken and not yet written: still counted, and let go if the writer is dropped.
    in_hand: usize,
}

/// A queue bounded at `max` bytes, whose bytes are also counted in `app` (the app's total, for its stats).
pub(super) fn queue(max: usize, app: Arc<AtomicUsize>) -> (Queue, Receiver) {
    let (tx, rx) = mpsc::unbounded_channel();
    let shared = Arc::new(Shared {
        queued: AtomicUsize::new(0),
        app,
        max,
        room: Notify::new(),
    });
    let receiver = Receiver {
        rx,
        shared: shared.clone(),
        in_hand: 0,
    };
    (Queue { tx, shared }, receiver)
}

impl Queue {
    /// Queue `item`; dropped if the writer is gone (the agent is: nothing left to tell it).
    pub(super) fn send(&self, item: Outgoing) {
        let bytes = item.bytes();
        self.shared.add(bytes);
        if self.tx.send(item).is_err() {
            self.shared.remove(bytes);
        }
    }

    /// Whether more than the bound waits: the reader stops reading.
    pub(super) fn is_full(&self) -> bool {
        self.shared.queued.load(Ordering::Acquire) > self.shared.max
    }

    /// Resolves once the queue is not full, or the writer is gone.
    pub(super) async fn room(&self) {
        loop {
            // Made before the check: a wake-up between the check and the wait is not lost.
            let told = self.shared.room.notified();
            if !self.is_full() || self.tx.is_closed() {
                return;
            }
            told.await;
        }
    }
}

impl Shared {
    fn add(&self, bytes: usize) {
        self.queued.fetch_add(bytes, Ordering::AcqRel);
        self.app.fetch_add(bytes, Ordering::AcqRel);
    }

    fn remove(&self, bytes: usize) {
        let before = self.queued.fetch_sub(bytes, Ordering::AcqRel);
        self.app.fetch_sub(bytes, Ordering::AcqRel);
        if before > self.max && before - bytes <= self.max {
            self.room.notify_waiters();
        }
    }
}

impl Receiver {
    /// The next item, or `None` once every [`Queue`] is dropped. Its bytes count until [`written`](Self::written).
    pub(super) async fn recv(&mut self) -> Option<Outgoing> {
        self.release();
        let item = self.rx.recv().await?;
        self.in_hand = item.bytes();
        Some(item)
    }

    /// The item last received is in the socket: its bytes no longer count.
    pub(super) fn written(&mut self) {
        self.release();
    }

    fn release(&mut self) {
        let bytes = std::mem::take(&mut self.in_hand);
        if bytes > 0 {
            self.shared.remove(bytes);
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        // What was never written stops counting, and a reader waiting for room is woken (to find the writer gone).
        self.rx.close();
        self.release();
        while let Ok(item) = self.rx.try_recv() {
            self.shared.remove(item.bytes());
        }
        self.shared.room.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn full_past_the_bound_until_the_writer_catches_up_and_nothing_counts_once_it_is_gone() {
        let app = Arc::new(AtomicUsize::new(0));
        let (queue, mut receiver) = super::queue(10, app.clone());
        queue.send(Outgoing::Text("12345678".into()));
        assert!(!queue.is_full(), "at or under the bound");
        queue.send(Outgoing::pong(4));
        assert!(queue.is_full(), "a pong counts: 8 + 2 + 4 bytes");
        let waiting = tokio::spawn({
            let queue = queue.clone();
            async move { queue.room().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        assert!(matches!(receiver.recv().await, Some(Outgoing::Text(_))));
        assert!(queue.is_full(), "taken is not written");
        receiver.written();
        waiting.await.unwrap();
        assert_eq!(app.load(Ordering::Acquire), 6);

        queue.send(Outgoing::Text("x".repeat(20)));
        drop(receiver);
        assert_eq!(app.load(Ordering::Acquire), 0, "dropped unwritten");
        queue.send(Outgoing::Text("late".into()));
        assert_eq!(app.load(Ordering::Acquire), 0, "sent to no one");
        queue.room().await;
    }
}
