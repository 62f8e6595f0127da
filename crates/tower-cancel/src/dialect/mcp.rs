use serde::Deserialize;
use serde_json::json;

use super::{recognize_cancel, CancelNotice, CancelledReply, Dialect, Recognized};
use crate::{
    context::CancelReason,
    message::{Id, Request},
    registry::SessionState,
};

/// The Model Context Protocol: `notifications/cancelled {"requestId": …, "reason": …}`.
///
/// The cancelled request gets **no reply at all**; the reason is logged. Unknown, completed and malformed cancels
/// are ignored, and `initialize` is never cancelled. A handler's partial result is dropped too: MCP has no
/// partial results.
#[derive(Clone, Copy, Debug, Default)]
pub struct Mcp;

impl Mcp {
    /// The method of MCP's cancel notification.
    pub const CANCEL_METHOD: &'static str = "notifications/cancelled";
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

    fn recognize(&self, notification: &Request, _session: &SessionState) -> Recognized {
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

    fn cancelled_reply(&self, _reason: &CancelReason) -> CancelledReply {
        CancelledReply::Nothing
    }

    fn allows_partial_result(&self) -> bool {
        false
    }

    fn cancel_message(&self, id: &Id, reason: Option<&str>) -> Request {
        let params = match reason {
            Some(reason) => json!({ "requestId": id, "reason": reason }),
            None => json!({ "requestId": id }),
        };
        Request::notification(Self::CANCEL_METHOD, params)
    }
}
