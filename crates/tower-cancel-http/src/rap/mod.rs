//! RAP, the Reactive Agent Protocol: tool servers that a runtime invokes over HTTP and calls back from, and the
//! cancellation between them.
//!
//! - **Tool-server side**: [`ToolServer`] serves a [`CancelStack`](tower_cancel::CancelStack) of the [`Rap`]
//!   dialect over your tools ([`Tools`], one tower `Service` per operation, or any service that dispatches) behind
//!   RAP's endpoints: discovery, invocation (acknowledged at once, the result POSTed to the runtime later),
//!   `cancel_tool_call`, `close_thread` and `tool_call_status`. A call is keyed by (thread, tool call id); a
//!   cancelled call's handler is stopped and sends no result.
//! - **Runtime side**: [`Notifier`] sends `cancel_tool_call` and `close_thread` to every tool server at once,
//!   never retried, each with its own timeout, never blocking the caller.
//!
//! The wire types are in [`wire`] (re-exported here), the id checks in [`ids`].

pub mod ids;
mod notifier;
mod output;
mod runtime;
pub(crate) mod server;
mod tools;
pub mod wire;

pub use notifier::{
    Delivery, Fanout, Notifier, NotifierStats, NotifyError, DEFAULT_NOTIFY_TIMEOUT,
};
pub use output::ToolOutput;
pub use runtime::{CallError, OutgoingCall, Runtime, ACKNOWLEDGE_TIMEOUT};
pub use server::{
    PublicResolver, ToolServer, ToolServerStats, DEFAULT_MAX_THREADS, DEFAULT_NOTICES_PER_SECOND,
    DEFAULT_THREAD_LINGER, MAX_NOTICE_BYTES,
};
pub use tools::Tools;
pub use tower_cancel::dialect::rap::{Rap, STOPPED};
pub use wire::{CallStatus, CancelToolCall, CloseThread, Invocation, ToolDef, ToolResult, Toolset};

/// What a handler knows of the invocation it serves, in its request's extensions (the operation is the request's
/// method, the arguments its params, the tool call id its id).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ToolCall {
    /// The thread (the invocation's `group_id`).
    pub thread_id: String,
    /// The tool call's id (the invocation's `id`).
    pub tool_call_id: String,
    /// The provider's second id, if any.
    pub call_id: Option<String>,
    /// The end user, if the runtime told.
    pub user_id: Option<String>,
    /// The thread's ancestors, root first (empty for a root thread).
    pub thread_ancestors: Vec<String>,
}

impl ToolCall {
    fn of(invocation: &Invocation) -> Self {
        Self {
            thread_id: invocation.group_id.clone(),
            tool_call_id: invocation.id.clone(),
            call_id: invocation.call_id.clone(),
            user_id: invocation.user_id.clone(),
            thread_ancestors: invocation.thread_ancestors.clone().unwrap_or_default(),
        }
    }
}
