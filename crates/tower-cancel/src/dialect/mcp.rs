use http::Extensions;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{meta, recognize_cancel, CancelNotice, CancelledReply, Dialect, Recognized};
use crate::{
    message::{code, ErrorObject, Id, WireRequest},
    progress_update::{ProgressEvent, ProgressUpdate},
    reason::CancelReason,
    session::SessionState,
};

/// The Model Context Protocol: `notifications/cancelled {"requestId": …, "reason": …}`.
///
/// A request the peer cancelled gets **no reply at all**; the reason is logged. Unknown, completed and malformed
/// cancels are ignored, and `initialize` is never cancelled. A handler's partial result is dropped too: MCP has no
/// partial results.
///
/// A request this side cancels is not a peer's cancel: the client is still waiting, so it gets an error reply.
///
/// | reason | reply |
/// |---|---|
/// | `Peer` | nothing |
/// | `Disconnect` | nothing (nobody is listening) |
/// | `Timeout` | -32001 `Request timed out` (the code the TypeScript SDK uses for its own timeouts) |
/// | `Shutdown`, `Parent`, `Local` | -32603 `Internal error: request cancelled (<reason>)` |
///
/// Progress: a request with `params._meta.progressToken` can report `notifications/progress {progressToken,
/// progress, total?, message?}`.
///
/// Revisions: from the first request that carries `_meta["io.modelcontextprotocol/protocolVersion"]` of the
/// stateless revision (`2026-07-28` or later), the conversation's [`Peer`](crate::Peer) sends no
/// `notifications/cancelled` for its own requests (a server of that revision sends it for nothing but the
/// teardown of a subscription: [`Mcp::subscription_teardown`]). Its calls still stop at once. Such a server
/// sends the client no requests either (a handler's call through its peer fails at once with
/// [`PeerError::NotAllowed`](crate::PeerError::NotAllowed)).
///
/// Subscriptions (`subscriptions/listen`): the client ends one by cancelling it; when the server ends one itself
/// (its handler returns, a timeout, a shutdown, a parent's cancel) it sends [`Mcp::subscription_teardown`], which
/// ends the subscription: no reply follows it. A [`Peer`](crate::Peer) calling `subscriptions/listen` takes that cancel as the end of its call:
/// [`PeerError::CancelledByPeer`](crate::PeerError::CancelledByPeer) with the server's reason.
#[derive(Clone, Copy, Debug, Default)]
pub struct Mcp;

impl Mcp {
    /// The method of MCP's cancel notification.
    pub const CANCEL_METHOD: &'static str = "notifications/cancelled";

    /// The first stateless revision: a conversation whose requests carry it (or a later one) in `_meta` is
    /// one where a server sends `notifications/cancelled` only to tear down a subscription.
    pub const FIRST_STATELESS_REVISION: &'static str = "2026-07-28";

    /// The method of a request that opens a subscription: a stream of notifications that the client ends by
    /// cancelling it, and that the server ends with a cancel naming it.
    pub const LISTEN_METHOD: &'static str = "subscriptions/listen";

    /// What a server sends when it tears down the subscription that the client's `subscriptions/listen` request
    /// `listen_id` opened (the one use of `notifications/cancelled` a server of the stateless revision has):
    /// over stdio on the connection, over HTTP on the subscription's own stream, before the stream ends; no reply
    /// follows it. The cancel layer sends it itself whenever the server ends a subscription that the client did
    /// not end (see [`Dialect::ends_with_cancel`]); `reason`, when the server cancelled it, says why.
    pub fn subscription_teardown(listen_id: &Id, reason: Option<&CancelReason>) -> WireRequest {
        let reason = match reason {
            Some(reason) => format!("subscription ended by the server: {reason}"),
            None => "subscription ended by the server".to_owned(),
        };
        WireRequest::notification(
            Self::CANCEL_METHOD,
            json!({ "requestId": listen_id, "reason": reason }),
        )
    }
}

/// The `_meta` key of the stateless revision's per-request version.
const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";

#[derive(Deserialize)]
struct VersionMeta {
    #[serde(rename = "_meta")]
    meta: Option<VersionOnly>,
}

#[derive(Deserialize)]
struct VersionOnly {
    #[serde(rename = "io.modelcontextprotocol/protocolVersion")]
    version: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ProgressParams {
    progress_token: Value,
    progress: f64,
    #[serde(default)]
    total: Option<f64>,
    #[serde(default)]
    message: Option<String>,
}

#[derive(Deserialize)]
struct WithMeta {
    #[serde(rename = "_meta")]
    meta: Option<Meta>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Meta {
    progress_token: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Params {
    request_id: Id,
    #[serde(default)]
    reason: Option<String>,
}

impl Dialect for Mcp {
    fn name(&self) -> &'static str {
        "mcp"
    }

    fn recognize(&self, notification: &WireRequest, _session: &SessionState) -> Recognized {
        recognize_cancel(notification, Self::CANCEL_METHOD, |p: Params| {
            CancelNotice {
                id: p.request_id,
                reason: p.reason,
            }
        })
    }

    fn is_cancellable(&self, method: &str, _session: &SessionState) -> bool {
        method != "initialize"
    }

    fn observe_request(&self, request: &WireRequest, session: &SessionState) {
        // Decided once per conversation: a stateless one on its first request; one that completed `initialize`
        // speaks a session revision, so its requests are not looked at again (their params may be large).
        // Before that, only params that name the key at all are parsed.
        if session.sends_no_cancels() || session.is_initialized() {
            return;
        }
        let Some(params) = request.params() else {
            return;
        };
        if !params.get().contains(META_VERSION) {
            return;
        }
        let version = serde_json::from_str::<VersionMeta>(params.get())
            .ok()
            .and_then(|p| p.meta?.version);
        // Revisions are dates: a later one compares greater.
        if version.is_some_and(|v| v.as_str() >= Self::FIRST_STATELESS_REVISION) {
            session.forbid_cancels();
        }
    }

    fn may_send_cancel(&self, method: &str, session: &SessionState) -> bool {
        method != "initialize" && !session.sends_no_cancels()
    }

    fn ends_with_cancel(&self, method: &str) -> bool {
        method == Self::LISTEN_METHOD
    }

    fn end_notice(&self, id: &Id, reason: Option<&CancelReason>) -> WireRequest {
        Self::subscription_teardown(id, reason)
    }

    fn may_send_request(&self, _method: &str, session: &SessionState) -> bool {
        // A stateless conversation (its requests carried the `2026-07-28` revision or later) has no requests from
        // server to client: the server asks for input with an `input_required` result instead.
        !session.sends_no_cancels()
    }

    fn cancelled_reply(&self, reason: &CancelReason, _server_cancellable: bool) -> CancelledReply {
        match reason {
            CancelReason::Peer { .. } | CancelReason::Group { .. } | CancelReason::Disconnect => {
                CancelledReply::Nothing
            }
            CancelReason::Timeout => {
                CancelledReply::Error(ErrorObject::new(code::REQUEST_TIMEOUT, "Request timed out"))
            }
            other => CancelledReply::Error(ErrorObject::internal_error(format!(
                "request cancelled ({other})"
            ))),
        }
    }

    fn progress_token(&self, request: &WireRequest, _extensions: &Extensions) -> Option<Value> {
        let token = request.params_as::<WithMeta>().ok()?.meta?.progress_token?;
        (token.is_string() || token.is_i64()).then_some(token)
    }

    fn progress_notification(
        &self,
        token: &Value,
        event: ProgressEvent<'_>,
    ) -> Option<WireRequest> {
        let ProgressEvent::Report { update, .. } = event else {
            return None;
        };
        let mut params = json!({ "progressToken": token, "progress": number(update.progress) });
        if let Some(total) = update.total {
            params["total"] = number(total);
        }
        if let Some(message) = &update.message {
            params["message"] = json!(message);
        }
        Some(WireRequest::notification("notifications/progress", params))
    }

    fn read_progress(&self, notification: &WireRequest) -> Option<(Value, ProgressUpdate)> {
        if notification.method() != "notifications/progress" {
            return None;
        }
        let p: ProgressParams = notification.params_as().ok()?;
        let update = ProgressUpdate {
            progress: p.progress,
            total: p.total,
            message: p.message,
        };
        Some((p.progress_token, update))
    }

    fn attach_progress_token(&self, params: &mut Value, token: &Value) -> bool {
        let Some(meta) = meta::meta_object(params) else {
            return false;
        };
        meta.insert("progressToken".into(), token.clone());
        true
    }

    fn allows_partial_result(&self) -> bool {
        false
    }

    fn waits_after_cancel(&self) -> bool {
        false
    }

    /// SEP-414 reserves `traceparent`, `tracestate` and `baggage` in `params._meta`.
    fn carries_trace_context(&self) -> bool {
        true
    }

    fn cancel_message(&self, id: &Id, reason: &CancelReason) -> WireRequest {
        WireRequest::notification(
            Self::CANCEL_METHOD,
            json!({ "requestId": id, "reason": reason.to_string() }),
        )
    }
}

/// A whole number as an integer (`3`, not `3.0`), as peers write their progress.
fn number(n: f64) -> Value {
    // 2^53: every whole f64 below it is an exact i64.
    if n.fract() == 0.0 && n.abs() < 9_007_199_254_740_992.0 {
        json!(n as i64)
    } else {
        json!(n)
    }
}
