//! rmcp 3.11 servers under tower-cancel: keep your `ServerHandler`, serve it under
//! [`CancelStack::mcp()`](tower_cancel::CancelStack::mcp) with [`RmcpService`].
//!
//! ```no_run
//! # use rmcp::{model::ServerConfig, ServerHandler};
//! # #[derive(Clone)] struct MyServer;
//! # impl ServerHandler for MyServer { fn get_info(&self) -> ServerConfig { ServerConfig::default() } }
//! # async fn before() -> Result<(), Box<dyn std::error::Error>> {
//! // Before: rmcp's own loop over stdio.
//! use rmcp::ServiceExt;
//! MyServer.serve((tokio::io::stdin(), tokio::io::stdout())).await?.waiting().await?;
//! # Ok(()) }
//! # async fn after() -> std::io::Result<()> {
//! // After: the same handler, under the stack, on tower-cancel's driver.
//! use tower_cancel::CancelStack;
//! use tower_cancel_io::{Framing, Server};
//! use tower_cancel_rmcp::RmcpService;
//! Server::with_stack(CancelStack::mcp(), RmcpService::new(MyServer))
//!     .serve_stdio(Framing::Ndjson)
//!     .await
//! # }
//! ```
//!
//! The handler keeps its code: it watches `context.ct` as rmcp handlers do. What it gains is the stack's: exactly one
//! reply under every race, early cancels remembered (bounded), cancels never queued behind backpressure, a client
//! that stops reading bounded, server-side timeouts answered -32001 (idle, pushed back by progress, with a maximum),
//! graceful shutdown, metrics and spans. Behind our Streamable HTTP front end, both revisions:
//!
//! ```no_run
//! # use rmcp::{model::ServerConfig, ServerHandler};
//! # #[derive(Clone)] struct MyServer;
//! # impl ServerHandler for MyServer { fn get_info(&self) -> ServerConfig { ServerConfig::default() } }
//! use tower::ServiceBuilder;
//! use tower_cancel::CancelStack;
//! use tower_cancel_http::McpHttp;
//! use tower_cancel_rmcp::RmcpService;
//!
//! let rmcp = RmcpService::new(MyServer);
//! let stack = ServiceBuilder::new().layer(CancelStack::mcp()).service(rmcp.clone());
//! let mcp = McpHttp::new(stack).on_session_end(move |id| rmcp.end_session(id));
//! let app = mcp.router(); // serve with tower_cancel_http::serve(listener, app)
//! ```
//!
//! # How it works
//!
//! A `ServerHandler` needs rmcp's own `Peer`, which only rmcp can make, so rmcp still serves the handler: over an
//! in-memory transport of typed messages (not bytes), one rmcp server per conversation (a stream connection, an
//! HTTP session; one shared by the stateless `2026-07-28` requests). The stack sits in front:
//!
//! - Every cancel the stack decides (the client's `notifications/cancelled`, a timeout, the end of the input, a
//!   stateless client's hang-up, a session's DELETE, a shutdown, a cancel from another replica) drops the request's
//!   future, which sends rmcp a `notifications/cancelled` for it: the handler's `ct` fires. rmcp never aborts a
//!   handler, so a handler that never looks at `ct` runs on to its end, unheard.
//! - rmcp sees ids of the bridge's own, never the client's: rmcp forgets a cancelled request, so a reused id would
//!   otherwise get the old handler's late answer. An answer for a request the stack already settled is dropped.
//! - An early cancel (before its request) is the stack's: the handler is never called.
//! - A request the handler makes to the client through rmcp's peer (sampling, elicitation, roots) carries rmcp's
//!   `OriginatingRequestId`, so the bridge sends it through the child [`Peer`](tower_cancel::Peer) of the request it
//!   was made in: over stdio on the connection, in a `2025-11-25` HTTP session on the SSE stream of the POST that
//!   carries that request (the client's answer, POSTed on any later request of the session, reaches it). When that
//!   request is cancelled, the client gets `notifications/cancelled` for it, as with
//!   [`CascadeLayer`](tower_cancel::CascadeLayer), and rmcp gets an error answer for it (-32603 `request
//!   cancelled`), after the cancel that fires `ct`: rmcp forgets it, and a handler awaiting it ends (select on `ct`
//!   first, `biased`, to tell the two apart). The client's progress on it goes back to rmcp.
//! - Subscriptions are rmcp's (`accepted_subscription_filter`, `listen`): the notifications that name a
//!   subscription (rmcp's acknowledgment, what its `SubscriptionSink` sends) go on the listen's own stream, and
//!   name it by the client's id. When `listen` returns, the stack ends the subscription with
//!   `notifications/cancelled` naming it, in place of rmcp's result; a client that ends it fires `ct`.
//! - Progress the handler reports (`peer.notify_progress` with the request's token) goes through the request's
//!   [`Progress`](tower_cancel::progress::Progress): it pushes the idle timeout back and stops with the request.
//! - A handler that panics is answered -32603 `handler panicked` (rmcp would never answer it).
//! - The handler finds the request's [`Connection`](tower_cancel::Connection) and the extensions the transport
//!   gave it (`http::Extensions`: over HTTP, the headers and the [`Revision`](tower_cancel_http::mcp::Revision))
//!   in `RequestContext::extensions`.
//!
//! # What it cannot do
//!
//! - A handler's request to the client made outside the request's task (after a `tokio::spawn`) loses rmcp's
//!   `OriginatingRequestId` (a task-local): it is sent on the connection's peer and is not cancelled with any
//!   request. A notification of the handler's that belongs to no request (a log, a list changed) goes the same way;
//!   over HTTP there is no stream for it (no GET stream), and it is dropped.
//! - The stateless revision forbids requests to the client: rmcp refuses them itself (`ServiceError::McpError`,
//!   -32600), before anything is sent.
//! - rmcp serves `subscriptions/listen` only in the stateless revision (`2026-07-28`, whose method it is): in a
//!   session opened by `initialize` it answers -32601 before the handler runs.
//! - rmcp's own answers are its own: a stateless `ping` is refused -32601 with rmcp's wording.

mod call;
mod guarded;
mod link;
mod service;
mod wire;

pub use service::{BridgeSizes, RmcpService};
