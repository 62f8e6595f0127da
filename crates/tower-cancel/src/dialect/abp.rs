//! ABP, the Agentic Browser Protocol: capability calls keyed by a `callId`, and a cancel that is answered.

use http::Extensions;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::{recognize_cancel, CancelNotice, CancelledReply, Dialect, Recognized};
use crate::{
    message::{code, ErrorObject, Id, WireRequest},
    outcome::CancelAck,
    progress_update::{ProgressEvent, ProgressUpdate},
    reason::CancelReason,
    session::SessionState,
};

/// ABP: not JSON-RPC on the wire (an envelope `{type, id, timestamp, payload}`), but the same lifecycle. A
/// transport (`tower-cancel-http`'s `abp` module) turns each `capabilities/call` into a [`Request`](crate::Request) whose id is
/// the call's `callId` and whose method is the capability, and hands each `capabilities/cancel` to
/// [`Connection::acknowledge_cancel`](crate::scope::Connection::acknowledge_cancel), sending back what
/// [`Dialect::acknowledge`] renders from the outcome:
///
/// | the cancel found | `capabilities/cancel-result` payload |
/// |---|---|
/// | the call running or queued (it is stopped now) | `{callId, cancelled: true}` |
/// | the call cancelled already (by a cancel or its timeout) | `{callId, cancelled: true}` |
/// | the call completed, or completing as the cancel came | `{callId, cancelled: false, reason: "Operation already completed"}` |
/// | no such call (or one forgotten) | `{callId, cancelled: false, reason: "Operation not found"}` |
///
/// "Not found" means not found: one WebSocket delivers in order, so a cancel cannot overtake its call, and the
/// dialect keeps no early cancels ([`Dialect::remembers_early_cancels`] is `false`). A call with that `callId`
/// that comes after the cancel runs as any other. A call received but not yet running (queued behind
/// backpressure) is in flight already: a cancel skips it, and its result says `cancelled: true`.
///
/// A cancelled call is answered (the agent waits for its result): the error's `data` carries the ABP error code
/// ([`CANCELLED`], or [`TIMEOUT`] when the call's own `options.timeout` expired) and `cancelled: true`, which the
/// transport renders as `{success: false, cancelled: true, error: {code, message, retryable}}`. ABP has no
/// partial results.
#[derive(Clone, Copy, Debug, Default)]
pub struct Abp;

/// ABP's error code of a cancelled call.
pub const CANCELLED: &str = "CANCELLED";
/// ABP's error code of a call whose `options.timeout` expired (it is cancelled all the same: `cancelled: true`).
pub const TIMEOUT: &str = "TIMEOUT";
/// A call or a cancel before `initialize`.
pub const NOT_INITIALIZED: &str = "NOT_INITIALIZED";
/// A second `initialize` in a session.
pub const ALREADY_INITIALIZED: &str = "ALREADY_INITIALIZED";
/// A call of a capability the app does not have.
pub const UNKNOWN_CAPABILITY: &str = "UNKNOWN_CAPABILITY";
/// A call whose params are wrong.
pub const INVALID_PARAMS: &str = "INVALID_PARAMS";
/// The capability failed.
pub const OPERATION_FAILED: &str = "OPERATION_FAILED";
/// The app failed (a panic, a bug).
pub const INTERNAL_ERROR: &str = "INTERNAL_ERROR";

/// The method of an ABP cancel, as a transport hands it to the stack.
pub const CANCEL_METHOD: &str = "capabilities/cancel";
/// The method of a progress report, as a transport reads it from the outbox (the envelope's `type`).
pub const PROGRESS_METHOD: &str = "progress";

/// What a transport read from a call's `options` besides its `callId` and `timeout`: put on the [`Request`](crate::Request)'s
/// extensions, where the dialect finds the progress token.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CallOptions {
    /// `options.progressToken`: the call's progress reports carry it as their `operationId`.
    pub progress_token: Option<Value>,
}

/// An ABP error as the stack carries it: a JSON-RPC [`ErrorObject`] whose `data` holds the ABP `code`,
/// `retryable` and, for a call stopped by a cancel or its timeout, `cancelled: true`. Return it from a handler
/// (`Err(abp::error(...))`) to choose the code the agent sees; the transport reads it back with [`read_error`].
pub fn error(abp_code: &str, message: impl Into<String>, retryable: bool) -> ErrorObject {
    ErrorObject::new(json_rpc_code(abp_code), message)
        .with_data(json!({ "code": abp_code, "retryable": retryable }))
}

/// An ABP error read back from an [`ErrorObject`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AbpError {
    /// The ABP code (`CANCELLED`, `INVALID_PARAMS`...).
    pub code: String,
    /// The message.
    pub message: String,
    /// Whether the agent may try the call again.
    pub retryable: bool,
    /// Whether the call was stopped by a cancel or its timeout.
    pub cancelled: bool,
}

/// Read an ABP error from an [`ErrorObject`]: its `data.code` if [`error`] made it, else the code that matches the
/// JSON-RPC one (-32601 `UNKNOWN_CAPABILITY`, -32602 and -32600 `INVALID_PARAMS`, -32603 `INTERNAL_ERROR`, -32800
/// `CANCELLED`, any other `OPERATION_FAILED`).
pub fn read_error(error: &ErrorObject) -> AbpError {
    let data = error.data.as_ref().and_then(Value::as_object);
    let field = |name: &str| data.and_then(|data| data.get(name));
    let code = match field("code").and_then(Value::as_str) {
        Some(code) => code.to_owned(),
        None => match error.code {
            code::METHOD_NOT_FOUND => UNKNOWN_CAPABILITY,
            // -32600 is the stack's answer to a callId already in flight in the session.
            code::INVALID_PARAMS | code::INVALID_REQUEST => INVALID_PARAMS,
            code::INTERNAL_ERROR => INTERNAL_ERROR,
            code::REQUEST_CANCELLED => CANCELLED,
            _ => OPERATION_FAILED,
        }
        .to_owned(),
    };
    AbpError {
        retryable: field("retryable")
            .and_then(Value::as_bool)
            .unwrap_or(code == TIMEOUT),
        cancelled: field("cancelled").and_then(Value::as_bool) == Some(true),
        code,
        message: error.message.clone(),
    }
}

fn json_rpc_code(abp_code: &str) -> i64 {
    match abp_code {
        UNKNOWN_CAPABILITY => code::METHOD_NOT_FOUND,
        INVALID_PARAMS | "MISSING_PARAM" => code::INVALID_PARAMS,
        INTERNAL_ERROR => code::INTERNAL_ERROR,
        CANCELLED | TIMEOUT => code::REQUEST_CANCELLED,
        _ => -32000,
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CancelParams {
    call_id: String,
    reason: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ProgressParams {
    operation_id: Value,
    progress: f64,
    total: Option<f64>,
    status: Option<String>,
}

impl Dialect for Abp {
    fn name(&self) -> &'static str {
        "abp"
    }

    // ABP carries a call's timeout in its `options.timeout`, which the caller sets: nothing in the params.
    fn attach_deadline(
        &self,
        _params: &mut Value,
        _field: &str,
        _remaining: std::time::Duration,
    ) -> bool {
        false
    }

    fn recognize(&self, notification: &WireRequest, _session: &SessionState) -> Recognized {
        recognize_cancel(notification, CANCEL_METHOD, |p: CancelParams| {
            CancelNotice {
                id: Id::String(p.call_id),
                reason: p.reason,
            }
        })
    }

    fn is_cancellable(&self, _method: &str, _session: &SessionState) -> bool {
        // `initialize` is the transport's, never a call: every capability call can be cancelled.
        true
    }

    fn cancelled_reply(&self, reason: &CancelReason, _server_cancellable: bool) -> CancelledReply {
        let (abp_code, message, retryable) = match reason {
            CancelReason::Timeout => (TIMEOUT, "Operation timed out", true),
            CancelReason::Shutdown => (
                CANCELLED,
                "Operation cancelled: the app is shutting down",
                true,
            ),
            CancelReason::Disconnect => (CANCELLED, "Operation cancelled: the session ended", true),
            _ => (CANCELLED, "Operation cancelled", false),
        };
        let mut error = error(abp_code, message, retryable);
        if let Some(Value::Object(data)) = &mut error.data {
            data.insert("cancelled".into(), Value::Bool(true));
        }
        CancelledReply::Error(error)
    }

    fn progress_token(&self, _request: &WireRequest, extensions: &Extensions) -> Option<Value> {
        extensions.get::<CallOptions>()?.progress_token.clone()
    }

    fn progress_notification(
        &self,
        token: &Value,
        event: ProgressEvent<'_>,
    ) -> Option<WireRequest> {
        let ProgressEvent::Report { update, .. } = event else {
            return None;
        };
        let mut payload = Map::new();
        payload.insert("operationId".into(), token.clone());
        payload.insert("progress".into(), json!(update.progress));
        if let Some(total) = update.total {
            payload.insert("total".into(), json!(total));
        }
        if let Some(percentage) = update.percentage() {
            payload.insert("percentage".into(), json!(percentage));
        }
        if let Some(message) = &update.message {
            payload.insert("status".into(), json!(message));
        }
        Some(WireRequest::notification(PROGRESS_METHOD, payload))
    }

    fn read_progress(&self, notification: &WireRequest) -> Option<(Value, ProgressUpdate)> {
        if notification.method() != PROGRESS_METHOD {
            return None;
        }
        let p: ProgressParams = notification.params_as().ok()?;
        let update = ProgressUpdate {
            progress: p.progress,
            total: p.total,
            message: p.status,
        };
        Some((p.operation_id, update))
    }

    fn allows_partial_result(&self) -> bool {
        // "No partial results": a half-made PDF is no PDF.
        false
    }

    fn cancel_message(&self, id: &Id, reason: &CancelReason) -> WireRequest {
        let mut payload = Map::new();
        payload.insert("callId".into(), json!(id));
        if let Some(text) = reason.text() {
            payload.insert("reason".into(), json!(text));
        }
        WireRequest::notification(CANCEL_METHOD, payload)
    }

    fn acknowledges_cancels(&self) -> bool {
        true
    }

    fn remembers_early_cancels(&self) -> bool {
        // One WebSocket delivers in order: a cancel cannot overtake its call, so one for a callId the session has
        // not received is for no call. Remembering it would skip a later call of that id that the answer ("not
        // found") told the agent nothing about.
        false
    }

    fn acknowledge(&self, notice: &CancelNotice, ack: CancelAck) -> Option<Value> {
        let mut payload = Map::new();
        payload.insert("callId".into(), json!(notice.id));
        payload.insert("cancelled".into(), Value::Bool(ack.cancelled()));
        let reason = match ack {
            CancelAck::AlreadyCompleted => Some("Operation already completed"),
            CancelAck::NotFound => Some("Operation not found"),
            CancelAck::NotCancellable => Some("Operation cannot be cancelled"),
            _ => None,
        };
        if let Some(reason) = reason {
            payload.insert("reason".into(), json!(reason));
        }
        Some(Value::Object(payload))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cancel_is_read_and_answered_as_the_table_says() {
        let cancel =
            WireRequest::notification(CANCEL_METHOD, json!({"callId": "c1", "reason": "user"}));
        let Recognized::Cancel(notice) = Abp.recognize(&cancel, &SessionState::default()) else {
            panic!("not read as a cancel");
        };
        assert_eq!(notice.id, Id::from("c1"));
        assert_eq!(notice.reason.as_deref(), Some("user"));
        let answer = |ack| Abp.acknowledge(&notice, ack).unwrap();
        assert_eq!(
            answer(CancelAck::Cancelled),
            json!({"callId": "c1", "cancelled": true})
        );
        assert_eq!(
            answer(CancelAck::AlreadyCancelled),
            json!({"callId": "c1", "cancelled": true})
        );
        assert_eq!(
            answer(CancelAck::AlreadyCompleted),
            json!({"callId": "c1", "cancelled": false, "reason": "Operation already completed"})
        );
        assert_eq!(
            answer(CancelAck::NotFound),
            json!({"callId": "c1", "cancelled": false, "reason": "Operation not found"})
        );
        let numeric = WireRequest::notification(CANCEL_METHOD, json!({"callId": 7}));
        assert_eq!(
            Abp.recognize(&numeric, &SessionState::default()),
            Recognized::Malformed
        );
    }

    #[test]
    fn a_cancelled_call_and_a_timed_out_one_say_cancelled_with_their_codes() {
        let read = |reason| match Abp.cancelled_reply(&reason, false) {
            CancelledReply::Error(error) => read_error(&error),
            CancelledReply::Nothing => panic!("ABP answers a cancelled call"),
        };
        let cancelled = read(CancelReason::peer(None));
        assert_eq!(
            (
                cancelled.code.as_str(),
                cancelled.cancelled,
                cancelled.retryable
            ),
            (CANCELLED, true, false)
        );
        let timed_out = read(CancelReason::Timeout);
        assert_eq!(
            (
                timed_out.code.as_str(),
                timed_out.cancelled,
                timed_out.retryable
            ),
            (TIMEOUT, true, true)
        );
        let plain = read_error(&ErrorObject::method_not_found("nope"));
        assert_eq!(
            (plain.code.as_str(), plain.cancelled),
            (UNKNOWN_CAPABILITY, false)
        );
        let own = read_error(&error(INVALID_PARAMS, "ms is missing", false));
        assert_eq!(
            (own.code.as_str(), own.message.as_str()),
            (INVALID_PARAMS, "ms is missing")
        );
    }

    #[test]
    fn progress_carries_the_calls_token_as_its_operation_id() {
        let update = ProgressUpdate::new(1.0).total(4.0).message("rendering");
        let report = Abp
            .progress_notification(
                &json!("op-1"),
                ProgressEvent::Report {
                    first: true,
                    update: &update,
                    cancellable: false,
                },
            )
            .unwrap();
        assert_eq!(report.method(), PROGRESS_METHOD);
        let payload: Value = report.params_as().unwrap();
        assert_eq!(
            payload,
            json!({"operationId": "op-1", "progress": 1.0, "total": 4.0, "percentage": 25, "status": "rendering"})
        );
        assert_eq!(Abp.read_progress(&report), Some((json!("op-1"), update)));
    }
}
