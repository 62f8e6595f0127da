//! tower-cancel in HTTP servers, on axum and hyper: the same stack as over stdio, where a client that hangs up
//! cancels its request (where its protocol says so), and a server that shuts down answers what it has in flight.
//!
//! Four front ends, each an axum `Router` of its protocol's endpoints (`router()`, or `router_with(auth)` behind
//! an authentication layer such as [`auth::require_bearer`]):
//!
//! - [`JsonRpc`]: JSON-RPC over HTTP, one request or batch per POST; each POST a scope of its own, or the POSTs
//!   of one principal sharing one.
//! - [`McpHttp`]: MCP over Streamable HTTP, the `2025-11-25` revision (sessions; a cancel is a POSTed
//!   `notifications/cancelled`) and the `2026-07-28` one (stateless; closing a request's stream is its cancel),
//!   chosen per request.
//! - [`rap::ToolServer`]: a RAP tool server (invocations answered at the runtime's callback, the runtime's
//!   `cancel_tool_call` and `close_thread` stopping the handler). The [`rap`] module also has the runtime's side:
//!   [`rap::Runtime`] and [`rap::Notifier`], a cancel sent to every tool server at once.
//! - [`abp::AbpApp`]: an ABP app over WebSocket, each WebSocket one session; a `capabilities/cancel` is answered
//!   with what the call's lifecycle decided, before the call's own result. The [`abp`] module also has the
//!   agent's side, [`abp::Agent`].
//!
//! Each takes a [`CancelStack`](tower_cancel::CancelStack) over your handler (any [`RpcService`]) and runs each
//! request on a task of its own, so a request can outlive its HTTP response where a disconnect must not cancel
//! it. All four stand on one skeleton, [`front`]: how they are built and configured, the link each request
//! arrives on (its scope, the HTTP request's head given to the handler, the hang-up), `in_flight()` and the
//! stats they share ([`front::FrontStats`]), the replica their long-lived scopes are attached to, the body limit,
//! and a graceful shutdown: `shutdown()` cancels every request in flight with reason `Shutdown`, answered as its
//! protocol says, refuses later ones the protocol's way, and `drained()` waits for the end. The skeleton is also
//! the seam through which another framework's HTTP request becomes one of ours ([`front::Front`]).
//!
//! Serve the `Router` they are mounted in with [`serve()`] rather than `axum::serve`: the same loop with every
//! connection bounded against hostile clients (a timeout for a request's head, idle connections closed, a limit
//! on open connections that evicts the longest idle and keeps answering new clients), and a timeout on the
//! bodies the front ends read ([`DEFAULT_BODY_TIMEOUT`]). See the [`serve`](mod@serve) module.

pub mod abp;
pub mod auth;
mod body;
mod call;
pub mod front;
// The fuzz targets' way in (fuzz/); see the module.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod jsonrpc;
pub mod mcp;
pub mod rap;
mod scopes;
pub mod serve;

pub use call::RpcService;
pub use front::{DEFAULT_BODY_TIMEOUT, DEFAULT_MAX_BODY_BYTES};
pub use jsonrpc::JsonRpc;
pub use mcp::McpHttp;
pub use serve::serve;
