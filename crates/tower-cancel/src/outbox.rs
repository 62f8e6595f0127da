//! The connection's outgoing queue: how code behind the stack sends messages to the peer.
//!
//! # Bounds
//!
//! The queue is bounded in bytes, the way the reading side decides: a transport stops reading while
//! [`Outbox::is_full`] (more than [`max_queued_bytes`](Outbox::set_max_queued_bytes) wait for the writer) and
//! resumes at [`Outbox::room`]. Replies and this side's own requests and cancels are always queued: there is at
//! most one reply per request read, so stopping the reading bounds them. Progress reports are advisory and are
//! dropped instead when the queue is full ([`Outbox::send_if_room`]): a handler cannot fill memory with them while
//! the peer reads nothing.

use std::{
    fmt,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
};

use serde::Serialize;
use tokio::sync::{mpsc, Notify};

use crate::message::{Request, Response};

/// How many bytes may wait for the writer before a transport stops reading, by default.
pub const DEFAULT_MAX_QUEUED_BYTES: usize = 8 * 1024 * 1024;

/// A handle to send messages to the peer of one connection. Cloning gives another handle to the same queue.
///
/// Messages are serialized here, by the sender, and queued for the connection's writer in the order they are sent.
#[derive(Clone)]
pub struct Outbox {
    tx: mpsc::UnboundedSender<Vec<u8>>,
    shared: Arc<Shared>,
}

struct Shared {
    // Bytes sent and not yet handed to the writer's sink.
    queued: AtomicUsize,
    max: AtomicUsize,
    // Woken when `queued` drops to the bound or below.
    room: Notify,
}

/// The receiving end of an [`Outbox`], for the transport's writer.
pub struct OutboxReceiver {
    rx: mpsc::UnboundedReceiver<Vec<u8>>,
    shared: Arc<Shared>,
}

/// The connection is gone: the message was not sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Closed;

impl fmt::Display for Closed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("connection closed")
    }
}

impl std::error::Error for Closed {}

/// Why [`Outbox::send_if_room`] sent nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotSent {
    /// The queue is over its bound: the peer is not reading.
    Full,
    /// The connection is gone.
    Closed,
}

impl Outbox {
    /// A new outbox, bounded at [`DEFAULT_MAX_QUEUED_BYTES`], and the receiver its messages arrive at.
    pub fn new() -> (Self, OutboxReceiver) {
        let (tx, rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            queued: AtomicUsize::new(0),
            max: AtomicUsize::new(DEFAULT_MAX_QUEUED_BYTES),
            room: Notify::new(),
        });
        let receiver = OutboxReceiver {
            rx,
            shared: shared.clone(),
        };
        (Self { tx, shared }, receiver)
    }

    /// An outbox whose receiver is gone: every send fails with [`Closed`] (for a connection with no wire).
    pub fn closed() -> Self {
        Self::new().0
    }

    /// Set the bound, in bytes, past which the queue is full (every handle to this queue sees it).
    pub fn set_max_queued_bytes(&self, bytes: usize) {
        self.shared.max.store(bytes, Ordering::Relaxed);
        self.shared.room.notify_waiters();
    }

    /// Send a request or a notification.
    pub fn send_request(&self, request: &Request) -> Result<(), Closed> {
        self.send(request)
    }

    /// Send a reply.
    pub fn send_response(&self, response: &Response) -> Result<(), Closed> {
        self.send(response)
    }

    /// Send a notification only if the queue has room (progress reports: dropping one is better than buffering
    /// without bound for a peer that does not read).
    pub fn send_if_room(&self, notification: &Request) -> Result<(), NotSent> {
        if self.is_closed() {
            return Err(NotSent::Closed);
        }
        if self.is_full() {
            return Err(NotSent::Full);
        }
        self.send(notification).map_err(|Closed| NotSent::Closed)
    }

    /// Whether the connection is gone.
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    /// Whether more than the bound waits for the writer.
    pub fn is_full(&self) -> bool {
        self.queued_bytes() > self.shared.max.load(Ordering::Relaxed)
    }

    /// The bytes waiting for the writer now.
    pub fn queued_bytes(&self) -> usize {
        self.shared.queued.load(Ordering::Acquire)
    }

    /// Resolves once the queue is not full (or the connection is gone).
    pub async fn room(&self) {
        loop {
            // Made before the check: a `notify_waiters` between the check and the wait still wakes it.
            let notified = self.shared.room.notified();
            if !self.is_full() || self.is_closed() {
                return;
            }
            notified.await;
        }
    }

    fn send(&self, message: &impl Serialize) -> Result<(), Closed> {
        // Serializing our own message types cannot fail: their maps have string keys and their numbers are finite.
        let bytes = serde_json::to_vec(message).map_err(|_| Closed)?;
        let len = bytes.len();
        self.shared.queued.fetch_add(len, Ordering::AcqRel);
        self.tx.send(bytes).map_err(|_| {
            self.shared.queued.fetch_sub(len, Ordering::AcqRel);
            Closed
        })
    }
}

impl OutboxReceiver {
    /// The next message, or `None` once every outbox is dropped or [`close`](Self::close) was called. Call
    /// [`written`](Self::written) once its bytes are handed on.
    pub async fn recv(&mut self) -> Option<Vec<u8>> {
        self.rx.recv().await
    }

    /// The next message if one is queued now.
    pub fn try_recv(&mut self) -> Option<Vec<u8>> {
        self.rx.try_recv().ok()
    }

    /// `bytes` of a received message were handed to the wire: they no longer count against the bound.
    pub fn written(&self, bytes: usize) {
        let before = self.shared.queued.fetch_sub(bytes, Ordering::AcqRel);
        let max = self.shared.max.load(Ordering::Relaxed);
        if before > max && before - bytes <= max {
            self.shared.room.notify_waiters();
        }
    }

    /// Stop receiving: later sends fail with [`Closed`], and a reader waiting for [`Outbox::room`] is woken.
    pub fn close(&mut self) {
        self.rx.close();
        self.shared.room.notify_waiters();
    }
}

impl Drop for OutboxReceiver {
    fn drop(&mut self) {
        self.shared.room.notify_waiters();
    }
}

impl fmt::Debug for Outbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Outbox")
            .field("closed", &self.is_closed())
            .field("queued_bytes", &self.queued_bytes())
            .finish()
    }
}

impl fmt::Debug for OutboxReceiver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OutboxReceiver").finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_queue_is_full_past_its_bound_until_the_writer_catches_up() {
        let (outbox, mut rx) = Outbox::new();
        outbox.set_max_queued_bytes(150);
        let reply = Response::ok(1.into(), serde_json::json!("x".repeat(80)));
        outbox.send_response(&reply).unwrap();
        assert!(!outbox.is_full(), "at or under the bound");
        outbox.send_response(&reply).unwrap();
        assert!(outbox.is_full(), "replies are queued past it");
        let progress = Request::notification("notifications/progress", ());
        assert_eq!(outbox.send_if_room(&progress), Err(NotSent::Full));

        let waiting = tokio::spawn({
            let outbox = outbox.clone();
            async move { outbox.room().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        let first = rx.recv().await.unwrap();
        rx.written(first.len());
        waiting.await.unwrap();
        assert!(!outbox.is_full());
        assert_eq!(outbox.send_if_room(&progress), Ok(()));
    }

    #[tokio::test]
    async fn closing_the_receiver_fails_sends_and_wakes_a_waiting_reader() {
        let (outbox, mut rx) = Outbox::new();
        outbox.set_max_queued_bytes(0);
        outbox
            .send_response(&Response::ok(1.into(), serde_json::Value::Null))
            .unwrap();
        let waiting = tokio::spawn({
            let outbox = outbox.clone();
            async move { outbox.room().await }
        });
        tokio::task::yield_now().await;
        rx.close();
        waiting.await.unwrap();
        assert_eq!(
            outbox.send_response(&Response::ok(2.into(), serde_json::Value::Null)),
            Err(Closed)
        );
        assert_eq!(
            outbox.send_if_room(&Request::notification("n", ())),
            Err(NotSent::Closed)
        );
    }
}
