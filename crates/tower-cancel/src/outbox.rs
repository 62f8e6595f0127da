//! The connection's outgoing queue: how code behind the stack sends messages to the peer.
//!
//! # Bounds
//!
//! The queue is bounded in bytes, the way the reading side decides: a transport stops reading while
//! [`Outbox::is_full`] (more than [`max_queued_bytes`](Outbox::set_max_queued_bytes) of *replies* wait for the
//! writer) and resumes at [`Outbox::room`]. Replies are what reading makes (one per request read), so stopping the
//! reading bounds them. This side's own requests and cancels are always queued and never stop the reading: they
//! come from the application, not from the peer, and two endpoints that each stopped reading because of their own
//! requests would wait for each other for good. Progress reports are advisory and are dropped instead while the
//! whole queue is over the bound ([`Outbox::send_if_room`]): a handler cannot fill memory with them while the peer
//! reads nothing.

use std::{
    fmt,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
};

use serde::Serialize;
use tokio::sync::{mpsc, Notify};

use crate::message::{Response, WireRequest};

/// How many bytes may wait for the writer before a transport stops reading, by default.
pub const DEFAULT_MAX_QUEUED_BYTES: usize = 8 * 1024 * 1024;

/// A handle to send messages to the peer of one connection. Cloning gives another handle to the same queue.
///
/// Messages are serialized here, by the sender, and queued for the connection's writer in the order they are sent.
#[derive(Clone)]
pub struct Outbox {
    tx: mpsc::UnboundedSender<Outgoing>,
    shared: Arc<Shared>,
}

struct Shared {
    // Bytes sent and not yet handed to the writer's sink, and the replies' share of them.
    queued: AtomicUsize,
    replies: AtomicUsize,
    max: AtomicUsize,
    // Woken when `replies` drops to the bound or below.
    room: Notify,
}

/// One serialized message on its way to the writer. Dereferences to its bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outgoing {
    bytes: Vec<u8>,
    reply: bool,
}

impl std::ops::Deref for Outgoing {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.bytes
    }
}

/// The receiving end of an [`Outbox`], for the transport's writer.
pub struct OutboxReceiver {
    rx: mpsc::UnboundedReceiver<Outgoing>,
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
            replies: AtomicUsize::new(0),
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
    pub fn send_request(&self, request: &WireRequest) -> Result<(), Closed> {
        self.send(request, false)
    }

    /// Send a reply.
    pub fn send_response(&self, response: &Response) -> Result<(), Closed> {
        self.queue(response.to_json().map_err(|_| Closed)?, true)
    }

    /// Send a notification only if the queue has room (progress reports: dropping one is better than buffering
    /// without bound for a peer that does not read).
    pub fn send_if_room(&self, notification: &WireRequest) -> Result<(), NotSent> {
        if self.is_closed() {
            return Err(NotSent::Closed);
        }
        if self.queued_bytes() > self.max() {
            return Err(NotSent::Full);
        }
        self.send(notification, false)
            .map_err(|Closed| NotSent::Closed)
    }

    /// Whether the connection is gone.
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    /// Whether more than the bound of replies waits for the writer: the transport should stop reading.
    pub fn is_full(&self) -> bool {
        self.shared.replies.load(Ordering::Acquire) > self.max()
    }

    /// The bytes waiting for the writer now, replies and everything else.
    pub fn queued_bytes(&self) -> usize {
        self.shared.queued.load(Ordering::Acquire)
    }

    fn max(&self) -> usize {
        self.shared.max.load(Ordering::Relaxed)
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

    fn send(&self, message: &impl Serialize, reply: bool) -> Result<(), Closed> {
        // Serializing our own message types cannot fail: their maps have string keys and their numbers are finite.
        self.queue(serde_json::to_vec(message).map_err(|_| Closed)?, reply)
    }

    fn queue(&self, bytes: Vec<u8>, reply: bool) -> Result<(), Closed> {
        let outgoing = Outgoing { bytes, reply };
        self.shared.add(&outgoing);
        self.tx.send(outgoing).map_err(|unsent| {
            self.shared.remove(&unsent.0);
            Closed
        })
    }
}

impl Shared {
    fn add(&self, outgoing: &Outgoing) {
        let len = outgoing.bytes.len();
        self.queued.fetch_add(len, Ordering::AcqRel);
        if outgoing.reply {
            self.replies.fetch_add(len, Ordering::AcqRel);
        }
    }

    /// Count `outgoing` out; returns the replies' bytes before, for a reply.
    fn remove(&self, outgoing: &Outgoing) -> Option<usize> {
        let len = outgoing.bytes.len();
        self.queued.fetch_sub(len, Ordering::AcqRel);
        outgoing
            .reply
            .then(|| self.replies.fetch_sub(len, Ordering::AcqRel))
    }
}

impl OutboxReceiver {
    /// The next message, or `None` once every outbox is dropped or [`close`](Self::close) was called. Call
    /// [`written`](Self::written) once its bytes are handed on.
    pub async fn recv(&mut self) -> Option<Outgoing> {
        self.rx.recv().await
    }

    /// The next message if one is queued now.
    pub fn try_recv(&mut self) -> Option<Outgoing> {
        self.rx.try_recv().ok()
    }

    /// A received message was handed to the wire: its bytes no longer count against the bound.
    pub fn written(&self, outgoing: &Outgoing) {
        if let Some(before) = self.shared.remove(outgoing) {
            let max = self.shared.max.load(Ordering::Relaxed);
            if before > max && before - outgoing.bytes.len() <= max {
                self.shared.room.notify_waiters();
            }
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
        let progress = WireRequest::notification("notifications/progress", ());
        assert_eq!(outbox.send_if_room(&progress), Err(NotSent::Full));

        let waiting = tokio::spawn({
            let outbox = outbox.clone();
            async move { outbox.room().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        let first = rx.recv().await.unwrap();
        rx.written(&first);
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
            outbox.send_if_room(&WireRequest::notification("n", ())),
            Err(NotSent::Closed)
        );
    }
}
