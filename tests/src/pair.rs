//! Two [`Server`]s back to back: a real connection where both ends send requests.
//!
//! Each side ([`Side`]) is a whole endpoint as an application builds it: its own [`CancelStack`] (or any stack)
//! over its own [`Probe`] handler, served by a [`Server`] whose [`Peer`] was created with `server.peer(dialect)`.
//! The test sends requests through a side's peer as that side's application would (the "client" side's peer is
//! the client application); each side's `call` handler sends nested requests to the other side through its
//! request's child peer.
//!
//! Between the two servers sits a tap ([`Tap`], one per direction): it forwards every frame unchanged and records
//! it, so a test can assert the exact frames on the wire in each direction, and it can cut the connection
//! ([`Pair::cut`]).

use std::{
    io,
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio::{
    io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader},
    sync::mpsc::{self, error::TryRecvError},
    task::JoinHandle,
};
use tower::ServiceBuilder;
use tower_cancel::{
    dialect::{Acp, AcpDraft, Lsp, Mcp},
    CancelStack, Connection, Dialect, Peer, Registry, Scope,
};
use tower_cancel_io::{Framing, Server, ShutdownHandle};

use crate::{frame, read_frame, Counts, Handler, Probe, Served, PATIENCE};

/// The size of each in-memory pipe.
const PIPE_SIZE: usize = 64 * 1024;

/// A peer's counters (all of [`PeerStats`](tower_cancel::peer::PeerStats), which cannot be built outside its
/// crate).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PeerCounts {
    /// Requests sent.
    pub sent: u64,
    /// Cancels sent.
    pub cancels_sent: u64,
    /// Replies that arrived after their caller stopped waiting, dropped.
    pub late_replies: u64,
    /// Calls waiting for their reply now.
    pub pending: usize,
}

impl PeerCounts {
    /// `sent` requests, `cancels_sent` cancels and `late_replies` late replies; no call pending.
    pub fn new(sent: u64, cancels_sent: u64, late_replies: u64) -> Self {
        Self {
            sent,
            cancels_sent,
            late_replies,
            pending: 0,
        }
    }

    /// The counters of `peer` now.
    pub fn of(peer: &Peer) -> Self {
        let stats = peer.stats();
        Self {
            sent: stats.sent,
            cancels_sent: stats.cancels_sent,
            late_replies: stats.late_replies,
            pending: stats.pending,
        }
    }
}

/// One end of a [`Pair`].
pub struct Side {
    /// The handler behind this side's stack.
    pub probe: Probe,
    /// The connection's peer as this side sees it (`server.peer(dialect)`): requests to the other side.
    pub peer: Peer,
    /// This side's registry: the requests the other side sent it.
    pub registry: Registry,
    /// This side's connection (its session state, its peer).
    pub connection: Connection,
    /// Starts a graceful shutdown of this side's connection.
    pub shutdown: ShutdownHandle,
    task: Option<JoinHandle<io::Result<()>>>,
}

impl std::fmt::Debug for Side {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Side")
            .field("registry", &self.registry)
            .field("peer", &self.peer)
            .finish()
    }
}

impl Side {
    fn spawn<L, D, R, W>(stack: L, dialect: D, framing: Framing, reader: R, writer: W) -> Self
    where
        L: tower::Layer<Handler>,
        L::Service: Served,
        D: Dialect,
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let probe = Probe::new();
        let service = ServiceBuilder::new().layer(stack).service(probe.service());
        let server = Server::new(service).in_scope(Scope::with_dialect(dialect));
        let peer = server.peer().expect("a scope with a dialect gives a peer");
        let registry = server.registry().clone();
        let connection = server.connection().clone();
        let shutdown = server.shutdown_handle();
        let task = tokio::spawn(server.serve(reader, writer, framing));
        Self {
            probe,
            peer,
            registry,
            connection,
            shutdown,
            task: Some(task),
        }
    }

    /// The registry's counters now.
    pub fn counts(&self) -> Counts {
        Counts::of(&self.registry)
    }

    /// The peer's counters now.
    pub fn peer_counts(&self) -> PeerCounts {
        PeerCounts::of(&self.peer)
    }

    /// Wait for `serve` to return `Ok`, then check that the registry and the peer's pending table are empty.
    pub async fn join(&mut self) {
        if let Some(task) = self.task.take() {
            tokio::time::timeout(PATIENCE, task)
                .await
                .expect("serve did not return")
                .expect("serve panicked")
                .expect("serve returned an error");
        }
        self.assert_idle();
    }

    /// Assert that nothing is in flight on this side: the registry and the peer's pending table are empty.
    pub fn assert_idle(&self) {
        assert!(
            self.registry.is_empty(),
            "registry not empty: {:?}",
            self.registry
        );
        assert_eq!(self.registry.stats().in_flight, 0);
        assert_eq!(
            self.peer.stats().pending,
            0,
            "peer's pending table: {:?}",
            self.peer
        );
    }
}

/// The frames that went one way through the tap, in order.
#[derive(Debug)]
pub struct Tap {
    rx: mpsc::UnboundedReceiver<String>,
    log: Arc<Mutex<Vec<String>>>,
}

impl Tap {
    /// The next frame (after those already taken), as its exact JSON text. Fails the test if none comes within
    /// [`PATIENCE`] or the connection was closed.
    pub async fn next(&mut self) -> String {
        tokio::time::timeout(PATIENCE, self.rx.recv())
            .await
            .expect("no frame within the patience")
            .expect("the connection was closed instead")
    }

    /// Assert that the next frame is exactly `frame`, but for the order of objects' keys
    /// ([`same_json`](crate::same_json)).
    pub async fn expect(&mut self, frame: &str) {
        crate::assert_same_json(&self.next().await, frame);
    }

    /// Assert that no frame passed beyond those already taken (call [`settle`] first).
    pub fn assert_quiet(&mut self) {
        match self.rx.try_recv() {
            Err(TryRecvError::Empty | TryRecvError::Disconnected) => {}
            Ok(frame) => panic!("unexpected frame on the wire: {frame}"),
        }
    }

    /// Every frame that passed so far, taken or not.
    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// How many frames that passed so far have `method`.
    pub fn count_method(&self, method: &str) -> usize {
        let needle = format!(r#""method":"{method}""#);
        self.log().iter().filter(|f| f.contains(&needle)).count()
    }
}

/// Two servers connected back to back, each with its own stack, handler and peer.
#[derive(Debug)]
pub struct Pair {
    /// The side that sends the first requests (an editor, an ACP client, an MCP client).
    pub client: Side,
    /// The side that serves them (a language server, an agent, an MCP server).
    pub server: Side,
    /// Frames from the client to the server.
    pub to_server: Tap,
    /// Frames from the server to the client.
    pub to_client: Tap,
    relays: Vec<JoinHandle<()>>,
}

/// Let every task run until nothing is left to do. On the paused clock the runtime only moves time forward when
/// every task is idle, so this sleep of 1 ms (virtual) returns once everything that could happen did.
pub async fn settle() {
    tokio::time::sleep(Duration::from_millis(1)).await;
}

impl Pair {
    /// LSP on both sides (`Content-Length` framing), no timeouts.
    pub fn lsp() -> Self {
        Self::new(
            Framing::ContentLength,
            (CancelStack::lsp(), Lsp),
            (CancelStack::lsp(), Lsp),
        )
    }

    /// ACP (`$/cancel_request`) on both sides (NDJSON).
    pub fn acp() -> Self {
        Self::new(
            Framing::Ndjson,
            (CancelStack::acp(), Acp),
            (CancelStack::acp(), Acp),
        )
    }

    /// The ACP draft on both sides (NDJSON), each declaring the capability.
    pub fn acp_draft() -> Self {
        Self::new(
            Framing::Ndjson,
            (CancelStack::acp_draft(), AcpDraft::new()),
            (CancelStack::acp_draft(), AcpDraft::new()),
        )
    }

    /// MCP on both sides (NDJSON).
    pub fn mcp() -> Self {
        Self::new(
            Framing::Ndjson,
            (CancelStack::mcp(), Mcp),
            (CancelStack::mcp(), Mcp),
        )
    }

    /// Two sides, each a stack and the dialect of its peer, connected with `framing`.
    pub fn new<LC, DC, LS, DS>(framing: Framing, client: (LC, DC), server: (LS, DS)) -> Self
    where
        LC: tower::Layer<Handler>,
        LC::Service: Served,
        DC: Dialect,
        LS: tower::Layer<Handler>,
        LS::Service: Served,
        DS: Dialect,
    {
        // client -> tap -> server
        let (client_out, tap_in_c) = tokio::io::duplex(PIPE_SIZE);
        let (tap_out_s, server_in) = tokio::io::duplex(PIPE_SIZE);
        // server -> tap -> client
        let (server_out, tap_in_s) = tokio::io::duplex(PIPE_SIZE);
        let (tap_out_c, client_in) = tokio::io::duplex(PIPE_SIZE);

        let (to_server, relay_c) = relay(tap_in_c, tap_out_s, framing);
        let (to_client, relay_s) = relay(tap_in_s, tap_out_c, framing);
        let client = Side::spawn(client.0, client.1, framing, client_in, client_out);
        let server = Side::spawn(server.0, server.1, framing, server_in, server_out);
        Self {
            client,
            server,
            to_server,
            to_client,
            relays: vec![relay_c, relay_s],
        }
    }

    /// Assert that nothing is in flight on either side: both registries and both pending tables are empty.
    pub fn assert_idle(&self) {
        self.client.assert_idle();
        self.server.assert_idle();
    }

    /// Cut the connection in both directions at once (the pipe broke, the other process died): each side reads
    /// the end of its stream and finds it can no longer write.
    pub async fn cut(&mut self) {
        // Both at once: a reply written after one direction broke must not get through the other.
        for relay in &self.relays {
            relay.abort();
        }
        for relay in self.relays.drain(..) {
            // The aborted task drops its pipe ends, which is what the servers notice.
            let _ = relay.await;
        }
    }

    /// Let everything settle, assert that both sides are idle (nothing in flight, nothing pending) and that no
    /// frame passed that the test did not take, then cut the connection, wait for both `serve`s to return `Ok`
    /// and assert again.
    pub async fn finish(mut self) {
        settle().await;
        self.assert_idle();
        self.to_server.assert_quiet();
        self.to_client.assert_quiet();
        self.close().await;
    }

    /// Cut the connection, wait for both `serve`s to return `Ok`, and assert that both sides are idle.
    pub async fn close(&mut self) {
        self.cut().await;
        self.client.join().await;
        self.server.join().await;
    }
}

/// Forward frames from `from` to `to` unchanged, recording each.
fn relay<R, W>(from: R, mut to: W, framing: Framing) -> (Tap, JoinHandle<()>)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (tx, rx) = mpsc::unbounded_channel();
    let log = Arc::new(Mutex::new(Vec::new()));
    let tap = Tap {
        rx,
        log: log.clone(),
    };
    let task = tokio::spawn(async move {
        let mut from = BufReader::new(from);
        while let Some(message) = read_frame(&mut from, framing).await {
            log.lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(message.clone());
            let _ = tx.send(message.clone());
            let bytes = frame(&message, framing);
            if to.write_all(bytes.as_bytes()).await.is_err() || to.flush().await.is_err() {
                break;
            }
        }
        // The sender closed its side: so does the tap, towards the receiver.
    });
    (tap, task)
}
