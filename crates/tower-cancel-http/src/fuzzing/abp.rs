//! ABP: the app's reading of an agent's text frame. (The agent's side reads with the public
//! [`Envelope::from_text`](crate::abp::wire::Envelope::from_text) and
//! [`Envelope::payload_as`](crate::abp::wire::Envelope::payload_as).)

use crate::abp::{
    app::incoming::{self, Incoming},
    wire::{Call, Cancel, Initialize},
};

/// What the app read from one text frame: a mirror of the session's private reading.
#[derive(Debug)]
pub enum AppFrame {
    /// `initialize`: the envelope's id, and the payload or why it is not one.
    Initialize(Option<String>, Result<Initialize, String>),
    /// `capabilities/call`: the envelope's id, and the payload (its `callId` checked) or why it is not one.
    Call(Option<String>, Result<Call, String>),
    /// `capabilities/cancel`: the envelope's id, and the payload (its `callId` checked) if it is one.
    Cancel(Option<String>, Option<Cancel>),
    /// `shutdown`.
    Shutdown,
    /// `elicitation/response`.
    ElicitationResponse,
    /// Another type: the envelope's id and its type.
    Other(Option<String>, String),
    /// Not an envelope, and why.
    Invalid(String),
}

/// The app's reading of one text frame, as its session reads it.
pub fn app_read(text: &str) -> AppFrame {
    match incoming::read(text) {
        Incoming::Initialize { id, payload } => AppFrame::Initialize(id, payload),
        Incoming::Call { id, payload } => AppFrame::Call(id, payload),
        Incoming::Cancel { id, payload } => AppFrame::Cancel(id, payload),
        Incoming::Shutdown => AppFrame::Shutdown,
        Incoming::ElicitationResponse => AppFrame::ElicitationResponse,
        Incoming::Other { id, kind } => AppFrame::Other(id, kind),
        Incoming::Invalid(why) => AppFrame::Invalid(why),
    }
}
