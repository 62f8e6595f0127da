//! The connection driver: reads messages, calls the service concurrently, writes the replies.

use std::{
    collections::HashSet,
    fmt,
    future::{poll_fn, Future},
    io,
    panic::AssertUnwindSafe,
    time::Duration,
};

use bytes::BytesMut;
use futures_util::{future, stream::FuturesUnordered, FutureExt, SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::{
    codec::{Decoder, Encoder, FramedRead, FramedWrite},
    sync::CancellationToken,
};
use tower_cancel::{
    outbox::OutboxReceiver, BoxError, CancelReason, Dialect, ErrorObject, Id, Message, Outbox,
    Peer, Registry, Request, Response,
};
use tower_service::Service;

use crate::{
    content_length::ContentLengthCodec,
    frame::{FrameError, DEFAULT_MAX_FRAME_SIZE},
    ndjson::NdjsonCodec,
};

/// How messages are delimited on the byte stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// `Content-Length` headers (LSP).
    ContentLength,
    /// One JSON object per line (ACP and MCP over stdio).
    Ndjson,
}

/// What the driver does with replies the peer sends to this side's own requests.
pub type ResponseHandler = Box<dyn FnMut(Response) + Send>;

/// Serves a `Service<Request, Response = Option<Response>>` (such as a [`CancelStack`](tower_cancel::CancelStack))
/// over one connection.
///
/// # Behaviour
///
/// - Messages are read as they arrive and the service is called for each without waiting for earlier requests:
///   replies go out in the order they complete.
/// - Bytes that are not JSON get -32700 (so do an unreadable `Content-Length` header and a frame cut off by the
///   end of the stream), JSON that is not a valid message -32600, a frame over the size limit -32600, a request
///   whose id is already in flight -32600. The connection stays up for the other requests.
/// - Every request carries the connection's [`Registry`] in its extensions: the connection is the scope of its
///   cancels.
/// - Replies from the peer (to requests this side sent) never reach the service; they go to the
///   connection's [`Peer`] (see [`Server::peer`]) or to the [response handler](Server::on_response).
/// - Every request also carries the connection's [`Outbox`], through which handlers send progress reports.
/// - When the peer closes the connection (or the write side fails), every request in flight is cancelled with
///   [`CancelReason::Disconnect`]; the driver waits for them to settle (a cooperative handler gets its whole grace
///   period), and up to the [close grace](Server::close_grace) for what could not be cancelled, then drops what
///   is left. The registry is empty when `serve` returns.
/// - On [graceful shutdown](Server::shutdown_handle) the driver stops taking work: it lets the requests in flight
///   finish within the [drain timeout](Server::drain_timeout), then cancels the rest with
///   [`CancelReason::Shutdown`]. It keeps reading meanwhile, so cancels and the peer's replies still arrive; a
///   request that arrives during the drain starts out cancelled with reason Shutdown and never runs. Every
///   request is answered as its dialect says before the connection closes.
/// - A service that fails readiness ends the connection, as a broken service would for every request.
pub struct Server<S> {
    service: S,
    registry: Registry,
    max_frame_size: usize,
    close_grace: Duration,
    drain_timeout: Duration,
    shutdown: ShutdownHandle,
    on_response: ResponseHandler,
    outbox: Outbox,
    outbox_rx: OutboxReceiver,
    peer: Option<Peer>,
}

/// Starts a graceful shutdown of one connection (see [`Server::shutdown_handle`]). Cloning gives another handle to
/// the same connection; handles of several connections can be driven by one signal.
#[derive(Clone, Debug, Default)]
pub struct ShutdownHandle {
    token: CancellationToken,
}

impl ShutdownHandle {
    /// Stop reading, drain, then cancel what is left with reason Shutdown.
    pub fn shutdown(&self) {
        self.token.cancel();
    }

    /// Whether shutdown was asked for.
    pub fn is_shutting_down(&self) -> bool {
        self.token.is_cancelled()
    }
}

/// How long in-flight requests may run on after a graceful shutdown began, by default.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// Why the read loop stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ending {
    /// The peer closed, reading or writing failed, or the service broke.
    Disconnect,
    /// A graceful shutdown was asked for.
    Shutdown,
}

impl<S> fmt::Debug for Server<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Server")
            .field("registry", &self.registry)
            .field("max_frame_size", &self.max_frame_size)
            .field("close_grace", &self.close_grace)
            .finish()
    }
}

/// How long in-flight requests may take to settle after the connection closed, by default.
pub const DEFAULT_CLOSE_GRACE: Duration = Duration::from_secs(1);

impl<S> Server<S>
where
    S: Service<Request, Response = Option<Response>>,
    S::Error: Into<BoxError>,
{
    /// A driver for `service`, with a new registry for the connection.
    pub fn new(service: S) -> Self {
        let (outbox, outbox_rx) = Outbox::new();
        Self {
            outbox,
            outbox_rx,
            peer: None,
            service,
            registry: Registry::new(),
            max_frame_size: DEFAULT_MAX_FRAME_SIZE,
            close_grace: DEFAULT_CLOSE_GRACE,
            drain_timeout: DEFAULT_DRAIN_TIMEOUT,
            shutdown: ShutdownHandle::default(),
            on_response: Box::new(|response| {
                tracing::debug!(id = ?response.id, "reply to an unknown outgoing request dropped");
            }),
        }
    }

    /// The connection's registry (the scope of its cancels). Clone it to watch the connection from outside.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Use `registry` as the connection's scope instead of a new one.
    pub fn with_registry(mut self, registry: Registry) -> Self {
        self.registry = registry;
        self
    }

    /// The largest frame accepted (default [`DEFAULT_MAX_FRAME_SIZE`]).
    pub fn max_frame_size(mut self, bytes: usize) -> Self {
        self.max_frame_size = bytes;
        self
    }

    /// How long requests that could not be cancelled (`initialize`, notifications) may take to settle after the
    /// connection closed or the drain ended (default [`DEFAULT_CLOSE_GRACE`]). Cancelled requests are waited for
    /// until their cancel layer settles them.
    pub fn close_grace(mut self, grace: Duration) -> Self {
        self.close_grace = grace;
        self
    }

    /// How long requests in flight may run on after a graceful shutdown began, before they are cancelled with
    /// reason Shutdown (default [`DEFAULT_DRAIN_TIMEOUT`]).
    pub fn drain_timeout(mut self, timeout: Duration) -> Self {
        self.drain_timeout = timeout;
        self
    }

    /// A handle that starts a graceful shutdown of this connection.
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        self.shutdown.clone()
    }

    /// The connection's [`Peer`], to send requests to the other side (in either direction: a server calls its
    /// client too). The first call creates it with `dialect`'s rules; later calls return the same peer. From then
    /// on the peer's replies go to it, every request carries it in its extensions (a
    /// [`CascadeLayer`](tower_cancel::CascadeLayer) makes it a child of the request), and its pending calls fail
    /// with [`PeerError::Closed`](tower_cancel::PeerError::Closed) when the connection ends.
    ///
    /// Set the registry ([`Server::with_registry`]) before: the peer reads the dialect's session state there.
    pub fn peer<D: Dialect>(&mut self, dialect: D) -> Peer {
        self.peer
            .get_or_insert_with(|| Peer::new(dialect, self.outbox.clone(), self.registry.clone()))
            .clone()
    }

    /// Where replies from the peer go when there is no [`Peer`] (by default they are logged and dropped).
    pub fn on_response(mut self, handler: impl FnMut(Response) + Send + 'static) -> Self {
        self.on_response = Box::new(handler);
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
    pub async fn serve<R, W>(self, reader: R, writer: W, framing: Framing) -> io::Result<()>
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        let max = self.max_frame_size;
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
    pub async fn serve_with<R, W, C>(mut self, reader: R, writer: W, codec: C) -> io::Result<()>
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
        C: Decoder<Item = Result<BytesMut, FrameError>, Error = io::Error>
            + for<'a> Encoder<&'a [u8], Error = io::Error>
            + Clone,
    {
        let outbox = self.outbox.clone();
        // The read loop takes `self`; the writer takes the receiver, leaving an unused one in its place.
        let rx = std::mem::replace(&mut self.outbox_rx, Outbox::new().1);
        // The writer stops when told, not when every outbox is dropped: handlers may keep clones.
        let closing = CancellationToken::new();
        let writer_gone = CancellationToken::new();
        let writer = write_loop(
            FramedWrite::new(writer, codec.clone()),
            rx,
            closing.clone(),
            writer_gone.clone(),
        );
        let reader = async {
            let read = self
                .read_loop(FramedRead::new(reader, codec), outbox, writer_gone)
                .await;
            closing.cancel();
            read
        };
        let (read, write) = future::join(reader, writer).await;
        read.and(write)
    }

    async fn read_loop<R, C>(
        mut self,
        mut frames: FramedRead<R, C>,
        outbox: Outbox,
        writer_gone: CancellationToken,
    ) -> io::Result<()>
    where
        R: AsyncRead + Unpin,
        C: Decoder<Item = Result<BytesMut, FrameError>, Error = io::Error>,
    {
        let mut conn = Connection {
            outbox,
            in_flight_ids: HashSet::new(),
        };
        let mut in_flight = FuturesUnordered::new();
        let mut result = Ok(());
        let shutdown = self.shutdown.token.clone();
        let mut ending = Ending::Disconnect;
        // Armed when a graceful shutdown begins: the end of the drain.
        let mut drain = std::pin::pin!(tokio::time::sleep(Duration::ZERO));
        loop {
            let draining = ending == Ending::Shutdown;
            let next = tokio::select! {
                // Replies first: they free table entries and reach the peer sooner.
                biased;
                Some(done) = in_flight.next(), if !in_flight.is_empty() => {
                    conn.finish(done);
                    if draining && in_flight.is_empty() {
                        break;
                    }
                    continue;
                }
                () = writer_gone.cancelled() => break,
                () = shutdown.cancelled(), if !draining => {
                    // Reading goes on, so that cancels and the peer's replies still arrive; new requests start
                    // out cancelled with reason Shutdown and get their dialect's answer without running.
                    tracing::info!(in_flight = in_flight.len(), "shutting down: draining requests in flight");
                    ending = Ending::Shutdown;
                    self.registry.refuse_new(CancelReason::Shutdown);
                    if in_flight.is_empty() {
                        break;
                    }
                    drain.as_mut().reset(tokio::time::Instant::now() + self.drain_timeout);
                    continue;
                }
                () = &mut drain, if draining => {
                    tracing::info!(left = in_flight.len(), "drain timeout passed: cancelling the rest");
                    break;
                }
                frame = frames.next() => frame,
            };
            let bytes = match next {
                None => break,
                Some(Err(error)) => {
                    tracing::warn!(%error, "reading from the connection failed");
                    result = Err(error);
                    break;
                }
                Some(Ok(Err(frame_error))) => {
                    tracing::debug!(%frame_error, "bad frame");
                    // A header that cannot be read and a frame cut off by the end of the stream are bytes
                    // that cannot be parsed (-32700, as an NDJSON line cut off is); a frame over the limit may
                    // be fine JSON that is not accepted as a request (-32600).
                    let error = match frame_error {
                        FrameError::InvalidHeader(_) | FrameError::Truncated => {
                            ErrorObject::parse_error(&frame_error)
                        }
                        _ => ErrorObject::invalid_request(&frame_error),
                    };
                    conn.send(&Response::error(None, error));
                    continue;
                }
                Some(Ok(Ok(bytes))) => bytes,
            };
            let mut request = match Message::from_slice(&bytes) {
                Ok(Message::Request(request)) => request,
                Ok(Message::Response(response)) => {
                    match &self.peer {
                        Some(peer) => {
                            peer.dispatch_response(response);
                        }
                        None => (self.on_response)(response),
                    }
                    continue;
                }
                Err(invalid) => {
                    tracing::debug!(%invalid, "invalid message");
                    conn.send(&Response::error(invalid.id, invalid.error));
                    continue;
                }
            };
            // The peer's progress reports about this side's calls go to those calls, not to the service.
            if let Some(peer) = &self.peer {
                if request.is_notification() && peer.dispatch_progress(&request) {
                    continue;
                }
            }
            let id = request.id().cloned();
            if let Some(id) = &id {
                if !conn.in_flight_ids.insert(id.clone()) {
                    let error = ErrorObject::invalid_request(format!(
                        "request id {id} is already in flight"
                    ));
                    conn.send(&Response::error(Some(id.clone()), error));
                    continue;
                }
            }
            request.extensions_mut().insert(self.registry.clone());
            request.extensions_mut().insert(conn.outbox.clone());
            if let Some(peer) = &self.peer {
                request.extensions_mut().insert(peer.clone());
            }

            // Wait for readiness while still settling requests in flight: readiness may depend on them.
            let ready = loop {
                tokio::select! {
                    biased;
                    Some(done) = in_flight.next(), if !in_flight.is_empty() => conn.finish(done),
                    ready = poll_fn(|cx| self.service.poll_ready(cx)) => break ready,
                }
            };
            if let Err(error) = ready {
                let error: BoxError = error.into();
                tracing::error!(%error, "service failed; closing the connection");
                if let Some(id) = &id {
                    conn.in_flight_ids.remove(id);
                    conn.send(&Response::error(
                        Some(id.clone()),
                        ErrorObject::internal_error("service unavailable"),
                    ));
                }
                break;
            }
            let call = AssertUnwindSafe(|| self.service.call(request));
            match std::panic::catch_unwind(call) {
                Ok(future) => in_flight.push(settle(id, future)),
                Err(_) => conn.finish((id, Err(Failure::Panicked))),
            }
        }

        // Nothing more is read, so no reply can reach the peer's pending calls: they fail now, rather than keep a
        // handler that waits on one (in cooperative mode) until its grace ends.
        if let Some(peer) = &self.peer {
            peer.close();
        }
        // Everything still in flight is cancelled through its lifecycle: the peer is gone (Disconnect) or the
        // server is going (Shutdown). Each gets the close grace to settle: its dialect's reply is written, and in
        // cooperative mode a handler may still clean up.
        let reason = match ending {
            Ending::Disconnect => CancelReason::Disconnect,
            Ending::Shutdown => CancelReason::Shutdown,
        };
        let cancelled = self.registry.cancel_all(reason);
        if !in_flight.is_empty() {
            tracing::debug!(
                in_flight = in_flight.len(),
                cancelled,
                ?ending,
                "connection closing"
            );
            // The close grace bounds the wait only for what the cancel could not reach (requests that are never
            // cancellable, such as `initialize`; notifications). A cancelled request is settled by its cancel
            // layer, at once or, in cooperative mode, within the layer's own grace period, so the wait goes on
            // while the registry still holds one. Cutting it at the close grace (as before) dropped a cooperative
            // handler's request without any reply when its grace was the longer, although on a shutdown the peer
            // is still waiting for it (invariant 1).
            let mut grace = std::pin::pin!(tokio::time::sleep(self.close_grace));
            let mut grace_over = false;
            loop {
                tokio::select! {
                    done = in_flight.next() => match done {
                        Some(done) => conn.finish(done),
                        None => break,
                    },
                    () = &mut grace, if !grace_over => grace_over = true,
                }
                if grace_over && self.registry.is_empty() {
                    tracing::warn!(
                        left = in_flight.len(),
                        "requests still running after the close grace; dropping them"
                    );
                    break;
                }
            }
        }
        drop(in_flight);
        result
    }
}

enum Failure {
    Panicked,
    Service(BoxError),
}

type Settled = (Option<Id>, Result<Option<Response>, Failure>);

fn settle<F, E>(id: Option<Id>, future: F) -> impl Future<Output = Settled>
where
    F: Future<Output = Result<Option<Response>, E>>,
    E: Into<BoxError>,
{
    // A safety net for services without an ErrorMapLayer: a panic answers -32603 and the connection goes on.
    AssertUnwindSafe(future).catch_unwind().map(move |outcome| {
        let outcome = match outcome {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(error)) => Err(Failure::Service(error.into())),
            Err(_) => Err(Failure::Panicked),
        };
        (id, outcome)
    })
}

struct Connection {
    outbox: Outbox,
    in_flight_ids: HashSet<Id>,
}

impl Connection {
    fn finish(&mut self, (id, outcome): Settled) {
        if let Some(id) = &id {
            self.in_flight_ids.remove(id);
        }
        let reply = match outcome {
            Ok(reply) => reply,
            Err(failure) => {
                let error = match failure {
                    Failure::Panicked => ErrorObject::internal_error("handler panicked"),
                    Failure::Service(error) => ErrorObject::internal_error(error),
                };
                id.clone().map(|id| Response::error(Some(id), error))
            }
        };
        match (reply, id) {
            (Some(reply), Some(_)) => self.send(&reply),
            (Some(_), None) => tracing::debug!("reply to a notification dropped"),
            (None, _) => {}
        }
    }

    fn send(&self, reply: &Response) {
        // An error means the writer is gone; the read loop notices and winds down.
        let _ = self.outbox.send_response(reply);
    }
}

async fn write_loop<W, C>(
    mut sink: FramedWrite<W, C>,
    mut rx: OutboxReceiver,
    closing: CancellationToken,
    writer_gone: CancellationToken,
) -> io::Result<()>
where
    W: AsyncWrite + Unpin,
    C: for<'a> Encoder<&'a [u8], Error = io::Error>,
{
    let result: io::Result<()> = async {
        loop {
            let bytes = tokio::select! {
                biased;
                bytes = rx.recv() => bytes,
                // The read loop is done: write what is queued, then stop.
                () = closing.cancelled() => {
                    while let Ok(bytes) = rx.try_recv() {
                        sink.feed(&bytes[..]).await?;
                    }
                    sink.flush().await?;
                    return Ok(());
                }
            };
            let Some(bytes) = bytes else { return Ok(()) };
            sink.feed(&bytes[..]).await?;
            // Batch whatever else is ready into one flush.
            while let Ok(bytes) = rx.try_recv() {
                sink.feed(&bytes[..]).await?;
            }
            sink.flush().await?;
        }
    }
    .await;
    if let Err(error) = &result {
        tracing::debug!(%error, "writing to the connection failed");
    }
    // Closing the receiver makes later sends fail, and the token tells the read loop that the peer cannot hear us
    // any more.
    rx.close();
    writer_gone.cancel();
    match result {
        // A peer that hung up is a disconnect, not a failure of this side.
        Err(error) if error.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}
