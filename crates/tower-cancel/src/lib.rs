//! Cancellation of in-flight JSON-RPC requests as a cross-cutting concern.
//!
//! Wrap any `tower::Service<Request>` in these layers: a peer's cancel message, a timeout, a closed connection, a
//! shutdown or a cancel from your own code then stops the work and answers the caller the way its protocol expects.
//! Requests arrive through a [`Connection`] of a [`Scope`] (see [`scope`]): what a cancel can reach.
//!
//! # The layers, outermost first
//!
//! ```text
//! ErrorMapLayer<D>   every outcome -> the dialect's wire reply (-32800, no reply for MCP, -32603 for a panic, ...)
//! CancelLayer<D>     consumes cancel messages; registers each request; gives it a RequestContext; races it
//! TimeoutLayer       a deadline per request; on expiry, cancels it with reason Timeout (answered like a cancel)
//! CascadeLayer       gives the handler a Peer whose requests are cancelled with the handler's own request
//! your service       Service<Request, Response = serde_json::Value>
//! ```
//!
//! [`CancelStack`] builds them for a dialect in one line. Each layer also works alone. Put tower's backpressure
//! layers (`ConcurrencyLimit`, `RateLimit`) below the stack: the cancel and timeout layers are always ready, so a
//! queued request can still be cancelled or time out.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
//! use tower_cancel::{CancelStack, Incoming, Message, Outbox, Request, Scope};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let mut service = ServiceBuilder::new()
//!     .layer(CancelStack::lsp())
//!     .service(service_fn(|req: Request| async move {
//!         tokio::time::sleep(Duration::from_secs(60)).await;
//!         Ok::<_, tower_cancel::BoxError>(serde_json::json!({ "done": req.method() }))
//!     }));
//!
//! // A transport makes a connection of a scope for each link, and hands it every message it reads.
//! let (outbox, _to_the_wire) = Outbox::new();
//! let connection = Scope::new().connect(outbox);
//! let read = |bytes: &[u8]| match connection.receive(Message::from_slice(bytes).unwrap()) {
//!     Incoming::Request(request) => request,
//!     _ => unreachable!("requests and notifications only here"),
//! };
//!
//! let slow = read(br#"{"jsonrpc":"2.0","id":7,"method":"slow"}"#);
//! let reply = tokio::spawn(service.ready().await.unwrap().call(slow));
//! tokio::task::yield_now().await;
//!
//! // The peer's cancel arrives through the same service.
//! let cancel = read(br#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":7}}"#);
//! service.ready().await.unwrap().call(cancel).await.unwrap();
//!
//! let reply = reply.await.unwrap().unwrap().unwrap();
//! assert_eq!(reply.outcome.unwrap_err().code, -32800);
//! assert!(connection.registry().is_empty());
//! # }
//! ```
//!
//! The `tower-cancel-io` crate serves such a stack over stdio, pipes and sockets, with LSP and NDJSON framing.
//!
//! # The protocols' other cancels
//!
//! LSP's `window/workDoneProgress/cancel {token}` cancels the request that created the progress token (with
//! [`Request::create_progress`], or any `window/workDoneProgress/create` its handler sends through
//! [`Request::peer`]), as its `$/cancelRequest` would: -32800, its progress ended before the reply. The notification
//! is then passed on to the service.
//!
//! ACP's `session/cancel {sessionId}` ends a turn: with
//! [`CancelStack::group_by_param("sessionId")`](CancelStack::group_by_param) every request of that session in
//! flight is cancelled ([`CancelReason::Group`]), its `session/prompt` answering the result
//! `{"stopReason":"cancelled"}` and the others -32800; a handler tells it from `$/cancel_request` by its
//! [reason](RequestContext::reason). The notification is then passed on too; nothing is remembered of a cancel that
//! found nothing in flight (the next prompt is a new turn).
//!
//! # Deadlines across hops
//!
//! A request's deadline follows the requests its handler makes, as gRPC's does. A call made through the
//! request's [`Peer`] ([`Request::peer`], or [`Peer::child_of_context`] for another connection's peer):
//!
//! - stops at the request's deadline at the latest: its own timeout is the earlier of its own (or the handle's
//!   default) and the time the request has left, and [`PeerCall::timeout`] or [`PeerCall::no_timeout`] never
//!   extend it. There it ends with [`PeerError::TimedOut`] and sends the dialect's cancel, reason Timeout;
//! - carries that time in its params, whole milliseconds rounded down (a hop never extends a deadline):
//!   `params._meta.<field>`, the field the request's own [`TimeoutLayer::from_meta`](timeout::TimeoutLayer::from_meta)
//!   reads, or [`timeout::DEADLINE_FIELD`] (`timeoutMs`). The next hop's `TimeoutLayer::from_meta` applies the earlier
//!   of it and its own limit, and so on ([`Dialect::attach_deadline`] decides; ABP and RAP carry their timeouts
//!   elsewhere and write nothing);
//! - is not sent at all when less than a millisecond is left ([`PeerError::TimedOut`]).
//!
//! Over JSON-RPC over HTTP the time travels in a header (`tower-cancel-http`'s `Timeout-Ms`).
//!
//! ```
//! use std::time::Duration;
//! use serde_json::{json, Value};
//! use tower::{service_fn, ServiceBuilder, ServiceExt};
//! use tower_cancel::{dialect::Mcp, timeout::{TimeoutLayer, DEADLINE_FIELD}, BoxError, CancelStack, Outbox, Peer, Request};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
//! // A proxy: its handler calls a tool server on another connection.
//! let (outbox, mut to_the_tool_server) = Outbox::new();
//! let tools = Peer::new(Mcp, outbox);
//! let timeouts = TimeoutLayer::new(Duration::from_secs(30)).from_meta(DEADLINE_FIELD);
//! let proxy = ServiceBuilder::new()
//!     .layer(CancelStack::mcp().timeouts(timeouts))
//!     .service(service_fn(move |req: Request| {
//!         let tools = tools.child_of_context(req.context().expect("behind the stack"));
//!         async move { Ok::<Value, BoxError>(tools.request("tools/call", json!({ "name": "search" })).await?) }
//!     }));
//!
//! // Its caller gives the request 250 ms: the call to the tool server is told so, and both stop then.
//! let request = Request::new(1, "tools/call", json!({ "name": "search", "_meta": { "timeoutMs": 250 } }));
//! let reply = proxy.oneshot(request).await.unwrap().unwrap();
//! assert_eq!(reply.outcome.unwrap_err().code, -32001); // MCP's "Request timed out"
//! let sent: Value = serde_json::from_slice(&to_the_tool_server.try_recv().unwrap()).unwrap();
//! assert_eq!(sent["params"], json!({ "name": "search", "_meta": { "timeoutMs": 250 } }));
//! # }
//! ```
//!
//! # Tracing
//!
//! The cancel layer gives every request with an id a span at level DEBUG, named `request`, entered around each
//! poll of the request's future (so the handler's own events fall inside it), with the fields `id`, `method`,
//! and, recorded when the request ends, `outcome` (`completed`, `failed`, `panicked`, `cancelled`, `duplicate`,
//! `dropped`) and, for `cancelled`, `reason` (`peer`, `timeout`, `disconnect`, `shutdown`, `parent`, `local`).
//! [`cancel`] says when each outcome is given. With DEBUG off, a request pays one check of the span's callsite
//! and keeps no span.
//!
//! The span is also an OpenTelemetry server span, through
//! [tracing-opentelemetry](https://docs.rs/tracing-opentelemetry/0.34)'s layer: `otel.name` (the method),
//! `otel.kind = server`, `rpc.system = jsonrpc`, `rpc.method`, `rpc.jsonrpc.request_id`, `rpc.jsonrpc.version`, and
//! when it ends `rpc.jsonrpc.error_code` (the code of the error reply the request got: its dialect's cancelled
//! reply, or the handler's error; none where the dialect answers nothing, as MCP a peer's cancel), `error.type`
//! (the cancel's `reason`, or the handler's error code) and the status: `otel.status_code = error` with the reply's
//! message for a timeout and for a handler that failed or panicked, unset otherwise. A peer's cancel is not an error
//! here: the caller got what it asked for, and OpenTelemetry's conventions have not settled whether a cancel is
//! one. The RPC fields are written a second time in the semantic conventions' current names (`rpc.system.name`,
//! `jsonrpc.request.id`, `jsonrpc.protocol.version`, `rpc.response.status_code` as a string): the first names are
//! deprecated since semconv 1.38, and both are written during the change, as semconv's own migration does.
//!
//! A cancelled request's span gets one INFO event `cancel` when the cancel layer first sees the cancel (or at its
//! end, for a future dropped before it did), with `cancel.reason` (as `reason`), `cancel.source` (`peer`: the
//! peer's cancel or hang-up; `local`: a timeout, a shutdown, a parent's cancel, this side's code) and
//! `cancel.text` (the peer's or the code's reason text, if any).
//!
//! With the `opentelemetry` feature, a dialect that carries a W3C trace context in `params._meta`
//! ([`Dialect::carries_trace_context`]: MCP's SEP-414 `traceparent`, `tracestate`, `baggage`; ACP the same; not
//! LSP) joins the caller's trace: the context an incoming request carries becomes its span's parent, and a
//! [`Peer`]'s requests carry the current span's context (a handler's calls through [`Request::peer`] run inside
//! the request's span, so the callee's spans are its children; a call moved onto a task of its own needs
//! `.instrument(Span::current())`). Both go through the application's global propagator
//! (`opentelemetry::global::set_text_map_propagator`), which chooses the keys; empty values are not written. The
//! `otel` example exports it all over OTLP.
//!
//! # Feature flags
//!
//! - `metrics` (off by default): an operator's counters and a latency histogram, recorded through the
//!   [`metrics`](https://docs.rs/metrics/0.24) facade into the recorder the application installs. Off, nothing is
//!   recorded and the hot path pays nothing. [`metrics`] says what each one counts:
//!
//!   | name | type | labels |
//!   |---|---|---|
//!   | `tower_cancel_requests_registered_total` | counter | `dialect` |
//!   | `tower_cancel_requests_completed_total` | counter | `dialect` |
//!   | `tower_cancel_requests_cancelled_total` | counter | `dialect`, `reason` |
//!   | `tower_cancel_early_cancels_remembered_total` | counter | none |
//!   | `tower_cancel_early_cancels_dropped_total` | counter | none |
//!   | `tower_cancel_cancel_to_settle_seconds` | histogram | `dialect`, `reason` |
//!
//!   `dialect` is [`Dialect::name`] (`lsp`, `acp`, `acp-draft`, `mcp`, ...); `reason` is the cancel's source
//!   (`peer`, `timeout`, `disconnect`, `shutdown`, `parent`, `local`).
//! - `opentelemetry` (off by default): the W3C trace context of `params._meta`, read into each request's span and
//!   written into a [`Peer`]'s requests (see "Tracing" above), through
//!   [opentelemetry](https://docs.rs/opentelemetry/0.33) 0.33 and tracing-opentelemetry 0.34. Off, the crate
//!   depends on neither and reads no `_meta`; the span's OpenTelemetry fields are there either way.

#![forbid(unsafe_code)]

pub mod bus;
pub mod cancel;
pub mod cascade;
mod context;
pub mod dialect;
mod dispatch;
pub mod error_map;
mod lifecycle;
mod loom;
pub mod message;
pub mod metrics;
pub mod outbox;
mod outcome;
pub mod outgoing;
pub mod peer;
pub mod progress;
mod progress_update;
mod reason;
pub mod registry;
mod request;
pub mod scope;
mod session;
pub mod stack;
pub mod timeout;
mod trace_context;
pub mod unwind;
mod window;

pub use cancel::{CancelLayer, Cancelled, Mode, Panicked, Unavailable};
pub use cascade::CascadeLayer;
pub use context::RequestContext;
pub use dialect::Dialect;
pub use error_map::ErrorMapLayer;
pub use message::{ErrorObject, Id, Response, WireRequest};
pub use outbox::Outbox;
pub use outcome::BoxError;
pub use peer::{Peer, PeerCall, PeerError};
pub use reason::{CancelReason, MAX_REASON_BYTES};
pub use registry::Registry;
pub use request::{Incoming, Message, Request};
pub use scope::{Connection, Scope};
pub use stack::CancelStack;
pub use timeout::TimeoutLayer;
