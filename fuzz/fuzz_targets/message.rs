//! `Message::from_slice` on arbitrary bytes.
//!
//! # Invariants checked
//!
//! - A message, written out again, reads back as the same message.
//! - Bytes that are not JSON get -32700 without an id; JSON that is not a message gets -32600 (so may bytes that
//!   are not UTF-8 inside a member nobody reads). The reply the driver sends for either is itself a message that
//!   reads back as that reply.

#![no_main]

use libfuzzer_sys::fuzz_target;
use serde::de::IgnoredAny;
use tower_cancel::{message::code, Message, Response};
use tower_cancel_fuzz::same_json;

fuzz_target!(|data: &[u8]| {
    match Message::from_slice(data) {
        Ok(Message::Request(request)) => {
            let again = match reparse(&request) {
                Message::Request(again) => again,
                other => panic!("a request read back as {other:?}"),
            };
            assert_eq!(again.id(), request.id());
            assert_eq!(again.method(), request.method());
            assert_eq!(
                again.params().map(|raw| raw.get()),
                request.params().map(|raw| raw.get())
            );
        }
        Ok(Message::Response(response)) => match reparse(&response) {
            Message::Response(again) => assert_same_response(&again, &response),
            other => panic!("a response read back as {other:?}"),
        },
        Err(invalid) => {
            // JSON text is UTF-8 (RFC 8259 §8.1), but skipping a value does not decode its strings: bytes that are
            // not UTF-8 inside a member nobody reads go unnoticed (on purpose, see tests/tests/bad_input.rs), so
            // such a message may be answered -32600 for what else is wrong with it.
            let syntax_ok = serde_json::from_slice::<IgnoredAny>(data).is_ok();
            let utf8 = std::str::from_utf8(data).is_ok();
            match invalid.error.code {
                code::PARSE_ERROR => {
                    assert!(!syntax_ok || !utf8, "-32700 for JSON");
                    assert_eq!(invalid.id, None, "an id read from bytes that are not JSON");
                }
                code::INVALID_REQUEST => assert!(syntax_ok, "-32600 for bytes that are not JSON"),
                other => panic!("error code {other}"),
            }
            let reply = Response::error(invalid.id, invalid.error);
            match reparse(&reply) {
                Message::Response(again) => assert_eq!(again, reply),
                other => panic!("an error reply read back as {other:?}"),
            }
        }
    }
});

fn reparse(message: &impl serde::Serialize) -> Message {
    let bytes = serde_json::to_vec(message).expect("a message serializes");
    Message::from_slice(&bytes).unwrap_or_else(|invalid| {
        panic!(
            "{} does not read back: {invalid}",
            String::from_utf8_lossy(&bytes)
        )
    })
}

fn assert_same_response(a: &Response, b: &Response) {
    assert_eq!(a.id, b.id);
    match (&a.outcome, &b.outcome) {
        (Ok(a), Ok(b)) => assert!(same_json(a, b), "{a} != {b}"),
        (Err(a), Err(b)) => {
            assert_eq!((a.code, &a.message), (b.code, &b.message));
            match (&a.data, &b.data) {
                (Some(a), Some(b)) => assert!(same_json(a, b), "{a} != {b}"),
                (a, b) => assert_eq!(a, b),
            }
        }
        (a, b) => panic!("{a:?} read back as {b:?}"),
    }
}
