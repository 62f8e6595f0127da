//! An agent's text frame, read: its envelope, and the payload its type calls for, checked. What the session does
//! with it (which depends on whether the session is initialized, and on how many calls it runs) is the session's.

use crate::abp::wire::{types, Call, Cancel, Envelope, Initialize, MAX_ID_BYTES};

/// What one text frame from the agent says.
#[derive(Debug)]
pub(crate) enum Incoming {
    /// `initialize`: its payload, or why it is not one.
    Initialize {
        id: Option<String>,
        payload: Result<Initialize, String>,
    },
    /// `capabilities/call`: its payload, whose `callId` (if it has one) is 1 to [`MAX_ID_BYTES`] bytes, or why
    /// it is not one.
    Call {
        id: Option<String>,
        payload: Result<Call, String>,
    },
    /// `capabilities/cancel`: its payload, whose `callId` is at most [`MAX_ID_BYTES`] bytes, or `None`.
    Cancel {
        id: Option<String>,
        payload: Option<Cancel>,
    },
    /// `shutdown`.
    Shutdown,
    /// `elicitation/response`, though this app asks for none.
    ElicitationResponse,
    /// An envelope of a type the app does not take.
    Other { id: Option<String>, kind: String },
    /// Not an envelope, and why.
    Invalid(String),
}

/// Read one text frame.
pub(crate) fn read(text: &str) -> Incoming {
    let envelope = match Envelope::from_text(text) {
        Ok(envelope) => envelope,
        Err(why) => return Incoming::Invalid(why),
    };
    match envelope.kind.as_str() {
        types::INITIALIZE => Incoming::Initialize {
            payload: envelope.payload_as(),
            id: envelope.id,
        },
        types::CALL => Incoming::Call {
            payload: envelope.payload_as().and_then(checked_call),
            id: envelope.id,
        },
        types::CANCEL => Incoming::Cancel {
            payload: envelope
                .payload_as::<Cancel>()
                .ok()
                .filter(|cancel| cancel.call_id.len() <= MAX_ID_BYTES),
            id: envelope.id,
        },
        types::SHUTDOWN => Incoming::Shutdown,
        types::ELICITATION_RESPONSE => Incoming::ElicitationResponse,
        _ => Incoming::Other {
            id: envelope.id,
            kind: envelope.kind,
        },
    }
}

/// A call's `callId` is the key of its request in the session's tables: an empty or overlong one is refused. A
/// call without one is taken (the session makes one up).
fn checked_call(call: Call) -> Result<Call, String> {
    match call.call_id() {
        Some(id) if id.is_empty() || id.len() > MAX_ID_BYTES => {
            Err(format!("a callId is 1 to {MAX_ID_BYTES} bytes"))
        }
        _ => Ok(call),
    }
}
