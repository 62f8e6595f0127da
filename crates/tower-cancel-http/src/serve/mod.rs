//! Serving a `Router` with every connection bounded: [`serve`](serve()) is `axum::serve` with the limits a server
//! facing hostile clients needs, and the one call that gives them to the front ends mounted in it.
//!
//! `axum::serve` has no timeout and no limit: a client that drips its request's head a byte at a time, or opens
//! connections and sends nothing, holds them for as long as it likes, until the process runs out of file
//! descriptors and stops answering anyone. [`serve`](serve()) is the same loop (hyper-util's connection, HTTP/1
//! and HTTP/2, upgrades for WebSockets, graceful shutdown) with these bounds:
//!
//! | bound | default | past it, the client sees |
//! |---|---|---|
//! | [`header_read_timeout`](Serve::header_read_timeout): an HTTP/1 request's head, counted from when the connection waits for it (it opened, or its last response was sent); a connection's first request, of either version | [`DEFAULT_HEADER_READ_TIMEOUT`], 30 s | the connection closed, no response |
//! | [`idle_timeout`](Serve::idle_timeout): no request in flight since the last one ended (an HTTP/1 connection is also under the header read timeout meanwhile: the shorter wins) | [`DEFAULT_IDLE_TIMEOUT`], 60 s | the connection closed (HTTP/2: a GOAWAY first) |
//! | [`max_connections`](Serve::max_connections): connections open on the listener, WebSockets included | [`DEFAULT_MAX_CONNECTIONS`], 1024, or 3/4 of the open-file limit if lower | the connection idle the longest (no request in flight; one still waiting for its first request's head counts) is closed to make room; when every connection is busy, the newcomer gets `503 Service Unavailable` with `Retry-After: 1` and is closed |
//!
//! A request's body has its own deadline, in the front ends that read it: each front end's `body_timeout`
//! ([`DEFAULT_BODY_TIMEOUT`](crate::front::DEFAULT_BODY_TIMEOUT), 30 s; past it, `408 Request Timeout`).
//! HTTP/2 connections are pinged after 20 s without a frame and closed if the ping goes unanswered for 20 s more,
//! so a peer that vanished does not keep a stream (an SSE response) open. A request is in flight from its head to
//! the end of its response's body (all of an SSE stream); a connection upgraded to a WebSocket is kept as long as
//! the WebSocket lives, neither idle-closed nor evicted. Accepting never stops: an error such as `EMFILE` is
//! logged and retried after a second, as axum does. The listener's counters are in [`Connections::stats`].
//!
//! Each request also carries the client's address, as axum's
//! [`ConnectInfo`](axum::extract::ConnectInfo)`<L::Addr>` in its extensions (the `ConnectInfo` extractor works
//! without `into_make_service_with_connect_info`).
//!
//! # Example
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use axum::{routing::post_service, Router};
//! use tower::{service_fn, ServiceBuilder};
//! use tower_cancel::{CancelStack, Request};
//! use tower_cancel_http::JsonRpc;
//!
//! # #[tokio::main] async fn main() -> std::io::Result<()> {
//! # let stop_asked = std::future::pending::<()>();
//! let stack = ServiceBuilder::new()
//!     .layer(CancelStack::lsp())
//!     .service(service_fn(|_: Request| async { Ok::<_, tower_cancel::ErrorObject>(serde_json::json!("pong")) }));
//! let rpc = JsonRpc::new(stack);
//! let app = Router::new().route("/rpc", post_service(rpc.clone()));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! // Instead of `axum::serve(listener, app)`: the defaults are a sound start; each bound can be changed.
//! tower_cancel_http::serve(listener, app)
//!     .idle_timeout(Duration::from_secs(120))
//!     .with_graceful_shutdown(async move {
//!         stop_asked.await;
//!         rpc.shutdown();
//!         rpc.drained().await;
//!     })
//!     .await
//! # }
//! ```

// The floor plan: this file accepts, on `table` (admits, or evicts to make room), `refuse` (turns away) and
// `connection` (serves one, on `in_flight`, its requests counted, and `slot_io`, its place held by its socket);
// `stats` reads the `table`; `entry` (what the table and a connection share), `counters` and `limits` (on
// `open_files`) stand on nothing of the module.
mod connection;
mod counters;
mod entry;
mod in_flight;
mod limits;
mod open_files;
mod refuse;
mod slot_io;
mod stats;
mod table;

use std::{
    convert::Infallible,
    fmt,
    future::{Future, IntoFuture},
    io,
    pin::Pin,
    sync::Arc,
    time::Duration,
};

use axum::{extract::Request, response::Response, serve::Listener};
use futures_util::future::BoxFuture;
use tower_service::Service;

use self::{
    connection::Shared, counters::Counters, limits::Limits, refuse::Refusals, table::Table,
};
pub use self::{
    limits::{DEFAULT_HEADER_READ_TIMEOUT, DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_CONNECTIONS},
    stats::{ConnectionStats, Connections},
};

/// Serve `service` (an axum `Router`, say) on `listener`, every connection bounded (see the [module](self)).
/// Configure it with its methods, then `.await` it: like `axum::serve`, it runs until its graceful shutdown, if
/// it has one, and never fails.
pub fn serve<L, S>(listener: L, service: S) -> Serve<L, S>
where
    L: Listener,
    L::Addr: Clone + Sync,
    S: Service<Request, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    Serve {
        listener,
        service,
        limits: Limits::default(),
        signal: None,
        table: Arc::new(Table::new()),
    }
}

/// A server being configured, from [`serve`](serve()); `.await` it to run it.
#[must_use = "a server does nothing until it is awaited"]
pub struct Serve<L, S> {
    listener: L,
    service: S,
    limits: Limits,
    signal: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    table: Arc<Table>,
}

impl<L: Listener, S> Serve<L, S> {
    /// The most connections kept open at once (at least one). Past it, a new connection closes the connection
    /// idle the longest, or is answered 503 if every one is busy. [`DEFAULT_MAX_CONNECTIONS`] by default, or
    /// three quarters of the process's open-file limit if that is lower.
    pub fn max_connections(mut self, max: usize) -> Self {
        self.limits.max_connections = max.max(1);
        self
    }

    /// How long an HTTP/1 request's head may take, counted from when the connection starts waiting for it, and
    /// how long any connection may take to begin its first request; past it the connection is closed.
    /// [`DEFAULT_HEADER_READ_TIMEOUT`] by default.
    pub fn header_read_timeout(mut self, timeout: Duration) -> Self {
        self.limits.header_read_timeout = timeout;
        self
    }

    /// How long a connection may stay open with no request in flight after its last one ended; past it the
    /// connection is closed. [`DEFAULT_IDLE_TIMEOUT`] by default.
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.limits.idle_timeout = timeout;
        self
    }

    /// Shut down gracefully when `signal` resolves: stop accepting, let each connection finish the requests it
    /// has in flight and close, and resolve once they are closed (WebSockets aside, as with `axum::serve`: a
    /// front end's own `shutdown` ends them). Put a front end's `shutdown()` and `drained()` in `signal` to
    /// answer its requests in flight first.
    pub fn with_graceful_shutdown<F>(mut self, signal: F) -> Self
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.signal = Some(Box::pin(signal));
        self
    }

    /// The listener's connections: their counters, while and after the server runs.
    pub fn connections(&self) -> Connections {
        Connections {
            table: Arc::clone(&self.table),
        }
    }

    /// The address the listener is bound to.
    pub fn local_addr(&self) -> io::Result<L::Addr> {
        self.listener.local_addr()
    }
}

impl<L, S> Serve<L, S>
where
    L: Listener,
    L::Addr: Clone + Sync,
    S: Service<Request, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    async fn run(self) {
        let Self {
            mut listener,
            service,
            limits,
            signal,
            table,
        } = self;
        table.set_max(limits.max_connections);
        let shared = Arc::new(Shared::new(limits, table));
        let refusals = Refusals::default();
        // Each connection's task holds a receiver: the sender's `closed()` is every connection closed.
        let (connections, open) = tokio::sync::watch::channel(());
        let mut signal = signal.unwrap_or_else(|| Box::pin(std::future::pending()));
        loop {
            let (io, remote) = tokio::select! {
                accepted = listener.accept() => accepted,
                () = &mut signal => break,
            };
            let Some(slot) = shared.table.admit().await else {
                Counters::count(&shared.table.counters.refused);
                tracing::debug!("connection refused (503): every connection is busy");
                refusals.refuse(io);
                continue;
            };
            Counters::count(&shared.table.counters.accepted);
            let open = open.clone();
            let task = connection::serve(Arc::clone(&shared), io, remote, service.clone(), slot);
            tokio::spawn(async move {
                task.await;
                drop(open);
            });
        }
        drop(listener);
        drop(open);
        shared.shutdown.cancel();
        connections.closed().await;
    }
}

impl<L, S> IntoFuture for Serve<L, S>
where
    L: Listener,
    L::Addr: Clone + Sync,
    S: Service<Request, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Output = io::Result<()>;
    type IntoFuture = BoxFuture<'static, io::Result<()>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            self.run().await;
            Ok(())
        })
    }
}

impl<L, S> fmt::Debug for Serve<L, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Serve")
            .field("limits", &self.limits)
            .field("graceful_shutdown", &self.signal.is_some())
            .finish_non_exhaustive()
    }
}
