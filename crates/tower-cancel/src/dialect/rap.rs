//! The Remote Action Protocol's cancellation rules: [`Rap`], and the code of a call this side stopped.

use super::{CancelledReply, Dialect, Recognized};
use crate::{
    message::{ErrorObject, Id, WireRequest},
    reason::CancelReason,
    session::SessionState,
};

/// RAP, the Remote Action Protocol, for the stack a tool server serves (`tower-cancel-http`'s `rap` module is its
/// transport): cancels come from the `/cancel_tool_call` and `/close_thread` endpoints, never as messages, and a
/// call the runtime cancelled gets no result (the runtime has already put its own "interrupted" result in the
/// conversation). A call stopped for any other reason (a timeout of the stack, a shutdown) still gets a result,
/// an error, since the runtime is waiting for it.
///
/// ```
/// use tower_cancel::{dialect::Rap, CancelStack};
///
/// let stack = CancelStack::rap().timeout(std::time::Duration::from_secs(300));
/// # let _: CancelStack<Rap> = stack;
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct Rap;

/// The JSON-RPC code of a call stopped by this side (a timeout, a shutdown); its result's text is the message.
pub const STOPPED: i64 = -32800;

impl Dialect for Rap {
    fn name(&self) -> &'static str {
        "rap"
    }

    // The RAP runtime sets each tool call's timeout itself: nothing in the params.
    fn attach_deadline(
        &self,
        _params: &mut serde_json::Value,
        _field: &str,
        _remaining: std::time::Duration,
    ) -> bool {
        false
    }

    fn recognize(&self, _notification: &WireRequest, _session: &SessionState) -> Recognized {
        Recognized::NotACancel
    }

    fn is_cancellable(&self, _method: &str, _session: &SessionState) -> bool {
        true
    }

    fn cancelled_reply(&self, reason: &CancelReason, _server_cancellable: bool) -> CancelledReply {
        let message = match reason {
            // The runtime's cancel, or its close of the thread.
            CancelReason::Peer { .. } | CancelReason::Group { .. } => {
                return CancelledReply::Nothing
            }
            CancelReason::Timeout => "the tool call timed out",
            CancelReason::Shutdown => "the tool server is shutting down",
            CancelReason::Disconnect => "the tool call was stopped: its connection closed",
            CancelReason::Parent => "the tool call was stopped with the call it was made for",
            CancelReason::Local { .. } => "the tool call was stopped by the tool server",
        };
        CancelledReply::Error(ErrorObject::new(STOPPED, message))
    }

    fn allows_partial_result(&self) -> bool {
        // After the runtime's cancel nothing is sent, a partial result neither.
        false
    }

    fn cancel_message(&self, id: &Id, _reason: &CancelReason) -> WireRequest {
        // Never sent: a tool server sends no requests of its own to the runtime. Shaped as the endpoint's body.
        WireRequest::notification(
            "cancel_tool_call",
            serde_json::json!({ "tool_call_id": id }),
        )
    }

    fn waits_after_cancel(&self) -> bool {
        false
    }
}
