//! JSON-RPC over HTTP: a POST body parsed into its messages.

use tower_cancel::{message::InvalidMessage, Message};

use crate::body::{self, Messages};

/// What a POST carried: a mirror of the front end's private reading.
#[derive(Debug)]
pub enum Body {
    /// One message, or what made it unreadable.
    One(Result<Message, InvalidMessage>),
    /// A batch, each element parsed on its own.
    Batch(Vec<Result<Message, InvalidMessage>>),
}

/// A POST body's messages, as the JSON-RPC front end (batches of at most `max_batch_len`) or the MCP one
/// (`None`: no batches) parses them.
pub fn parse_body(bytes: &[u8], max_batch_len: Option<usize>) -> Body {
    match body::parse(bytes, max_batch_len) {
        Messages::One(message) => Body::One(message),
        Messages::Batch(messages) => Body::Batch(messages),
    }
}

/// Whether `Content-Type` is JSON, as every front end checks it.
pub fn is_json(headers: &http::HeaderMap) -> bool {
    body::check_json(headers).is_ok()
}
