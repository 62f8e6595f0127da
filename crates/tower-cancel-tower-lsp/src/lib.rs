//! [tower-cancel](tower_cancel) for [tower-lsp-server](tower_lsp_server) 0.23: keep your `LanguageServer`, serve it
//! with tower-cancel's driver and LSP stack.
//!
//! ```rust,ignore
//! // Before: tower-lsp-server's own transport.
//! let (service, socket) = LspService::new(|client| Backend { client });
//! Server::new(stdin(), stdout(), socket).serve(service).await;
//!
//! // After: the same service, under tower-cancel.
//! let adapter = LspAdapter::new(LspService::new(|client| Backend { client }));
//! let exited = adapter.exited();
//! let server = tower_cancel_io::Server::with_stack(CancelStack::lsp(), adapter);
//! tokio::select! {
//!     served = server.serve_stdio(Framing::ContentLength) => served?,
//!     () = exited.cancelled() => {}
//! }
//! ```
//!
//! # What it gains
//!
//! Every guarantee of tower-cancel's stack and driver, for the server's own handlers: exactly one reply per request
//! under every race, a cancel answered `{"code":-32800,"message":"Request cancelled"}` and the handler's future
//! dropped; a `$/cancelRequest` that arrives before its request remembered (bounded); cancels never queued behind
//! backpressure (tower-lsp's own transport reads nothing while 4 requests run); a client that stops reading cannot
//! make the server buffer without bound; server-side timeouts (`CancelStack::lsp().timeout(..)`, answered -32800);
//! a closed connection cancels what runs (tower-lsp's own `serve` waits for it forever); graceful shutdown;
//! metrics and spans.
//!
//! # What it takes care of in tower-lsp
//!
//! - tower-lsp keeps an abort handle per running request, removed only when the request's future completes. The
//!   stack drops a cancelled request's future instead, so the adapter removes the entry itself (a `$/cancelRequest`
//!   given to the service, which takes it at once): otherwise the entry would stay forever and the id, reused,
//!   would be refused with -32600. `tests/no_leak.rs` cancels 100 000 requests and reuses every id.
//! - tower-lsp's cancel names an id as an `i32`: a request whose numeric id is outside `i32` runs inside tower-lsp
//!   under a string alias, so that it can still be removed. The client never sees the alias.
//! - tower-lsp answers nothing to a `$/` request it does not know: the adapter answers -32601.
//!
//! # The server's own requests to the client
//!
//! What the server sends through tower-lsp's `Client` (`send_request`, `show_message_request`, `configuration`,
//! `log_message`, progress, ...) goes out through the connection's [`Peer`](tower_cancel::Peer), and each answer
//! back to the waiting `Client`. A request sent by a handler goes out through that handler's child peer
//! ([`Request::peer`](tower_cancel::Request::peer)): when the handler is cancelled (by the client, a timeout, the
//! connection closing), the client is sent `$/cancelRequest` for it, as tower-cancel's `CascadeLayer` does for its
//! own handlers. It is cancelled the same way when the handler's future ends while it still waits (a handler that
//! stopped waiting for it, in a `select!` say): nobody would read its answer. Either way tower-lsp's waiter is
//! given -32800 at once, without waiting for the client to answer the cancelled request (a late answer is
//! dropped), and a closed connection gives every waiter an error: none is left behind
//! ([`LspAdapter::client_requests_waiting`] counts them). `tests/cascade.rs` checks each case on the wire.
//!
//! A progress token a handler creates (`Client::create_work_done_progress`) goes out through its child peer too,
//! which binds it to the handler's request: the client's `window/workDoneProgress/cancel` of the token cancels the
//! handler (tower-lsp leaves that a TODO). What a handler sends as its future is dropped (a guard that ends its
//! progress) is sent before the stack writes the cancelled reply. `tests/progress.rs` checks both.
//!
//! tower-lsp's messages carry nothing that says which handler sent them; the adapter knows by when they appear: it
//! polls each handler holding the channel, and takes what the channel holds right after the poll as that
//! handler's. That is exact for what a handler's own future sends. The limits that follow from it:
//!
//! - A request sent outside any handler's poll (by a task the server spawned with a `Client` clone, even from a
//!   handler) goes out through the connection's peer: it is never cancelled with a handler, it ends when the
//!   client answers or the connection closes. On a multi-threaded runtime, though, a request such a task puts in
//!   the channel at the very instant a handler is polled on another thread is taken for that handler's, and is
//!   cancelled if that handler is.
//! - The channel is held across each poll: with `Server::spawn_requests(true)` the handlers of one connection are
//!   polled one at a time (they still run concurrently, as on the default inline driver and in tower-lsp's own
//!   `Server`).
//! - A notification handler (`initialized`, `didOpen`, ...) has no request to be cancelled with: its requests to
//!   the client are cancelled only if its future ends (or is dropped) while they wait.
//!
//! # Limits
//!
//! - One adapter per connection: tower-lsp's service is one conversation (its initialize state, its tables).
//! - Serve it with `Server::with_stack` (or in a scope with the LSP dialect): without a peer, the server's
//!   requests to the client are answered with an error and its notifications dropped.
//! - tower-lsp's own concurrency limit and `Server` are not used: put a `ConcurrencyLimit` below the stack if you
//!   want one.

mod adapter;
mod client;
mod convert;
mod future;
mod ids;

pub use adapter::LspAdapter;
pub use future::ResponseFuture;
