//! agent-client-protocol 5.2 agents under tower-cancel: keep your agent, serve it under
//! [`CancelStack::acp()`](tower_cancel::CancelStack::acp) with [`AcpService`].
//!
//! ```no_run
//! # use agent_client_protocol::{Agent, Client, ConnectTo};
//! # fn my_agent() -> impl ConnectTo<Client> { Agent.v1().name("my-agent") }
//! # async fn before() -> agent_client_protocol::Result<()> {
//! // Before: the SDK's own loop over stdio.
//! my_agent().connect_to(agent_client_protocol::Stdio::new()).await
//! # }
//! # async fn after() -> std::io::Result<()> {
//! // After: the same agent, under the stack, on tower-cancel's driver.
//! use tower_cancel::CancelStack;
//! use tower_cancel_acp::AcpService;
//! use tower_cancel_io::{Framing, Server};
//! Server::with_stack(CancelStack::acp(), AcpService::new(my_agent))
//!     .serve_stdio(Framing::Ndjson)
//!     .await
//! # }
//! ```
//!
//! The agent keeps its code: its handlers watch their request's `RequestCancellation` (`responder.cancellation()`,
//! `run_until_cancelled`), as SDK handlers do. What it gains is the stack's: exactly one reply under every race,
//! early cancels remembered (bounded), cancels never queued behind backpressure, a client that stops reading
//! bounded, server-side timeouts answered -32800, a disconnect and a graceful shutdown that stop every handler,
//! metrics and spans.
//!
//! # How it works
//!
//! The SDK only cancels cooperatively: on `$/cancel_request` it sets the request's `RequestCancellation` marker and
//! waits for the handler to answer; a cancel that comes before its request is forgotten; it has no timeouts. Its
//! handlers' futures cannot be dropped from outside: a handler runs its work as a task of the SDK's connection
//! (`cx.spawn`), inside that connection's one future, and the SDK hands out no handle to abort one task. So the
//! SDK still runs the agent, over its in-memory `Channel` of raw JSON-RPC frames, one SDK connection per
//! [`AcpService`], and the stack sits in front:
//!
//! - Every cancel the stack decides (the client's `$/cancel_request`, a timeout, the end of the input, a shutdown)
//!   answers the client -32800 at once and sends the SDK `$/cancel_request` for the request: the handler's
//!   `RequestCancellation` fires. A handler that never looks at it runs on to its end, unheard.
//! - The SDK sees ids of the bridge's own, never the client's: a client reusing a cancelled id never gets the old
//!   handler's late answer, and an answer for a request the stack already settled is dropped.
//! - An early cancel (before its request) is the stack's: the handler is never called.
//! - A request the agent makes to the client (`session/request_permission`, `fs/*`, `terminal/*`) names its
//!   `sessionId`, and a session runs one prompt turn at a time: the bridge sends it through the child
//!   [`Peer`](tower_cancel::Peer) of that session's `session/prompt`. When the prompt is cancelled, the client gets
//!   `$/cancel_request` for it, as with [`CascadeLayer`](tower_cancel::CascadeLayer), and the agent gets it
//!   answered -32800. When the agent withdraws it (it dropped the `SentRequest`, the SDK sends `$/cancel_request`),
//!   it is cancelled on the wire too.
//! - `session/cancel` is ACP's turn cancel. Under `CancelStack::acp().group_by_param("sessionId")` the stack ends
//!   the session's requests (the prompt answers `{"stopReason":"cancelled"}`, the others -32800) and the SDK is
//!   sent `$/cancel_request` for each, like any cancel the stack decides; the notification reaches the agent's
//!   handler all the same. Without the setting it is the agent's alone: the prompt answers as the agent decides.
//! - The agent's notifications (`session/update`) go out on the connection, in the order the SDK sent them.
//! - A handler's panic unwinds the SDK's whole connection (the SDK catches none): the request whose responder
//!   dropped is answered by the SDK itself, every other request it was working on -32603 `agent stopped: a
//!   handler panicked`, and the next request is served by a fresh agent from the function given to
//!   [`AcpService::new`], sent the client's `initialize` first.
//!
//! # What it cannot do
//!
//! - A request of the agent's to the client that names no session, or a session with no prompt in flight, is sent
//!   on the connection and cancelled with no request of the client's (the agent can still withdraw it).
//! - The SDK reads a cancel only between handlers: a handler that does its work without `cx.spawn` holds the
//!   SDK's loop, and its `RequestCancellation` fires only once it returns. The client is answered -32800 at once
//!   all the same.
//! - A fresh agent after a panic keeps only the state the agent function shares between the agents it builds
//!   (sessions kept in an `Arc`); what the SDK kept in its own connection is lost.
//! - The SDK refuses (-32600) a request that arrives before the agent has answered `initialize`.

mod call;
mod link;
mod service;
mod wire;

pub use service::{AcpService, BridgeSizes};
