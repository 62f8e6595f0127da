//! tower-cancel in HTTP servers, on axum and hyper: the same stack as over stdio, where a client that hangs up
//! cancels its request (where its protocol says so).
//!
//! - [`JsonRpc`]: JSON-RPC over HTTP, one request or batch per POST, mounted at a path of your axum `Router`;
//!   each POST a scope of its own, or the POSTs of one principal sharing one.
//!
//! Every front end takes a [`CancelStack`](tower_cancel::CancelStack) over your handler (any [`RpcService`])
//! and runs each request on a task of its own, so a request can outlive its HTTP response where a disconnect
//! must not cancel it.

mod body;
mod call;
pub mod jsonrpc;
mod scopes;

pub use body::DEFAULT_MAX_BODY_BYTES;
pub use call::RpcService;
pub use jsonrpc::JsonRpc;
