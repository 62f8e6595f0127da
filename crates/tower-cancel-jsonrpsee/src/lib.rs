//! jsonrpsee 0.26 servers under tower-cancel: keep your `RpcModule` and your `Server`, mount
//! [`CancelRpcLayer`] as their RPC middleware.
//!
//! ```no_run
//! # use std::time::Duration;
//! # use jsonrpsee::server::{RpcModule, Server};
//! # async fn before(module: RpcModule<()>) -> std::io::Result<()> {
//! // Before: jsonrpsee alone.
//! let server = Server::builder().build("127.0.0.1:9944").await?;
//! let handle = server.start(module);
//! # Ok(()) }
//! # async fn after(module: RpcModule<()>) -> std::io::Result<()> {
//! // After: every call cancellable (its handler stopped, answered -32800), by a `$/cancelRequest` too.
//! use jsonrpsee::server::middleware::rpc::RpcServiceBuilder;
//! use tower_cancel_jsonrpsee::CancelRpcLayer;
//! let cancel = CancelRpcLayer::new().cancel_messages(true).timeout(Duration::from_secs(30));
//! let server = Server::builder()
//!     .set_rpc_middleware(RpcServiceBuilder::new().layer(cancel.clone()))
//!     .build("127.0.0.1:9944")
//!     .await?;
//! let handle = server.start(module);
//! # Ok(()) }
//! ```
//!
//! The same layer goes in a `to_service_builder()` under your own accept loop. jsonrpsee serves JSON-RPC over
//! HTTP POST and over WebSocket on one port; each call now goes through tower-cancel's cancel and timeout layers
//! (the [LSP](tower_cancel::dialect::Lsp) dialect) before it reaches the method:
//!
//! | what happens | the handler | the client gets |
//! |---|---|---|
//! | it answers first | runs to its end | its answer, untouched |
//! | its WebSocket closes | stopped (reason `Disconnect`) | nothing: the socket is gone |
//! | its HTTP client hangs up | stopped (reason `Disconnect`) | nothing: the connection is gone |
//! | a `$/cancelRequest {"id"}` on the same WebSocket, with [`cancel_messages`](CancelRpcLayer::cancel_messages) | stopped (reason `Peer`) | -32800 `Request cancelled` |
//! | the same cancel before its call (a bounded window remembers it) | never runs | -32800 |
//! | its [`timeout`](CancelRpcLayer::timeout) passes | stopped (reason `Timeout`) | -32800 |
//! | [`shutdown`](CancelRpcLayer::shutdown) | stopped (reason `Shutdown`); a later call never runs | -32800 |
//! | it panics | unwound | -32603 `Internal error: handler panicked` (jsonrpsee alone never answers it) |
//! | [`max_in_flight`](CancelRpcLayer::max_in_flight) calls already run | never runs | jsonrpsee's -32009 `Server is busy, try again later` |
//!
//! "Stopped" means the handler's future is dropped at its `.await` (or, in [`Mode::Cooperative`](tower_cancel::Mode),
//! its token fires and it has a grace to answer in). A batch is taken element by element: each call is
//! registered as it is read, all of them run at once, a cancel reaches one and the others are answered. The cancel
//! message never reaches jsonrpsee; a malformed one (no id, an id that is neither a number nor a string) or one
//! for an unknown id changes nothing but the window of early cancels.
//!
//! # What a handler sees
//!
//! Each call's [`RequestContext`](tower_cancel::RequestContext) is in the extensions jsonrpsee gives the method:
//! its id, its [`CancellationToken`](tower_cancel::RequestContext::token) (for work the handler hands to a task of
//! its own), the reason it was cancelled, its deadline.
//!
//! ```
//! use jsonrpsee::{server::RpcModule, types::ErrorObjectOwned};
//! use tower_cancel::RequestContext;
//!
//! let mut module = RpcModule::new(());
//! module.register_async_method("work", |_params, _state, extensions| async move {
//!     let context = extensions.get::<RequestContext>().cloned().expect("under the adapter");
//!     let job = tokio::spawn(async { 42 });
//!     tokio::select! {
//!         done = job => done.map_err(|e| ErrorObjectOwned::owned(-32603, e.to_string(), None::<()>)),
//!         // The spawned job is not dropped with the handler: stop it ourselves.
//!         () = context.token().cancelled() => Ok(0),
//!     }
//! })?;
//! # Ok::<(), jsonrpsee::core::RegisterMethodError>(())
//! ```
//!
//! # Scopes
//!
//! A cancel reaches the calls of its own connection: the WebSocket it came on (a cancel POSTed over HTTP reaches
//! nothing, each POST being a connection of its own). With [`scope_by_principal`](CancelRpcLayer::scope_by_principal),
//! the connections of one principal (a value your HTTP middleware put in the request's extensions) share a scope:
//! the principal's cancel, on any of its WebSockets or POSTed, reaches its call of that id, and never another
//! principal's; [`scope_by_principal_on`](CancelRpcLayer::scope_by_principal_on) does so across replicas (over
//! Redis: `tower-cancel-redis`), under the keys tower-cancel-http's `JsonRpc` uses.
//!
//! # What it cannot stop
//!
//! - A blocking method (`register_blocking_method`) runs on `spawn_blocking`: its call is answered -32800 (or
//!   never sent, its socket gone), but the closure runs to its end; no one can stop a thread.
//! - A synchronous method (`register_method`) has returned before anything else could happen.
//! - A subscription: the subscribe call goes through the stack like any call (until it accepts or rejects), the
//!   subscription itself then runs on a task of its own, ended by jsonrpsee when it is unsubscribed or its
//!   WebSocket closes, out of a cancel's reach.
//! - A call whose id is `null`, or a number past `i64::MAX`, cannot be named by a cancel: it goes to jsonrpsee
//!   untouched (not counted, no context, no timeout).
//!
//! # Backpressure, as jsonrpsee 0.26 has it
//!
//! jsonrpsee's WebSocket loop reads each message and hands it at once to a task of its own; it never waits for
//! calls in flight (0.26 has no `max_concurrent_requests`), and its `message_buffer_capacity` only bounds the
//! replies waiting for the socket (a call waits there to send its reply; the loop reads on). So a cancel is never
//! queued behind the calls it targets; it may even overtake its own call, which the early-cancel window is for.
//! The other side of it: a client can start calls without end. [`max_in_flight`](CancelRpcLayer::max_in_flight)
//! (10 000 by default) is the bound: past it a call is answered -32009 without running.
//!
//! # What jsonrpsee does alone
//!
//! jsonrpsee 0.26.1 already drops a call's future when its WebSocket closes (each message's task races the call
//! against the connection's end) or its HTTP client hangs up (hyper drops the response): an async handler stops
//! there without the adapter, but silently, with no token, no reason and no count. No cancel message, no timeout
//! and no shutdown reach a call; `ServerHandle::stop` waits for every call to finish.
//!
//! # Tracing and metrics
//!
//! As tower-cancel's cancel layer gives them: a DEBUG span `request` per call (`id`, `method`, `outcome`,
//! `reason`), and with tower-cancel's `metrics` feature the counters and the cancel-to-settle histogram, under
//! the dialect label `lsp`. [`CancelRpcLayer::stats`] counts the calls in flight, taken and refused, and the
//! connections open.

mod bridge;
mod ids;
mod layer;
mod reply;
mod service;

pub use layer::{CancelRpcLayer, DEFAULT_MAX_BATCH_REPLY_BYTES};
pub use service::CancelRpc;
