//! The connection's outgoing channel: how code behind the stack sends messages to the peer.

use std::fmt;

use serde::Serialize;
use tokio::sync::mpsc;

use crate::message::{Request, Response};

/// A handle to send messages to the peer of one connection. The transport creates it and puts a clone in every
/// request's extensions; progress reports go through it.
///
/// Messages are serialized here, by the sender, and queued for the connection's writer in the order they are sent.
#[derive(Clone)]
pub struct Outbox {
    tx: mpsc::UnboundedSender<Vec<u8>>,
}

/// The receiving end of an [`Outbox`], for the transport's writer.
pub type OutboxReceiver = mpsc::UnboundedReceiver<Vec<u8>>;

/// The connection is gone: the message was not sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Closed;

impl fmt::Display for Closed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("connection closed")
    }
}

impl std::error::Error for Closed {}

impl Outbox {
    /// A new outbox and the receiver its messages arrive at.
    pub fn new() -> (Self, OutboxReceiver) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Self { tx }, rx)
    }

    /// Send a request or a notification.
    pub fn send_request(&self, request: &Request) -> Result<(), Closed> {
        self.send(request)
    }

    /// Send a reply.
    pub fn send_response(&self, response: &Response) -> Result<(), Closed> {
        self.send(response)
    }

    /// Whether the connection is gone.
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    fn send(&self, message: &impl Serialize) -> Result<(), Closed> {
        // Serializing our own message types cannot fail: their maps have string keys and their numbers are finite.
        let bytes = serde_json::to_vec(message).map_err(|_| Closed)?;
        self.tx.send(bytes).map_err(|_| Closed)
    }
}

impl fmt::Debug for Outbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Outbox")
            .field("closed", &self.is_closed())
            .finish()
    }
}
