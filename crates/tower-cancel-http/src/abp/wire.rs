//! ABP's envelopes and payloads, as the protocol's docs (version `0.1`) and the cancellation spec spell them.
//!
//! Every message is one JSON envelope `{type, id?, timestamp?, payload}` in one WebSocket text frame. A reply
//! carries the `id` of the envelope it answers. Read leniently where the docs' own samples differ (a missing
//! `timestamp`, a `callId` at the top of a call's payload instead of in its `options`), written as the docs say.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The protocol version this implementation speaks.
pub const PROTOCOL_VERSION: &str = "0.1";

/// Envelope types, agent to app.
pub mod types {
    /// Opens a session.
    pub const INITIALIZE: &str = "initialize";
    /// Calls a capability.
    pub const CALL: &str = "capabilities/call";
    /// Cancels a call.
    pub const CANCEL: &str = "capabilities/cancel";
    /// Ends the session.
    pub const SHUTDOWN: &str = "shutdown";
    /// Answers an elicitation (not used by this implementation's apps: ignored).
    pub const ELICITATION_RESPONSE: &str = "elicitation/response";
    /// Answers `initialize`.
    pub const INITIALIZE_RESULT: &str = "initialize-result";
    /// Answers a call.
    pub const CALL_RESULT: &str = "capabilities/call-result";
    /// Answers a cancel.
    pub const CANCEL_RESULT: &str = "capabilities/cancel-result";
    /// A progress report of a call that asked for it.
    pub const PROGRESS: &str = "progress";
    /// An envelope that could not be read (an extension: the docs have no such type).
    pub const ERROR: &str = "error";
}

/// One ABP message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    /// What the message is (see [`types`]).
    #[serde(rename = "type")]
    pub kind: String,
    /// The envelope's id; a reply carries the id of the envelope it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Unix milliseconds. Optional when read (some of the docs' samples leave it out), always written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<u64>,
    /// The message's content.
    #[serde(default)]
    pub payload: Value,
}

impl Envelope {
    /// An envelope of `kind` answering (or, with `None`, not answering) the envelope `id`, stamped now.
    pub fn new(kind: &str, id: Option<String>, payload: impl Serialize) -> Self {
        Self {
            kind: kind.to_owned(),
            id,
            timestamp: Some(now_millis()),
            // Serializing our own payload types cannot fail (string keys, no maps with other keys).
            payload: serde_json::to_value(payload).unwrap_or(Value::Null),
        }
    }

    /// The envelope as the text of one WebSocket frame.
    pub fn to_text(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Read an envelope from the text of one frame; the error says why it is not one.
    pub fn from_text(text: &str) -> Result<Self, String> {
        let value: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        if !value.is_object() {
            return Err("an envelope is a JSON object".into());
        }
        let envelope: Envelope =
            serde_json::from_value(value).map_err(|e| format!("not an envelope: {e}"))?;
        if envelope
            .id
            .as_ref()
            .is_some_and(|id| id.len() > MAX_ID_BYTES)
        {
            return Err(format!("an envelope id is at most {MAX_ID_BYTES} bytes"));
        }
        Ok(envelope)
    }

    /// The payload read as `T`, or why it is not one.
    pub fn payload_as<T: for<'de> Deserialize<'de>>(&self) -> Result<T, String> {
        if !self.payload.is_object() {
            return Err(format!("the payload of {} is a JSON object", self.kind));
        }
        T::deserialize(&self.payload).map_err(|e| format!("invalid {} payload: {e}", self.kind))
    }
}

/// The longest envelope id or `callId` taken, in bytes (the crate's one bound on a peer's ids).
pub use crate::front::MAX_ID_BYTES;

/// Unix milliseconds now.
pub fn now_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A name and a version (the agent's in `initialize`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentInfo {
    /// The agent's name.
    pub name: String,
    /// The agent's version.
    pub version: String,
}

/// The app's identity in `initialize-result`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppInfo {
    /// A stable id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Its version.
    pub version: String,
}

/// Which optional message kinds a side takes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Features {
    /// `notification` envelopes.
    #[serde(default)]
    pub notifications: bool,
    /// `progress` envelopes.
    #[serde(default)]
    pub progress: bool,
    /// `elicitation/request` envelopes.
    #[serde(default)]
    pub elicitation: bool,
}

/// The payload of `initialize`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Initialize {
    /// Who the agent is.
    pub agent: AgentInfo,
    /// The protocol version the agent speaks.
    pub protocol_version: String,
    /// The capabilities the agent wants (informational).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_capabilities: Option<Vec<String>>,
    /// What the agent takes.
    #[serde(default)]
    pub features: Features,
}

/// One capability in `initialize-result`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capability {
    /// The capability's name.
    pub name: String,
    /// Whether it can be called now.
    pub available: bool,
}

/// The payload of `initialize-result`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeResult {
    /// The session's id, made by the app.
    pub session_id: String,
    /// The protocol version the app speaks.
    pub protocol_version: String,
    /// Who the app is.
    pub app: AppInfo,
    /// What it can do.
    pub capabilities: Vec<Capability>,
    /// What the app sends of the agent's features.
    pub features: Features,
}

/// A call's options.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallOptions {
    /// Milliseconds after which the app cancels the call (`cancelled: true`, code `TIMEOUT`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
    /// Asks for `progress` envelopes whose `operationId` is this token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_token: Option<Value>,
    /// The call's id, for cancels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
}

/// The payload of `capabilities/call`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Call {
    /// The capability called.
    pub capability: String,
    /// Its params.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Value>,
    /// The options.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<CallOptions>,
    /// The call's id where the spec's flow puts it, at the top of the payload (read; written in `options`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
}

impl Call {
    /// The call's id, from `options.callId` or else the payload's own `callId`.
    pub fn call_id(&self) -> Option<&str> {
        self.options
            .as_ref()
            .and_then(|options| options.call_id.as_deref())
            .or(self.call_id.as_deref())
    }
}

/// An ABP error.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorBody {
    /// The code (`CANCELLED`, `TIMEOUT`, `NOT_INITIALIZED`...).
    pub code: String,
    /// What happened.
    #[serde(default)]
    pub message: String,
    /// More about it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
    /// Whether trying again may work.
    #[serde(default)]
    pub retryable: bool,
    /// Milliseconds to wait before trying again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<u64>,
}

impl ErrorBody {
    /// An error with `code`, `message` and `retryable`.
    pub fn new(code: &str, message: impl Into<String>, retryable: bool) -> Self {
        Self {
            code: code.to_owned(),
            message: message.into(),
            details: None,
            retryable,
            retry_after: None,
        }
    }
}

/// The payload of `capabilities/call-result`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallResult {
    /// Whether the call succeeded.
    pub success: bool,
    /// Its result, on success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
    /// Anything else the app says about it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
    /// Present and true when a cancel or the call's timeout stopped it (or it never ran).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancelled: Option<bool>,
}

impl CallResult {
    /// A success with `data`.
    pub fn ok(data: Value) -> Self {
        Self {
            success: true,
            data: Some(data),
            error: None,
            metadata: None,
            cancelled: None,
        }
    }

    /// A failure.
    pub fn failed(error: ErrorBody) -> Self {
        Self {
            success: false,
            data: None,
            error: Some(error),
            metadata: None,
            cancelled: None,
        }
    }

    /// Whether the call was cancelled (by a cancel or its timeout).
    pub fn is_cancelled(&self) -> bool {
        self.cancelled == Some(true)
    }
}

/// The payload of `capabilities/cancel`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Cancel {
    /// The call to cancel.
    pub call_id: String,
    /// Why (informational).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The payload of `capabilities/cancel-result`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CancelResult {
    /// The call the cancel named.
    pub call_id: String,
    /// Whether the call is (or already was) cancelled.
    pub cancelled: bool,
    /// Why not, when it is not ("Operation not found", "Operation already completed").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Set instead when the cancel could not be handled at all (`NOT_INITIALIZED`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
}

/// The payload of `progress`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Progress {
    /// The call's `progressToken`.
    pub operation_id: Value,
    /// How far along.
    pub progress: f64,
    /// Out of how much.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<f64>,
    /// 0 to 100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percentage: Option<f64>,
    /// What is happening.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn envelopes_read_leniently_and_write_as_the_docs_say() {
        let call = Envelope::from_text(
            r#"{"type":"capabilities/call","id":"e1","payload":{"capability":"sleep","params":{"ms":5},"callId":"c1"}}"#,
        )
        .unwrap();
        assert_eq!(call.timestamp, None, "a missing timestamp is taken");
        let payload: Call = call.payload_as().unwrap();
        assert_eq!(
            payload.call_id(),
            Some("c1"),
            "callId at the top of the payload"
        );
        let in_options: Call = serde_json::from_value(
            json!({"capability": "sleep", "options": {"callId": "c2", "timeout": 50}, "callId": "c1"}),
        )
        .unwrap();
        assert_eq!(in_options.call_id(), Some("c2"), "options.callId first");

        let reply = Envelope::new(
            types::CALL_RESULT,
            Some("e1".into()),
            CallResult::ok(json!({"slept": 5})),
        );
        let text: Value = serde_json::from_str(&reply.to_text()).unwrap();
        assert_eq!(text["type"], "capabilities/call-result");
        assert_eq!(text["id"], "e1");
        assert!(text["timestamp"].as_u64().unwrap() > 1_600_000_000_000);
        assert_eq!(
            text["payload"],
            json!({"success": true, "data": {"slept": 5}})
        );
    }

    #[test]
    fn what_is_not_an_envelope_says_why() {
        for (text, why) in [
            ("{", "not JSON"),
            ("[1]", "a JSON object"),
            (r#"{"id":"x","payload":{}}"#, "not an envelope"),
            (r#"{"type":7,"payload":{}}"#, "not an envelope"),
        ] {
            let error = Envelope::from_text(text).unwrap_err();
            assert!(error.contains(why), "{text}: {error}");
        }
        let huge = format!(
            r#"{{"type":"shutdown","id":"{}"}}"#,
            "x".repeat(MAX_ID_BYTES + 1)
        );
        assert!(Envelope::from_text(&huge).unwrap_err().contains("at most"));
        let not_object =
            Envelope::from_text(r#"{"type":"capabilities/cancel","payload":["c1"]}"#).unwrap();
        assert!(
            not_object.payload_as::<Cancel>().is_err(),
            "a payload by position is refused"
        );
    }
}
