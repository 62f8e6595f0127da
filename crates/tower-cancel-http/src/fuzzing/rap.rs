//! RAP: a tool server's reading of the runtime's bodies. (Ids are checked by the public
//! [`ids::validate`](crate::rap::ids::validate).)

use crate::rap::{
    server::{invoke, notices},
    wire::{CancelToolCall, CloseThread, Invocation},
};

/// The longest refusal detail of an invocation, before its ellipsis.
pub const MAX_DETAIL_BYTES: usize = invoke::MAX_DETAIL_BYTES;
/// The longest `call_id` an invocation may carry.
pub const MAX_CALL_ID_BYTES: usize = invoke::MAX_CALL_ID_BYTES;

/// An invocation's body, read and checked as `POST {endpoint}` does; the error is the 400's detail.
pub fn read_invocation(body: &[u8]) -> Result<Invocation, String> {
    invoke::read_invocation(body)
}

/// A `cancel_tool_call` (or `tool_call_status`) body, as the endpoint reads it; `None` for one it ignores.
pub fn read_cancel_tool_call(body: &[u8]) -> Option<CancelToolCall> {
    notices::parse(body, "cancel_tool_call")
}

/// A `close_thread` body, as the endpoint reads it; `None` for one it ignores.
pub fn read_close_thread(body: &[u8]) -> Option<CloseThread> {
    notices::parse(body, "close_thread")
}
