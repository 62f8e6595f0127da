use serde::Deserialize;
use serde_json::json;

use super::{
    recognize_cancel, request_cancelled, CancelNotice, CancelledReply, Dialect, Recognized,
};
use crate::{
    context::CancelReason,
    message::{Id, Request},
    registry::SessionState,
};

/// The Language Server Protocol: `$/cancelRequest {"id": …}`, answered with -32800.
///
/// Either side may send it; a cancel for an unknown or completed request is ignored. `initialize` is never
/// cancellable. The caller keeps waiting for the reply after it cancelled (vscode-jsonrpc's behaviour).
#[derive(Clone, Copy, Debug, Default)]
pub struct Lsp;

impl Lsp {
    /// The method of LSP's cancel notification.
    pub const CANCEL_METHOD: &'static str = "$/cancelRequest";
}

#[derive(Deserialize)]
struct Params {
    id: Id,
}

impl Dialect for Lsp {
    fn name(&self) -> &'static str {
        "lsp"
    }

    fn recognize(&self, notification: &Request, _session: &SessionState) -> Recognized {
        recognize_cancel(notification, Self::CANCEL_METHOD, |p: Params| {
            CancelNotice {
                id: p.id,
                reason: None,
            }
        })
    }

    fn is_cancellable(&self, method: &str, _session: &SessionState) -> bool {
        method != "initialize"
    }

    fn cancelled_reply(&self, _reason: &CancelReason) -> CancelledReply {
        request_cancelled("Request cancelled")
    }

    fn cancel_message(&self, id: &Id, _reason: Option<&str>) -> Request {
        Request::notification(Self::CANCEL_METHOD, json!({ "id": id }))
    }
}
