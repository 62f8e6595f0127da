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
//!
//! # Buffers
//!
//! A message is serialized by its sender, once, into a buffer of its own. A writer gives each buffer back once
//! written ([`OutboxReceiver::recycle`]), and a later message is serialized into it: on a busy connection no
//! buffer is allocated by the reading task and freed by the writer's, which with glibc's allocator makes the two
//! threads wait for each other's lock on the allocator's arena.

use std::{
    fmt,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, OnceLock,
    },
};

use crossbeam_queue::ArrayQueue;
use serde::Serialize;
use tokio::sync::{mpsc, Notify};

use crate::message::{Response, WireRequest};

/// How many bytes may wait for the writer before a transport stops reading, by default.
pub const DEFAULT_MAX_QUEUED_BYTES: usize = 8 * 1024 * 1024;

/// How many written buffers an outbox keeps for its next messages (as fast as 32 on a busy connection, and a
/// quarter of the queue's memory).
const SPARE_BUFFERS: usize = 8;

/// A new buffer's capacity: most replies fit.
const INITIAL_CAPACITY: usize = 128;

/// The largest buffer kept for reuse: one that a large message grew is freed rather than held by an idle
/// connection.
const MAX_SPARE_CAPACITY: usize = 1024;

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
    // Buffers the writer gave back, for the next messages: made by the first one given back, so that an outbox
    // whose writer never gives any back (HTTP bodies, a placeholder) costs nothing for it. Boxed: crossbeam pads
    // the queue's ends to 128 bytes each, which would otherwise grow and align every outbox's state.
    spare: OnceLock<Box<ArrayQueue<Vec<u8>>>>,
}

/// One serialized message on its way to the writer. Dereferences to its JSON.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outgoing {
    // Nothing else: the connection's channel holds its messages in blocks of 32, allocated whole.
    bytes: Vec<u8>,
    reply: bool,
}

impl std::ops::Deref for Outgoing {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.bytes
    }
}

impl Outgoing {
    /// Serialize a message with `write` into `bytes`, emptied first.
    fn serialize(
        mut bytes: Vec<u8>,
        reply: bool,
        write: impl FnOnce(&mut Vec<u8>) -> serde_json::Result<()>,
    ) -> serde_json::Result<Self> {
        bytes.clear();
        write(&mut bytes)?;
        Ok(Self { bytes, reply })
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
            spare: OnceLock::new(),
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
        self.queue(true, |out| response.write_json(out))
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
        self.queue(reply, |out| serde_json::to_writer(out, message))
    }

    fn queue(
        &self,
        reply: bool,
        write: impl FnOnce(&mut Vec<u8>) -> serde_json::Result<()>,
    ) -> Result<(), Closed> {
        let buffer = self
            .shared
            .spare
            .get()
            .and_then(|spare| spare.pop())
            .unwrap_or_else(|| Vec::with_capacity(INITIAL_CAPACITY));
        // Serializing our own message types cannot fail: their maps have string keys and their numbers are finite.
        let outgoing = Outgoing::serialize(buffer, reply, write).map_err(|_| Closed)?;
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

    /// Give back the buffer of a message that was written, for a later message to be serialized into (a buffer
    /// grown past a kilobyte, or one more than the outbox keeps, is freed).
    pub fn recycle(&self, outgoing: Outgoing) {
        if outgoing.bytes.capacity() <= MAX_SPARE_CAPACITY {
            // A full queue of spares: this one is freed.
            let spare = self
                .shared
                .spare
                .get_or_init(|| Box::new(ArrayQueue::new(SPARE_BUFFERS)));
            let _ = spare.push(outgoing.bytes);
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
    async fn a_written_buffer_carries_the_next_message_and_nothing_of_the_last() {
        let (outbox, mut rx) = Outbox::new();
        let long = Response::ok(1.into(), serde_json::json!("x".repeat(300)));
        outbox.send_response(&long).unwrap();
        let first = rx.recv().await.unwrap();
        let buffer = first.bytes.as_ptr();
        rx.written(&first);
        rx.recycle(first);
        assert_eq!(
            outbox.queued_bytes(),
            0,
            "the bytes counted in are counted out"
        );

        let short = Response::ok(2.into(), serde_json::json!("y"));
        outbox.send_response(&short).unwrap();
        let second = rx.recv().await.unwrap();
        assert_eq!(
            second.bytes.as_ptr(),
            buffer,
            "serialized into the buffer given back"
        );
        let json = serde_json::to_vec(&short).unwrap();
        assert_eq!(&second[..], &json[..]);
    }

    #[tokio::test]
    async fn a_grown_buffer_is_not_kept() {
        let (outbox, mut rx) = Outbox::new();
        outbox
            .send_response(&Response::ok(1.into(), serde_json::json!("x".repeat(5000))))
            .unwrap();
        let large = rx.recv().await.unwrap();
        rx.recycle(large);
        assert_eq!(spares(&outbox), None, "nothing kept, so no queue made");
    }

    #[tokio::test]
    async fn the_spare_queue_is_made_by_the_first_buffer_given_back() {
        let (outbox, mut rx) = Outbox::new();
        outbox
            .send_response(&Response::ok(1.into(), 1.into()))
            .unwrap();
        assert_eq!(spares(&outbox), None, "an outbox costs no queue until then");
        let written = rx.recv().await.unwrap();
        rx.recycle(written);
        assert_eq!(spares(&outbox), Some(1));
    }

    #[test]
    fn a_message_on_its_way_is_no_larger_than_its_buffer_and_a_word() {
        // The channel allocates its blocks of 32 messages whole, with each connection's first message.
        assert!(std::mem::size_of::<Outgoing>() <= 32);
    }

    /// How many buffers the outbox keeps, if it made its queue.
    fn spares(outbox: &Outbox) -> Option<usize> {
        outbox.shared.spare.get().map(|spare| spare.len())
    }

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
