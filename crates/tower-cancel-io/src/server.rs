//! The connection driver: its builder, `Server`, and the entry points that serve a connection with it.

use std::{fmt, future::Future, io, time::Duration};

use bytes::BytesMut;
use futures_util::future;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::{
    codec::{Decoder, Encoder, FramedRead, FramedWrite},
    sync::CancellationToken,
    task::AbortOnDropHandle,
};
use tower_cancel::{
    outbox::OutboxReceiver, BoxError, CancelStack, Connection, Dialect, Outbox, Peer, Registry,
    Request, Response, Scope,
};
use tower_layer::Layer;
use tower_service::Service;

use crate::{
    config::Config,
    content_length::ContentLengthCodec,
    frame::FrameError,
    ndjson::NdjsonCodec,
    read::ReadLoop,
    requests::{caller, Mode},
    shutdown::ShutdownHandle,
    signal::Signal,
    spawned::spawner,
    write::WriteLoop,
};

/// How messages are delimited on the byte stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// `Content-Length` headers (LSP).
    ContentLength,
    /// One JSON object per line (ACP and MCP over stdio).
    Ndjson,
}

/// Serves a `Service<Request, Response = Option<Response>>` (such as a [`CancelStack`]) over one connection.
///
/// The connection is a [`Connection`] of a [`Scope`] (a new scope of its own unless [`Server::in_scope`] says
/// otherwise): the scope decides what its cancels reach, the connection routes the peer's replies to its [`Peer`]
/// and cancels what it has in flight when it closes. The driver itself only reads frames, calls the service and
/// writes the replies.
///
/// # Behaviour
///
/// - Messages are read as they arrive and the service is called for each without waiting for earlier requests:
///   replies go out in the order they complete. The requests' futures run on the connection's own task, or each
///   on a task of its own with [`Server::spawn_requests`] (for handlers that compute rather than await), or first
///   on the connection's task and then, if still pending, on a task of their own with
///   [`Server::adaptive_requests`].
/// - Bytes that are not JSON get -32700 (so do an unreadable `Content-Length` header and a frame cut off by the
///   end of the stream), JSON that is not a valid message -32600, a frame over the size limit -32600. A request
///   whose id is already in flight on the connection gets -32600 from the cancel layer. The connection stays up
///   for the other requests.
/// - Replies from the peer (to requests this side sent) and its progress reports never reach the service; they go
///   to the connection's [`Peer`] (see [`Server::peer`]) or to the [response handler](Server::on_response).
/// - Replies and this side's own messages are queued for the writer. When the peer stops reading and more than
///   [`Server::max_queued_bytes`] of replies wait, the driver stops reading that connection until the writer
///   catches up: a peer cannot make the server buffer without bound. This side's own requests never stop the
///   reading (two endpoints doing so would wait for each other). A connection whose reading stays stopped for the
///   [stall timeout](Server::stall_timeout) is closed as a disconnect. Progress reports past the
///   bound are dropped ([`Progress::report`](tower_cancel::progress::Progress::report) returns `false`).
/// - When the peer closes the connection (or the write side fails, or the `serve` future is dropped), every
///   request of this connection in flight is cancelled with [`CancelReason::Disconnect`](tower_cancel::CancelReason),
///   and the peer's pending calls fail with `Closed`. The driver waits for the cancelled requests to settle (a
///   cooperative handler gets its whole grace period), and up to the [close grace](Server::close_grace) for what
///   could not be cancelled, then drops what is left.
/// - On [graceful shutdown](Server::shutdown_handle) the connection stops taking work: it lets the requests in
///   flight finish within the [drain timeout](Server::drain_timeout), then cancels the rest with reason Shutdown.
///   It keeps reading meanwhile, so that cancels and the peer's replies still arrive; a request that arrives during
///   the drain starts out cancelled with reason Shutdown and never runs (one its dialect never lets be cancelled,
///   `initialize`, still runs, as notifications do). Every request is answered as its dialect says, and the last
///   replies are written within the close grace, before the connection closes.
/// - A service that fails readiness answers the request that waited for it with -32603 `service unavailable`
///   (as the stack's own layers do), and the connection goes on.
pub struct Server<S> {
    service: S,
    connection: Connection,
    config: Config,
    shutdown: ShutdownHandle,
    mode: Mode<S>,
    outbox: Outbox,
    outbox_rx: OutboxReceiver,
}

impl<S> fmt::Debug for Server<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Server")
            .field("connection", &self.connection)
            .field("max_frame_size", &self.config.max_frame_size)
            .field("close_grace", &self.config.close_grace)
            .field("requests", &self.mode.name())
            .finish()
    }
}

impl<S> Server<S>
where
    S: Service<Request, Response = Option<Response>>,
    S::Error: Into<BoxError>,
{
    /// A driver for `service`, as a connection of a new scope without a dialect (no [`Peer`]: replies from the
    /// other side go to the [response handler](Self::on_response)). [`Server::with_stack`] gives the connection
    /// the stack's dialect.
    pub fn new(service: S) -> Self {
        let (outbox, outbox_rx) = Outbox::new();
        Self {
            connection: Scope::new().connect(outbox.clone()),
            outbox,
            outbox_rx,
            service,
            config: Config::default(),
            shutdown: ShutdownHandle::default(),
            mode: Mode::Inline,
        }
    }

    /// This connection as one of `scope`'s (which may be shared with other connections: see
    /// [`tower_cancel::scope`]). The scope's dialect gives the connection its [`Peer`].
    pub fn in_scope(mut self, scope: Scope) -> Self {
        self.connection = scope.connect(self.outbox.clone());
        self
    }

    /// Use `registry` as the table of this connection's scope: connections given the same registry share their
    /// scope (see [`Server::in_scope`]).
    pub fn with_registry(self, registry: Registry) -> Self {
        let scope = self.connection.scope().clone().with_registry(registry);
        self.in_scope(scope)
    }

    /// The connection: its scope, its session state, its peer.
    pub fn connection(&self) -> &Connection {
        &self.connection
    }

    /// The connection's registry (its scope's). Clone it to watch the connection from outside.
    pub fn registry(&self) -> &Registry {
        self.connection.registry()
    }

    /// The connection's [`Peer`], to send requests to the other side (in either direction: a server calls its
    /// client too): present when the connection's scope has a dialect ([`Server::with_stack`],
    /// [`Scope::with_dialect`]). Its pending calls fail with
    /// [`PeerError::Closed`](tower_cancel::PeerError::Closed) when the connection ends.
    pub fn peer(&self) -> Option<Peer> {
        self.connection.peer().cloned()
    }

    /// The largest frame accepted (default [`DEFAULT_MAX_FRAME_SIZE`](crate::DEFAULT_MAX_FRAME_SIZE)).
    pub fn max_frame_size(mut self, bytes: usize) -> Self {
        self.config.max_frame_size = bytes;
        self
    }

    /// How many bytes of replies and this side's own messages may wait for the writer before the driver stops
    /// reading (default [`DEFAULT_MAX_QUEUED_BYTES`](tower_cancel::outbox::DEFAULT_MAX_QUEUED_BYTES)).
    pub fn max_queued_bytes(self, bytes: usize) -> Self {
        self.outbox.set_max_queued_bytes(bytes);
        self
    }

    /// How long the driver may keep its reading stopped (more than [`Server::max_queued_bytes`] of replies
    /// queued, all that time) before it closes the connection as a disconnect (default [`DEFAULT_STALL_TIMEOUT`](crate::DEFAULT_STALL_TIMEOUT)).
    /// A peer that reads nothing, or too little to bring its replies under the bound in that time, is not waited
    /// for forever; nor are two endpoints that both stopped reading because each floods the other past its bound.
    pub fn stall_timeout(mut self, timeout: Duration) -> Self {
        self.config.stall_timeout = timeout;
        self
    }

    /// How long requests that could not be cancelled (`initialize`, notifications) may take to settle after the
    /// connection closed or the drain ended, and how long the last replies may take to be written (default
    /// [`DEFAULT_CLOSE_GRACE`](crate::DEFAULT_CLOSE_GRACE)). Cancelled requests are waited for until their cancel layer settles them.
    pub fn close_grace(mut self, grace: Duration) -> Self {
        self.config.close_grace = grace;
        self
    }

    /// How long requests in flight may run on after a graceful shutdown began, before they are cancelled with
    /// reason Shutdown (default [`DEFAULT_DRAIN_TIMEOUT`](crate::DEFAULT_DRAIN_TIMEOUT)).
    pub fn drain_timeout(mut self, timeout: Duration) -> Self {
        self.config.drain_timeout = timeout;
        self
    }

    /// With `true`, each request's future runs on a task of its own (`tokio::spawn`); with `false`, the default, the
    /// connection's own task polls them all.
    ///
    /// On the connection's task, a connection's handlers take turns with the reading of its frames: a handler that
    /// computes for a while without awaiting delays every later frame, the peer's cancels included, and a
    /// connection never uses more than one core. On tasks of their own, handlers run in parallel on the runtime's
    /// workers and the connection keeps reading while they compute: with handlers computing 50 µs each, a
    /// connection on 2 workers serves 1.9 times as many requests per second (BENCHMARKS.md, figure 6).
    ///
    /// It is not the default because of what it costs where handlers mostly await: a task and a trip through the
    /// scheduler per request (1 to 2 µs on 2 cores, which halves the requests per second of a connection whose
    /// handlers answer at once), about 180 bytes more per request in flight, and futures that must be
    /// `Send + 'static`. Nor does it alone keep cancels fast under load: a cancelled request's task waits behind
    /// every runnable task in the runtime's queue (1.7 ms behind 64 handlers computing 50 µs, against 3.4 ms on the
    /// connection's task). Put a `ConcurrencyLimit` of about the number of workers below the stack as well: the
    /// requests waiting for it are not runnable, and the same cancel is answered in 16 µs.
    ///
    /// Notifications are not spawned: they run on the connection's task in the order they arrived (the order of
    /// an editor's `didChange` edits is the order of their effects). Every call, and so every cancel the peer
    /// sends, is made on the connection's task in the order of the frames.
    ///
    /// What changes besides: on the connection's task each request is polled once before the next frame is read;
    /// a task runs when a worker takes it. So requests start in no set order, and one read just before the peer
    /// closes may be cancelled (reason Disconnect) before it ever runs. The rest stays as it is: the task runs the
    /// service's whole response future, so a cancel drops or signals it as it would on the connection's task and
    /// its registry entry goes with it; every reply still goes out through the connection; a close or a shutdown
    /// waits for the tasks as for inline requests, and what is left after the close grace is aborted, its future
    /// dropped before `serve` returns (dropping the `serve` future aborts the tasks too). A panic that escapes the
    /// service's future is answered -32603 and the connection goes on.
    ///
    /// [`Server::adaptive_requests`] spawns only the requests that are still pending after a first poll on the
    /// connection's task. Of the two, the last one called decides.
    pub fn spawn_requests(mut self, spawn: bool) -> Self
    where
        S::Future: Send + 'static,
    {
        self.mode = if spawn {
            Mode::Spawned(spawner::<S>())
        } else {
            Mode::Inline
        };
        self
    }

    /// With `true`, each request is polled once on the connection's task as it arrives, and moved to a task of its
    /// own (`tokio::spawn`) only if it is still pending then; with `false`, the default, the connection's own task
    /// polls them all. Of this and [`Server::spawn_requests`], the last one called decides.
    ///
    /// It takes the best of the two other modes for handlers that answer at once or await: one that answers in
    /// its first poll is answered there, with no task and no trip through the scheduler (as inline, or quicker:
    /// it is not even kept in the set of requests in flight), and one that waits runs on a task, where its later
    /// polls, its computing after an await and its cancel do not hold up the reading of the connection's frames
    /// (as spawned). What cannot be moved is the first poll: a handler that computes before its first await holds
    /// the reading up for that long. So the driver times the first polls, and while they take more than about
    /// 10 µs on average (a task costs 1 to 2 µs), it spawns requests without one, as the spawned mode does,
    /// still polling one in 64 in place to notice when handlers become quick again.
    ///
    /// It costs one allocation per request (its future is boxed so that it can move after a poll) and the timing
    /// of the first poll; like the spawned mode it needs futures that are `Send + 'static`, which is why it is not
    /// the default (the default serves services whose futures are not `Send`). A request moved to a task behaves
    /// as in the spawned mode (see [`Server::spawn_requests`]): a cancel reaches it through its lifecycle wherever
    /// it runs, a close waits for it and aborts what is left after the close grace, a panic in any poll is
    /// answered -32603 and the connection goes on. Notifications still run on the connection's task, in the order
    /// they arrived.
    ///
    /// # Example
    ///
    /// ```no_run
    /// use tower::service_fn;
    /// use tower_cancel::{BoxError, CancelStack, Request};
    /// use tower_cancel_io::{Framing, Server};
    ///
    /// # #[tokio::main] async fn main() -> std::io::Result<()> {
    /// // `hover` answers at once, on the connection's task; `references` waits on an index, on a task of its own,
    /// // so that the connection goes on reading (and cancelling) meanwhile.
    /// let handler = service_fn(|req: Request| async move {
    ///     if req.method() == "textDocument/references" {
    ///         tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    ///     }
    ///     Ok::<_, BoxError>(serde_json::Value::Null)
    /// });
    /// Server::with_stack(CancelStack::lsp(), handler)
    ///     .adaptive_requests(true)
    ///     .serve_stdio(Framing::ContentLength)
    ///     .await
    /// # }
    /// ```
    pub fn adaptive_requests(mut self, adaptive: bool) -> Self
    where
        S::Future: Send + 'static,
    {
        self.mode = if adaptive {
            Mode::Adaptive(caller::<S>())
        } else {
            Mode::Inline
        };
        self
    }

    /// A handle that starts a graceful shutdown of this connection.
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        self.shutdown.clone()
    }

    /// Where replies from the peer go when the connection has no [`Peer`] (by default they are logged and dropped).
    /// A panic in the handler is caught and logged.
    pub fn on_response(mut self, handler: impl FnMut(Response) + Send + 'static) -> Self {
        self.config.on_response = Box::new(handler);
        self
    }

    /// Serve the connection over standard input and output until standard input closes.
    ///
    /// To stop before that (LSP's `exit`), end the process with [`std::process::exit`]: tokio reads standard input
    /// on a blocking thread that only ends when the input closes, so a runtime being dropped waits for it.
    pub async fn serve_stdio(self, framing: Framing) -> io::Result<()> {
        self.serve(tokio::io::stdin(), tokio::io::stdout(), framing)
            .await
    }

    /// Serve the connection until the peer closes it.
    ///
    /// The writer runs on a task of its own (see [`serve_with`](Self::serve_with)); a writer that cannot be sent
    /// to another thread is served with [`serve_local_with`](Self::serve_local_with).
    pub async fn serve<R, W>(self, reader: R, writer: W, framing: Framing) -> io::Result<()>
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Send + Unpin + 'static,
    {
        let max = self.config.max_frame_size;
        match framing {
            Framing::ContentLength => {
                let codec = ContentLengthCodec::with_max_frame_size(max);
                self.serve_with(reader, writer, codec).await
            }
            Framing::Ndjson => {
                let codec = NdjsonCodec::with_max_frame_size(max);
                self.serve_with(reader, writer, codec).await
            }
        }
    }

    /// Serve the connection with any codec that yields frames the way the built-in ones do.
    ///
    /// The writer runs on a tokio task of its own, as a hand-written server's would: on a multi-threaded runtime,
    /// framing and writing the replies then take another core than reading the requests and running their
    /// handlers (the read loop only queues each reply). Dropping the returned future aborts the writer's task too
    /// (it is dropped at its next turn on the runtime), as it stops the read loop. A panic of the writer's is
    /// resumed here.
    pub async fn serve_with<R, W, C>(self, reader: R, writer: W, codec: C) -> io::Result<()>
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Send + Unpin + 'static,
        C: Decoder<Item = Result<BytesMut, FrameError>, Error = io::Error>
            + for<'a> Encoder<&'a [u8], Error = io::Error>
            + Clone
            + Send
            + 'static,
    {
        let (read, write) = self.halves(reader, writer, codec);
        let write = AbortOnDropHandle::new(tokio::spawn(write.run()));
        let read = read.await;
        let write = match write.await {
            Ok(write) => write,
            Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
            // Only a runtime shutting down cancels the task (this future aborts it only when dropped).
            Err(error) => Err(io::Error::other(error)),
        };
        read.and(write)
    }

    /// [`serve_with`](Self::serve_with) for a writer that cannot be sent to another thread: the writer is polled
    /// in this future, beside the read loop, so the connection takes one core at most.
    pub async fn serve_local_with<R, W, C>(self, reader: R, writer: W, codec: C) -> io::Result<()>
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
        C: Decoder<Item = Result<BytesMut, FrameError>, Error = io::Error>
            + for<'a> Encoder<&'a [u8], Error = io::Error>
            + Clone,
    {
        let (read, write) = self.halves(reader, writer, codec);
        let (read, write) = future::join(read, write.run()).await;
        read.and(write)
    }

    /// The connection's two loops: reading (requests in, handlers run, replies queued) and writing (what the
    /// outbox queued, framed). The read loop tells the writer when it is done.
    fn halves<R, W, C>(
        self,
        reader: R,
        writer: W,
        codec: C,
    ) -> (impl Future<Output = io::Result<()>>, WriteLoop<W, C>)
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
        C: Decoder<Item = Result<BytesMut, FrameError>, Error = io::Error>
            + for<'a> Encoder<&'a [u8], Error = io::Error>
            + Clone,
    {
        // The writer takes the receiver, the read loop the rest (the connection keeps a handle of the outbox).
        let Self {
            service,
            connection,
            config,
            shutdown,
            mode,
            outbox: _,
            outbox_rx: rx,
        } = self;
        let close_grace = config.close_grace;
        // The writer stops when told, not when every outbox is dropped: handlers may keep clones.
        let closing = CancellationToken::new();
        let writer_gone = Signal::default();
        let write = WriteLoop {
            sink: FramedWrite::new(writer, codec.clone()),
            rx,
            closing: closing.clone(),
            writer_gone: writer_gone.clone(),
            close_grace,
        };
        let read = async move {
            let read = ReadLoop::new(
                service,
                mode,
                connection,
                config,
                shutdown.signal().clone(),
                writer_gone,
            )
            .run(FramedRead::new(reader, codec))
            .await;
            closing.cancel();
            read
        };
        (read, write)
    }
}

impl<L> Server<L>
where
    L: Service<Request, Response = Option<Response>>,
    L::Error: Into<BoxError>,
{
    /// A driver for `service` wrapped in `stack`, as a connection of a new scope speaking the stack's dialect:
    /// the dialect is given once, and the connection's [`Peer`] follows the same rules as the stack.
    pub fn with_stack<D: Dialect + Clone, S>(stack: CancelStack<D>, service: S) -> Self
    where
        CancelStack<D>: Layer<S, Service = L>,
    {
        let scope = stack.scope();
        Server::new(stack.layer(service)).in_scope(scope)
    }
}
