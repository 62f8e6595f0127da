//! An ABP app's reading of an agent's WebSocket text frame (what its session does with each one), and the
//! envelope under it. The frame is also tried as the payload of each type the app takes, so the fuzzer reaches
//! the payload parsers without having to write the envelope.
//!
//! # Invariants checked
//!
//! - An envelope has an id of at most `MAX_ID_BYTES`; written out, it reads back the same.
//! - The app's reading agrees with `Envelope::from_text`: not an envelope exactly when that fails, otherwise the
//!   kind its type names, with its id.
//! - A call's `callId`, if it has one, is 1 to `MAX_ID_BYTES` bytes; a cancel's at most `MAX_ID_BYTES`.
//! - A payload the app took, written in an envelope of its type, is taken again, the same.
//! - The reading holds at most `peak::allocation_bound` of the frame's length.

#![no_main]

use libfuzzer_sys::fuzz_target;
use serde::Serialize;
use serde_json::Value;
use tower_cancel_fuzz::{
    peak::{bounded, Counting},
    same_json, same_serialized,
};
use tower_cancel_http::{
    abp::wire::{types, Envelope, MAX_ID_BYTES},
    fuzzing::abp::{app_read, AppFrame},
};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The types whose payload the app reads.
const WITH_PAYLOAD: [&str; 3] = [types::INITIALIZE, types::CALL, types::CANCEL];

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
    let frame = bounded(text.len(), || app_read(text));
    let envelope = match (Envelope::from_text(text), &frame) {
        (Err(_), AppFrame::Invalid(_)) => return,
        (Err(why), frame) => panic!("{frame:?} read from what is not an envelope: {why}"),
        (Ok(envelope), AppFrame::Invalid(why)) => panic!("{envelope:?} read as invalid: {why}"),
        (Ok(envelope), _) => envelope,
    };
    check_envelope(&envelope);
    let kind = envelope.kind.as_str();
    let id = &envelope.id;
    match frame {
        AppFrame::Initialize(read_id, payload) => {
            assert_eq!((kind, &read_id), (types::INITIALIZE, id));
            if let Ok(initialize) = payload {
                match again(kind, &initialize) {
                    AppFrame::Initialize(_, Ok(again)) => assert_eq!(again, initialize),
                    other => panic!("{initialize:?} read back as {other:?}"),
                }
            }
        }
        AppFrame::Call(read_id, payload) => {
            assert_eq!((kind, &read_id), (types::CALL, id));
            if let Ok(call) = payload {
                if let Some(call_id) = call.call_id() {
                    assert!(
                        (1..=MAX_ID_BYTES).contains(&call_id.len()),
                        "callId {call_id:?}"
                    );
                }
                match again(kind, &call) {
                    AppFrame::Call(_, Ok(again)) => assert!(same_serialized(&again, &call)),
                    other => panic!("{call:?} read back as {other:?}"),
                }
            }
        }
        AppFrame::Cancel(read_id, payload) => {
            assert_eq!((kind, &read_id), (types::CANCEL, id));
            if let Some(cancel) = payload {
                assert!(
                    cancel.call_id.len() <= MAX_ID_BYTES,
                    "callId {:?}",
                    cancel.call_id
                );
                match again(kind, &cancel) {
                    AppFrame::Cancel(_, Some(again)) => assert_eq!(again, cancel),
                    other => panic!("{cancel:?} read back as {other:?}"),
                }
            }
        }
        AppFrame::Shutdown => assert_eq!(kind, types::SHUTDOWN),
        AppFrame::ElicitationResponse => assert_eq!(kind, types::ELICITATION_RESPONSE),
        AppFrame::Other(read_id, read_kind) => {
            assert_eq!((kind, &read_id), (read_kind.as_str(), id));
            let taken = [types::SHUTDOWN, types::ELICITATION_RESPONSE];
            assert!(
                !WITH_PAYLOAD.contains(&kind) && !taken.contains(&kind),
                "{kind} not taken"
            );
        }
        AppFrame::Invalid(_) => unreachable!("matched above"),
    }
}

/// An envelope's id is bounded, and the envelope reads back as it was written.
fn check_envelope(envelope: &Envelope) {
    if let Some(id) = &envelope.id {
        assert!(
            id.len() <= MAX_ID_BYTES,
            "an envelope id of {} bytes",
            id.len()
        );
    }
    let text = envelope.to_text();
    let again =
        Envelope::from_text(&text).unwrap_or_else(|why| panic!("{text} does not read back: {why}"));
    assert_eq!(
        (&again.kind, &again.id, again.timestamp),
        (&envelope.kind, &envelope.id, envelope.timestamp)
    );
    assert!(same_json(&again.payload, &envelope.payload), "{text}");
}

/// `payload` written in an envelope of `kind`, read by the app.
fn again(kind: &str, payload: &impl Serialize) -> AppFrame {
    app_read(&Envelope::new(kind, Some("e2".into()), payload).to_text())
}
