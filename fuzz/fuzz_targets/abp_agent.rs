//! An ABP agent's reading of what the app sends: the envelope (`Envelope::from_text`), then the payload its
//! type calls for (`payload_as`: `initialize-result`, `capabilities/call-result`, `capabilities/cancel-result`,
//! `error`, `progress`). The frame is also tried as the payload of each of those types.
//!
//! # Invariants checked
//!
//! - An envelope has an id of at most `MAX_ID_BYTES`; written out, it reads back the same.
//! - A payload is read only from a JSON object; one read, written in an envelope of its type, reads back the
//!   same.
//! - Reading the envelope and its payload holds at most `peak::allocation_bound` of the frame's length.

#![no_main]

use libfuzzer_sys::fuzz_target;
use serde::{de::DeserializeOwned, Serialize};
use serde_json::Value;
use tower_cancel_fuzz::{
    peak::{bounded, Counting},
    same_json, same_serialized,
};
use tower_cancel_http::abp::wire::{
    types, CallResult, CancelResult, Envelope, ErrorBody, InitializeResult, Progress, MAX_ID_BYTES,
};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The types whose payload the agent reads.
const WITH_PAYLOAD: [&str; 5] = [
    types::INITIALIZE_RESULT,
    types::CALL_RESULT,
    types::CANCEL_RESULT,
    types::ERROR,
    types::PROGRESS,
];

fuzz_target!(|data: &[u8]| {
    // A text frame is UTF-8: the WebSocket layer closes the connection on one that is not.
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    check_frame(text);
    if let Ok(payload @ Value::Object(_)) = serde_json::from_str::<Value>(text) {
        for kind in WITH_PAYLOAD {
            check_frame(&Envelope::new(kind, Some("e1".into()), &payload).to_text());
        }
    }
});

fn check_frame(text: &str) {
    let Ok(envelope) = bounded(text.len(), || read(text)) else {
        return;
    };
    if let Some(id) = &envelope.id {
        assert!(
            id.len() <= MAX_ID_BYTES,
            "an envelope id of {} bytes",
            id.len()
        );
    }
    let written = envelope.to_text();
    let again = Envelope::from_text(&written)
        .unwrap_or_else(|why| panic!("{written} does not read back: {why}"));
    assert_eq!(
        (&again.kind, &again.id, again.timestamp),
        (&envelope.kind, &envelope.id, envelope.timestamp)
    );
    assert!(same_json(&again.payload, &envelope.payload), "{written}");
    match envelope.kind.as_str() {
        types::INITIALIZE_RESULT => check_payload::<InitializeResult>(&envelope),
        types::CALL_RESULT => check_payload::<CallResult>(&envelope),
        types::CANCEL_RESULT => check_payload::<CancelResult>(&envelope),
        types::ERROR => check_payload::<ErrorBody>(&envelope),
        types::PROGRESS => check_payload::<Progress>(&envelope),
        _ => {}
    }
}

/// The envelope, and its payload read as the agent reads that type (so the allocation bound covers both).
fn read(text: &str) -> Result<Envelope, String> {
    let envelope = Envelope::from_text(text)?;
    let _ = match envelope.kind.as_str() {
        types::INITIALIZE_RESULT => envelope.payload_as::<InitializeResult>().map(drop),
        types::CALL_RESULT => envelope.payload_as::<CallResult>().map(drop),
        types::CANCEL_RESULT => envelope.payload_as::<CancelResult>().map(drop),
        types::ERROR => envelope.payload_as::<ErrorBody>().map(drop),
        types::PROGRESS => envelope.payload_as::<Progress>().map(drop),
        _ => Ok(()),
    };
    Ok(envelope)
}

fn check_payload<T: DeserializeOwned + Serialize + std::fmt::Debug>(envelope: &Envelope) {
    let Ok(payload) = envelope.payload_as::<T>() else {
        return;
    };
    assert!(
        envelope.payload.is_object(),
        "a payload read from {}",
        envelope.payload
    );
    let written = Envelope::new(&envelope.kind, envelope.id.clone(), &payload).to_text();
    let again = Envelope::from_text(&written)
        .and_then(|envelope| envelope.payload_as::<T>())
        .unwrap_or_else(|why| panic!("{written} does not read back: {why}"));
    assert!(
        same_serialized(&again, &payload),
        "{payload:?} read back as {again:?}"
    );
}
