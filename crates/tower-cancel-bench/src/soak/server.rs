//! The soak's server: a listener per protocol, every connection served by [`Server`] with the full stack and its
//! own registry, and a table of every connection's registry so that the soak can read their sizes.

use std::{
    collections::HashMap,
    fmt, io,
    path::PathBuf,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use tokio::{
    io::{AsyncRead, AsyncWrite},
    net::{TcpListener, TcpStream, UnixListener, UnixStream},
};
use tower::{service_fn, Layer};
use tower_cancel::{dialect::Lsp, BoxError, CancelStack, Registry, Request, Response};
use tower_cancel_io::{Framing, Server};

use crate::{client::Client, ours::handle, target::Protocol};

/// The LSP method whose timeouts answer -32802 ServerCancelled, so that a timeout tells itself apart from a peer's
/// cancel (-32800) on the wire.
const WORK_METHOD: &str = "bench/work";

/// Where the soak server listens.
#[derive(Clone, Debug)]
pub enum Endpoint {
    /// A Unix socket at this path.
    Unix(PathBuf),
    /// A TCP port on the loopback interface.
    Tcp(std::net::SocketAddr),
}

impl Endpoint {
    /// Open a new connection to the server and wrap it in the harness's client.
    pub async fn connect(&self, protocol: Protocol) -> io::Result<Client> {
        Ok(match self {
            Endpoint::Unix(path) => Client::over_stream(protocol, UnixStream::connect(path).await?),
            Endpoint::Tcp(addr) => {
                let stream = TcpStream::connect(addr).await?;
                stream.set_nodelay(true)?;
                Client::over_stream(protocol, stream)
            }
        })
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Unix(path) => write!(f, "Unix socket {}", path.display()),
            Endpoint::Tcp(addr) => write!(f, "TCP {addr}"),
        }
    }
}

/// Every connection the soak server has accepted: the registries of the open ones, the totals of the closed ones.
#[derive(Debug, Default)]
pub struct Connections {
    next: AtomicU64,
    live: Mutex<HashMap<u64, Registry>>,
    closed: Mutex<Tables>,
}

/// Table sizes and registry counters, summed over connections.
#[derive(Clone, Copy, Debug, Default)]
pub struct Tables {
    /// Connections open now (for a snapshot) or closed so far (for the closed ones' totals).
    pub connections: u64,
    /// Requests in flight in the registries (for closed connections: left when `serve` returned, a leak).
    pub in_flight: u64,
    /// Early cancels remembered (at most 1024 per registry; a closed connection's go with its registry).
    pub remembered: u64,
    /// Requests registered.
    pub registered: u64,
    /// Registered requests that were answered with their handler's reply.
    pub completed: u64,
    /// Registered requests that ended cancelled (peer, timeout, disconnect).
    pub cancelled: u64,
    /// Cancels for ids not in flight, remembered.
    pub early_cancels: u64,
    /// Connections whose `serve` returned an I/O error (a reset by a client that dropped the connection).
    pub io_errors: u64,
}

impl Tables {
    fn add(&mut self, registry: &Registry) {
        let stats = registry.stats();
        self.connections += 1;
        self.in_flight += stats.in_flight as u64;
        self.remembered += stats.remembered as u64;
        self.registered += stats.registered;
        self.completed += stats.completed;
        self.cancelled += stats.cancelled;
        self.early_cancels += stats.early_cancels;
    }
}

/// What [`Connections::snapshot`] sees.
#[derive(Clone, Copy, Debug, Default)]
pub struct Snapshot {
    /// The open connections' registries, summed.
    pub live: Tables,
    /// The closed connections' registries as they were when `serve` returned, summed.
    pub closed: Tables,
}

impl Snapshot {
    /// Registry counters over every connection, open or closed.
    pub fn totals(&self) -> (u64, u64, u64, u64) {
        (
            self.live.registered + self.closed.registered,
            self.live.completed + self.closed.completed,
            self.live.cancelled + self.closed.cancelled,
            self.live.early_cancels + self.closed.early_cancels,
        )
    }
}

impl Connections {
    fn open(&self, registry: Registry) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.live.lock().unwrap().insert(id, registry);
        id
    }

    fn close(&self, id: u64, io_error: bool) {
        // Both locks held: a snapshot sees the connection either open or closed, never both or neither.
        let mut live = self.live.lock().unwrap();
        let mut closed = self.closed.lock().unwrap();
        if let Some(registry) = live.remove(&id) {
            closed.add(&registry);
        }
        closed.io_errors += u64::from(io_error);
    }

    /// The table sizes of the open connections and the totals of the closed ones.
    pub fn snapshot(&self) -> Snapshot {
        let live_registries = self.live.lock().unwrap();
        let mut live = Tables::default();
        for registry in live_registries.values() {
            live.add(registry);
        }
        let closed = *self.closed.lock().unwrap();
        Snapshot { live, closed }
    }
}

/// A listening server: each accepted connection is served by [`Server`] with the full [`CancelStack`] of the
/// protocol and a timeout, on its own task, with its own registry.
///
/// LSP runs `CancelStack::new(Lsp.server_cancellable(["bench/work"]))`, so a timeout answers -32802 and a peer's
/// cancel -32800; MCP runs `CancelStack::mcp()`, where a timeout answers -32001 and a cancel nothing. With `spawn`,
/// each request runs on a task of its own (`Server::spawn_requests`).
pub async fn listen(
    protocol: Protocol,
    endpoint: Endpoint,
    timeout: Duration,
    spawn: bool,
    connections: Arc<Connections>,
) -> io::Result<Endpoint> {
    Ok(match endpoint {
        Endpoint::Unix(path) => {
            let listener = UnixListener::bind(&path)?;
            tokio::spawn(async move {
                while let Ok((stream, _)) = listener.accept().await {
                    let (read, write) = stream.into_split();
                    serve(protocol, timeout, spawn, read, write, &connections);
                }
            });
            Endpoint::Unix(path)
        }
        Endpoint::Tcp(addr) => {
            let listener = TcpListener::bind(addr).await?;
            let addr = listener.local_addr()?;
            tokio::spawn(async move {
                while let Ok((stream, _)) = listener.accept().await {
                    let _ = stream.set_nodelay(true);
                    let (read, write) = stream.into_split();
                    serve(protocol, timeout, spawn, read, write, &connections);
                }
            });
            Endpoint::Tcp(addr)
        }
    })
}

fn serve<R, W>(
    protocol: Protocol,
    timeout: Duration,
    spawn: bool,
    read: R,
    write: W,
    connections: &Arc<Connections>,
) where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let connections = connections.clone();
    match protocol {
        Protocol::Lsp => {
            let stack = CancelStack::new(Lsp.server_cancellable([WORK_METHOD])).timeout(timeout);
            let server = Server::new(stack.layer(service_fn(handle))).spawn_requests(spawn);
            spawn_served(server, read, write, Framing::ContentLength, connections);
        }
        Protocol::Mcp => {
            let stack = CancelStack::mcp().timeout(timeout);
            let server = Server::new(stack.layer(service_fn(handle))).spawn_requests(spawn);
            spawn_served(server, read, write, Framing::Ndjson, connections);
        }
    }
}

fn spawn_served<S, R, W>(
    server: Server<S>,
    read: R,
    write: W,
    framing: Framing,
    connections: Arc<Connections>,
) where
    S: tower::Service<Request, Response = Option<Response>> + Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let id = connections.open(server.registry().clone());
    tokio::spawn(async move {
        let served = server.serve(read, write, framing).await;
        // The registry's tables are read after `serve` returned: whatever is in flight then is a leak.
        connections.close(id, served.is_err());
    });
}
