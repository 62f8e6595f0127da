//! tower-cancel in HTTP servers, on axum and hyper: the same stack as over stdio, where a client that hangs up
//! cancels its request (where its protocol says so).
//!
//! - [`JsonRpc`]: JSON-RPC over HTTP, one request or batch per POST, mounted at a path of your axum `Router`;
//!   each POST a scope of its own, or the POSTs of one principal sharing one.
//! - [`McpHttp`]: MCP over Streamable HTTP, the `2025-11-25` revision (sessions; a cancel is a POSTed
//!   `notifications/cancelled`) and the `2026-07-28` one (stateless; closing a request's stream is its cancel),
//!   chosen per request.
//! - [`rap`]: RAP tool servers ([`rap::ToolServer`]: invocations answered at a callback, the runtime's
//!   `cancel_tool_call` and `close_thread` stopping the handler) and runtimes ([`rap::Runtime`],
//!   [`rap::Notifier`]: a cancel sent to every tool server at once).
//!
//! Every front end takes a [`CancelStack`](tower_cancel::CancelStack) over your handler (any [`RpcService`])
//! and runs each request on a task of its own, so a request can outlive its HTTP response where a disconnect
//! must not cancel it.

pub mod abp;
pub mod auth;
mod body;
mod call;
pub mod front;
pub mod jsonrpc;
pub mod mcp;
pub mod rap;
mod scopes;

pub use call::RpcService;
pub use front::DEFAULT_MAX_BODY_BYTES;
pub use jsonrpc::JsonRpc;
pub use mcp::McpHttp;
