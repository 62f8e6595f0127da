//! [async-lsp](https://docs.rs/async-lsp/0.2) 0.2 servers on tower-cancel: keep your `Router`, serve it with
//! tower-cancel's driver and cancel stack.
//!
//! Before, async-lsp's main loop, its `ConcurrencyLayer` cancelling requests:
//!
//! ```text
//! let (server, _) = MainLoop::new_server(|client| ServiceBuilder::new()
//!     .layer(LifecycleLayer::default()).layer(ConcurrencyLayer::default()).service(router(client)));
//! server.run_buffered(stdin, stdout).await?;
//! ```
//!
//! After, the same router and layers but `ConcurrencyLayer`, behind tower-cancel's stack and driver:
//!
//! ```no_run
//! # use std::time::Duration;
//! # use async_lsp::{router::Router, server::LifecycleLayer, ClientSocket};
//! # use tower::ServiceBuilder;
//! # use tower_cancel::CancelStack;
//! # use tower_cancel_async_lsp::AsyncLsp;
//! # use tower_cancel_io::Server;
//! # fn router(_client: ClientSocket) -> Router<()> { Router::new(()) }
//! # async fn run() -> std::io::Result<()> {
//! let lsp = AsyncLsp::new_server(|client| {
//!     ServiceBuilder::new().layer(LifecycleLayer::default()).service(router(client))
//! });
//! let stack = CancelStack::lsp().timeout(Duration::from_secs(30));
//! let server = Server::with_stack(stack, lsp.service());
//! lsp.serve_stdio(server).await
//! # }
//! ```
//!
//! What the server gains is tower-cancel's: exactly one reply to each request under every race of its end, its
//! cancel, its timeout and the connection's close (a cancelled one gets
//! `{"code":-32800,"message":"Request cancelled"}`); early cancels remembered, within bounds; cancels read even
//! while the server waits for a client that stopped reading its replies; server-side timeouts; graceful shutdown;
//! metrics and spans. async-lsp's `ConcurrencyLayer` goes: the stack consumes `$/cancelRequest` before it could
//! see one, and its single waker can lose wake-ups.
//!
//! # How it works
//!
//! - [`AsyncLsp::new_server`] builds your service as async-lsp's [`MainLoop::new_server`] does, giving it a
//!   [`ClientSocket`]. [`AsyncLsp::service`] is an [`LspAdapter`], the `tower::Service<Request>` the stack wraps:
//!   the client's requests and notifications reach your service through it, from tower-cancel's [`Server`].
//! - async-lsp's main loop still runs, inside [`AsyncLsp::serve`], for what the server sends the client: its
//!   handlers' requests and notifications through their `ClientSocket`, and its events (`ClientSocket::emit`,
//!   handed to your service in order). It writes to an in-memory pipe; the bridge sends each message through the
//!   connection's [`Peer`] and writes the client's replies back.
//! - Calls keep async-lsp's order: your service is called for each request and notification in the order they
//!   arrive (notification handlers get `&mut` state; a request handler sees the state of that moment), and the
//!   requests' futures then run concurrently. This needs the driver's default of polling requests on the
//!   connection's task (not [`Server::spawn_requests`](tower_cancel_io::Server::spawn_requests)) and a service
//!   that is always ready (async-lsp's `Router`, `LifecycleLayer`, `CatchUnwindLayer` and `TracingLayer` are).
//!
//! # Nested requests
//!
//! A request a handler makes to the client (`ClientSocket::request`) is cancelled on the wire, with
//! `$/cancelRequest`, when the handler's own request is cancelled (by the client, a timeout, a shutdown), and when
//! the handler's future is dropped while the request still waits; the handler's `request` then returns error
//! -32800. When the connection closes, it fails with the connection, and nothing more is sent.
//!
//! A request carries nothing that says which handler made it: the socket puts it on the main loop's channel, and
//! the main loop gives it an id of its own. So while a handler's future is polled (the only time it can make
//! one), the adapter puts a mark of the handler on that same channel before the poll and a blank one after; the
//! channel keeps its order, and the bridge reads each request after its handler's mark. The price: one
//! connection's handlers are polled one at a time (as async-lsp's main loop itself polls them all on one task),
//! and each poll sends two small messages through the main loop. What cannot be done:
//!
//! - A handler that drops a `ClientSocket::request` future and goes on: the request keeps waiting for the
//!   client's answer until the handler ends. async-lsp keeps the request's slot in its main loop, out of reach,
//!   and does not tell when its future is dropped.
//! - A request made outside a handler's future (a task the handler spawned, a notification or event handler) is
//!   tied to no handler and never cancelled by the adapter. If another thread makes one at the very moment a
//!   handler is polled, it is taken for that handler's.
//!
//! A `WorkDoneProgressCreate` a handler sends is bound to its request the same way: the client's
//! `window/workDoneProgress/cancel` of the token cancels the handler, then reaches your `Router` (give it a handler
//! for it). Its notifications go out through the main loop, after the stack's reply to a cancelled handler.
//!
//! # Ids
//!
//! async-lsp's ids are `i32` or strings. An integer id outside `i32` reaches your service as a string private to
//! the adapter (`"\u{1}"` and the number); a `Router` handler never sees ids, and the reply goes out with the
//! client's own id.
//!
//! # Notifications
//!
//! async-lsp's `Router` ends its main loop on a notification it has no handler for (other than `$/` ones) and
//! on one whose params it cannot read. Here such a notification is logged and the connection goes on, as LSP
//! wants. A `ControlFlow::Break(Ok(()))` (your `exit` handler, or async-lsp's `LifecycleLayer` on `exit`) ends
//! [`AsyncLsp::serve`], which then returns `Ok(())`.

#![forbid(unsafe_code)]

mod bridge;
mod flow;
mod hub;
mod id;
mod pipe;
mod service;
mod shim;

use std::{
    fmt,
    future::Future,
    io,
    sync::{atomic::Ordering, Arc},
};

pub use async_lsp;
use async_lsp::{ClientSocket, LspService, MainLoop, ResponseError};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::sync::CancellationToken;
use tower_cancel::{BoxError, Peer, Request, Response};
use tower_cancel_io::{Framing, Server};
use tower_service::Service;

pub use crate::service::{HandlerFuture, LspAdapter};
use crate::{hub::Hub, shim::Shim};

/// An async-lsp server made to run behind tower-cancel: its service ([`AsyncLsp::service`]) and the async-lsp
/// main loop that carries what it sends the client ([`AsyncLsp::serve`]). See the [crate docs](crate).
pub struct AsyncLsp<S: LspService> {
    service: LspAdapter<S>,
    main_loop: MainLoop<Shim<S>>,
}

impl<S: LspService> fmt::Debug for AsyncLsp<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncLsp")
            .field("service", &self.service)
            .finish_non_exhaustive()
    }
}

/// What the adapter holds now, to check that nothing is left behind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AdapterStats {
    /// Handlers whose futures are alive (a request of the service not yet answered or dropped).
    pub handlers: usize,
    /// Requests the handlers made to the client that wait for its answer: the entries of async-lsp's table of
    /// outgoing requests, as the bridge made them.
    pub nested_waiting: usize,
}

impl<S> AsyncLsp<S>
where
    S: LspService<Response = Value>,
    ResponseError: From<S::Error>,
{
    /// Builds the server's service with `builder`, as [`MainLoop::new_server`] does: `builder` gets the socket
    /// its handlers reach the client with.
    pub fn new_server(builder: impl FnOnce(ClientSocket) -> S) -> Self {
        let exit = CancellationToken::new();
        let (main_loop, client, service) = shim::main_loop(builder, exit.clone());
        let hub = Arc::new(Hub::new(client, exit));
        Self {
            service: LspAdapter { service, hub },
            main_loop,
        }
    }

    /// The server's service as a `tower::Service<Request>`, for the stack (see the crate docs).
    pub fn service(&self) -> LspAdapter<S> {
        self.service.clone()
    }

    /// A socket to the client, as the service's builder got: requests made with it outside a handler are tied to
    /// no handler.
    pub fn client(&self) -> ClientSocket {
        self.service.hub.client().clone()
    }

    /// A handle to read the adapter's [`AdapterStats`] while it serves.
    pub fn watch(&self) -> Watch {
        Watch {
            hub: self.service.hub.clone(),
        }
    }

    /// Runs the async-lsp main loop for what the server sends the client, through `peer` (the connection's: see
    /// [`Server::peer`]), until the future is dropped. [`AsyncLsp::serve`] runs it beside the connection; this is
    /// for a server that drives its connection itself. Call it before the connection's first request is polled:
    /// the marks that tie nested requests to their handlers start when it is called.
    pub fn run(self, peer: Option<Peer>) -> impl Future<Output = ()> {
        bridge::run(self.main_loop, self.service.hub, peer)
    }

    /// Serves one connection with `server` (built around [`AsyncLsp::service`], wrapped in
    /// [`CancelStack::lsp()`](tower_cancel::CancelStack::lsp)), with `Content-Length` framing, until the client
    /// closes it or the service asks to stop (`ControlFlow::Break(Ok(()))`, on `exit`). The writer runs on a task
    /// of its own, as with [`Server::serve`].
    pub async fn serve<L, R, W>(self, server: Server<L>, reader: R, writer: W) -> io::Result<()>
    where
        L: Service<Request, Response = Option<Response>>,
        L::Error: Into<BoxError>,
        R: AsyncRead + Unpin,
        W: AsyncWrite + Send + Unpin + 'static,
    {
        let exit = self.service.hub.exit.clone();
        let bridge = self.run(server.peer());
        let serving = server.serve(reader, writer, Framing::ContentLength);
        tokio::pin!(bridge, serving);
        let mut bridged = true;
        loop {
            tokio::select! {
                served = &mut serving => return served,
                () = &mut bridge, if bridged => bridged = false,
                () = exit.cancelled() => return Ok(()),
            }
        }
    }

    /// [`AsyncLsp::serve`] over standard input and output.
    ///
    /// As for [`Server::serve_stdio`]: to stop before standard input closes, end the process with
    /// [`std::process::exit`] after this returns.
    pub async fn serve_stdio<L>(self, server: Server<L>) -> io::Result<()>
    where
        L: Service<Request, Response = Option<Response>>,
        L::Error: Into<BoxError>,
    {
        self.serve(server, tokio::io::stdin(), tokio::io::stdout())
            .await
    }
}

/// Reads the [`AdapterStats`] of an [`AsyncLsp`] (from [`AsyncLsp::watch`]).
#[derive(Clone)]
pub struct Watch {
    hub: Arc<Hub>,
}

impl Watch {
    /// The adapter's stats now.
    pub fn stats(&self) -> AdapterStats {
        AdapterStats {
            handlers: self.hub.handlers(),
            nested_waiting: self.hub.waiting.load(Ordering::SeqCst),
        }
    }
}

impl fmt::Debug for Watch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Watch")
            .field("stats", &self.stats())
            .finish()
    }
}
