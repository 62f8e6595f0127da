use serde::Deserialize;
use serde_json::{json, Value};

use super::{
    cancel_params, recognize_cancel, request_cancelled, CancelNotice, CancelledReply, Dialect,
    GroupCancel, Recognized,
};
use crate::{
    message::{Id, WireRequest},
    reason::CancelReason,
    session::SessionState,
};

/// The Agent Client Protocol as it is now: `$/cancel_request {"requestId": …}` (a `_meta` member may be present),
/// answered with -32800 "Request cancelled" or a partial result.
///
/// No capability is needed and either side may send it; unknown, completed and malformed cancels are ignored.
/// Internal cancellation (timeouts, shutdown) is answered the same way, as the protocol asks.
///
/// # `session/cancel`
///
/// `session/cancel {"sessionId": …}` ends a turn of a session: it is read as a group cancel
/// ([`Recognized::CancelGroup`], reason [`CancelReason::Group`]) of the requests grouped by that session id, which
/// a stack groups when told to (`CancelStack::acp().group_by_param("sessionId")`). The session's pending
/// `session/prompt` is answered with the result `{"stopReason":"cancelled"}`, as the protocol asks, its other
/// requests with -32800 "Request cancelled"; the notification then goes on to the service. A `session/cancel` with
/// nothing in flight is not remembered: the next prompt is a new turn. Without grouping nothing is cancelled and
/// the notification is the application's, as before.
#[derive(Clone, Copy, Debug, Default)]
pub struct Acp;

impl Acp {
    /// The method of ACP's cancel notification.
    pub const CANCEL_METHOD: &'static str = "$/cancel_request";
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AcpParams {
    request_id: Id,
}

/// The method of ACP's turn cancel, in both revisions.
const SESSION_CANCEL_METHOD: &str = "session/cancel";

/// The method whose cancelled turn is answered with a result.
const PROMPT_METHOD: &str = "session/prompt";

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SessionCancelParams {
    session_id: String,
}

/// `session/cancel {sessionId}` as a group cancel; `None` for any other notification. Params of the wrong shape
/// are no cancel: the notification goes on to the service as it is.
fn session_cancel(notification: &WireRequest) -> Option<Recognized> {
    if notification.method() != SESSION_CANCEL_METHOD {
        return None;
    }
    let params: SessionCancelParams = cancel_params(notification)?;
    let key = Id::String(params.session_id);
    Some(Recognized::CancelGroup(GroupCancel {
        reason: CancelReason::Group { key: key.clone() },
        key,
    }))
}

/// ACP's answer to a cancelled turn.
fn cancelled_turn() -> Value {
    json!({ "stopReason": "cancelled" })
}

impl Dialect for Acp {
    fn name(&self) -> &'static str {
        "acp"
    }

    fn recognize(&self, notification: &WireRequest, _session: &SessionState) -> Recognized {
        if let Some(group) = session_cancel(notification) {
            return group;
        }
        recognize_cancel(notification, Self::CANCEL_METHOD, |p: AcpParams| {
            CancelNotice {
                id: p.request_id,
                reason: None,
            }
        })
    }

    fn is_cancellable(&self, method: &str, _session: &SessionState) -> bool {
        method != "initialize"
    }

    fn cancelled_reply(&self, _reason: &CancelReason, _server_cancellable: bool) -> CancelledReply {
        request_cancelled("Request cancelled")
    }

    fn answers_group_cancel(&self, method: &str) -> bool {
        method == PROMPT_METHOD
    }

    fn group_cancelled_result(&self, _reason: &CancelReason) -> Value {
        cancelled_turn()
    }

    fn cancel_message(&self, id: &Id, _reason: &CancelReason) -> WireRequest {
        WireRequest::notification(Self::CANCEL_METHOD, json!({ "requestId": id }))
    }

    /// ACP's `_meta` carries `traceparent`, `tracestate` and `baggage`, as MCP's does.
    fn carries_trace_context(&self) -> bool {
        true
    }
}

/// The first draft of ACP's request cancellation: `$/cancelRequest {"id": …}` behind the `cancellation.request`
/// capability, answered with -32800 "Cancelled".
///
/// # Lifecycle rules
///
/// - Nothing is cancellable before `initialize` has completed, and `initialize` itself never is.
/// - This side handles cancels only if it declared the capability ([`AcpDraft::declared`], on by default; the
///   agent must then put `"cancellation": {"request": true}` in its capabilities). Otherwise the notification is
///   passed on to the service like any other.
/// - The peer's own declaration (`clientCapabilities.cancellation.request` or
///   `agentCapabilities.cancellation.request` in the `initialize` params) is recorded in the scope's
///   [`SessionState`], so this side never sends a cancel to a peer that did not declare it.
#[derive(Clone, Copy, Debug)]
pub struct AcpDraft {
    declared: bool,
}

impl Default for AcpDraft {
    fn default() -> Self {
        Self::new()
    }
}

impl AcpDraft {
    /// The method of the draft's cancel notification.
    pub const CANCEL_METHOD: &'static str = "$/cancelRequest";

    /// The draft dialect, declaring the capability.
    pub const fn new() -> Self {
        Self { declared: true }
    }

    /// Whether this side declared `cancellation.request` (and so handles cancels).
    pub const fn declared(mut self, declared: bool) -> Self {
        self.declared = declared;
        self
    }

    /// Whether this side declared the capability.
    pub const fn is_declared(&self) -> bool {
        self.declared
    }
}

#[derive(Deserialize)]
struct DraftParams {
    id: Id,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct InitializeParams {
    #[serde(default)]
    client_capabilities: Option<Capabilities>,
    #[serde(default)]
    agent_capabilities: Option<Capabilities>,
}

#[derive(Deserialize, Default)]
struct Capabilities {
    #[serde(default)]
    cancellation: Option<Cancellation>,
}

#[derive(Deserialize, Default)]
struct Cancellation {
    #[serde(default)]
    request: bool,
}

impl Dialect for AcpDraft {
    fn name(&self) -> &'static str {
        "acp-draft"
    }

    fn recognize(&self, notification: &WireRequest, session: &SessionState) -> Recognized {
        // `session/cancel` is no capability's: read whatever was declared (it cancels only what is cancellable,
        // nothing where this side did not declare `cancellation.request`), and passed on all the same.
        if let Some(group) = session_cancel(notification) {
            return group;
        }
        // A side that did not declare the capability, or a session not yet initialized, does not handle cancels:
        // the notification goes on to the service like any other.
        if !self.declared || !session.is_initialized() {
            return Recognized::NotACancel;
        }
        recognize_cancel(notification, Self::CANCEL_METHOD, |p: DraftParams| {
            CancelNotice {
                id: p.id,
                reason: None,
            }
        })
    }

    fn is_cancellable(&self, method: &str, session: &SessionState) -> bool {
        self.declared && method != "initialize" && session.is_initialized()
    }

    fn cancelled_reply(&self, _reason: &CancelReason, _server_cancellable: bool) -> CancelledReply {
        request_cancelled("Cancelled")
    }

    fn answers_group_cancel(&self, method: &str) -> bool {
        method == PROMPT_METHOD
    }

    fn group_cancelled_result(&self, _reason: &CancelReason) -> Value {
        cancelled_turn()
    }

    fn cancel_message(&self, id: &Id, _reason: &CancelReason) -> WireRequest {
        WireRequest::notification(Self::CANCEL_METHOD, json!({ "id": id }))
    }

    fn observe_request(&self, request: &WireRequest, session: &SessionState) {
        if request.method() != "initialize" {
            return;
        }
        let params: InitializeParams = request.params_as().unwrap_or_default();
        let declared = params
            .client_capabilities
            .or(params.agent_capabilities)
            .and_then(|c| c.cancellation)
            .is_some_and(|c| c.request);
        session.set_peer_accepts_cancel(declared);
    }

    fn observe_response(&self, method: &str, result: &Value, session: &SessionState) {
        if method != "initialize" {
            return;
        }
        // The agent's answer to our `initialize`: its capabilities, and the session is initialized.
        let declared = ["agentCapabilities", "clientCapabilities"]
            .iter()
            .any(|side| result[side]["cancellation"]["request"] == Value::Bool(true));
        session.set_peer_accepts_cancel(declared);
        session.mark_initialized();
    }

    fn may_send_cancel(&self, method: &str, session: &SessionState) -> bool {
        method != "initialize" && session.is_initialized() && session.peer_accepts_cancel()
    }

    fn carries_trace_context(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(dialect: &dyn Dialect, params: Value) -> Recognized {
        let notification = WireRequest::notification(SESSION_CANCEL_METHOD, params);
        dialect.recognize(&notification, &SessionState::default())
    }

    #[test]
    fn session_cancel_is_a_group_cancel_of_its_session_in_both_revisions() {
        let group = Recognized::CancelGroup(GroupCancel {
            key: Id::from("sess-1"),
            reason: CancelReason::Group {
                key: Id::from("sess-1"),
            },
        });
        for dialect in [&Acp as &dyn Dialect, &AcpDraft::default()] {
            assert_eq!(read(dialect, json!({ "sessionId": "sess-1" })), group);
        }
    }

    #[test]
    fn session_cancel_params_of_another_shape_are_passed_on() {
        // An array by position included: serde's derive would read `["sess-1"]` as the struct.
        for params in [
            json!(["sess-1"]),
            json!({}),
            json!({ "sessionId": 1 }),
            json!(null),
        ] {
            assert_eq!(read(&Acp, params), Recognized::NotACancel);
        }
    }
}
