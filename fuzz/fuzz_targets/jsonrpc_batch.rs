//! A JSON-RPC over HTTP POST body parsed into its messages (batches on, as the JSON-RPC front end reads it, and
//! off, as the MCP one does).
//!
//! # Invariants checked
//!
//! - Without batches, the body is one message, as `Message::from_slice` reads it.
//! - With batches of at most `MAX` (small, so that the bound is often crossed): a body that is a JSON array of
//!   0 < n <= `MAX` values is a batch of n; an empty array, and an array of more than `MAX`, is one invalid
//!   request (-32600) without an id; a body that does not start with `[` is one message. A batch has at most one element for
//!   every two bytes of body; each element is parsed on its own (as `Message::from_slice` reads its text), but
//!   an array inside is an invalid request without an id.
//! - Parsing holds at most `peak::allocation_bound` of the body's length.

#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::{value::RawValue, Value};
use tower_cancel::{message::code, message::InvalidMessage, Message};
use tower_cancel_fuzz::peak::{bounded, Counting};
use tower_cancel_http::fuzzing::jsonrpc::{parse_body, Body};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The batch bound the target parses with.
const MAX: usize = 16;

fuzz_target!(|data: &[u8]| {
    let alone = render(&Message::from_slice(data));
    match bounded(data.len(), || parse_body(data, None)) {
        Body::One(message) => assert_eq!(render(&message), alone),
        Body::Batch(_) => panic!("a batch without batches"),
    }

    let parsed = bounded(data.len(), || parse_body(data, Some(MAX)));
    let first = data
        .iter()
        .copied()
        .find(|byte| !byte.is_ascii_whitespace());
    match serde_json::from_slice::<Value>(data) {
        Ok(Value::Array(values)) if values.is_empty() || values.len() > MAX => match &parsed {
            Body::One(Err(invalid)) => {
                assert_eq!((invalid.id.as_ref(), invalid.error.code), (None, code::INVALID_REQUEST));
            }
            other => panic!("a batch of {} read as {other:?}", values.len()),
        },
        Ok(Value::Array(values)) => match &parsed {
            Body::Batch(elements) => assert_eq!(elements.len(), values.len(), "elements"),
            other => panic!("a batch of {} read as {other:?}", values.len()),
        },
        _ => {}
    }
    match parsed {
        Body::One(message) => {
            let batch = serde_json::from_slice::<Vec<&RawValue>>(data);
            if first != Some(b'[') || batch.is_err() {
                assert_eq!(render(&message), alone);
            } else {
                // A JSON array read as one message: it was empty or over the bound.
                let len = batch.map_or(0, |elements| elements.len());
                assert!(len == 0 || len > MAX, "a batch of {len} read as one message");
            }
        }
        Body::Batch(elements) => {
            assert_eq!(first, Some(b'['), "a batch that is not an array");
            assert!(
                !elements.is_empty() && elements.len() <= MAX.min(data.len() / 2),
                "{} elements",
                elements.len()
            );
            let texts: Vec<&RawValue> = serde_json::from_slice(data).expect("a batch is an array");
            assert_eq!(texts.len(), elements.len());
            for (text, element) in texts.iter().zip(&elements) {
                let text = text.get().as_bytes();
                if text.first() == Some(&b'[') {
                    match element {
                        Err(invalid) => {
                            assert_eq!(
                                (invalid.id.as_ref(), invalid.error.code),
                                (None, code::INVALID_REQUEST)
                            );
                        }
                        Ok(_) => panic!("a batch inside a batch read as a message"),
                    }
                } else {
                    assert_eq!(render(element), render(&Message::from_slice(text)));
                }
            }
        }
    }
});

/// A reading as text to compare: the message written out, or the error.
fn render(message: &Result<Message, InvalidMessage>) -> String {
    match message {
        Ok(Message::Request(request)) => serde_json::to_string(request).expect("serializes"),
        Ok(Message::Response(response)) => serde_json::to_string(response).expect("serializes"),
        Err(invalid) => format!("{invalid:?}"),
    }
}
