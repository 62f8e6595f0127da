//! The connection driver: reads messages, calls the service concurrently, writes the replies.

use std::{
    collections::HashSet,
    fmt,
    future::{poll_fn, Future},
    io,
    panic::AssertUnwindSafe,
    time::Duration,
};

use bytes::{Bytes, BytesMut};
use futures_util::{future, stream::FuturesUnordered, FutureExt, SinkExt, StreamExt};
use tokio::{
    io::{AsyncRead, AsyncWrite},
    sync::mpsc,
};
use tokio_util::codec::{Decoder, Encoder, FramedRead, FramedWrite};
use tower_cancel::{BoxError, CancelReason, ErrorObject, Id, Message, Registry, Request, Response};
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
/// - Bytes that are not JSON get -32700, JSON that is not a valid message -32600, a frame over the size limit
///   -32600, a request whose id is already in flight -32600. The connection stays up for the other requests.
/// - Every request carries the connection's [`Registry`] in its extensions: the connection is the scope of its
///   cancels.
/// - Replies from the peer (to requests this side sent) never reach the service; they go to the
///   [response handler](Server::on_response).
/// - When the peer closes the connection (or the write side fails), every request in flight is cancelled with
///   [`CancelReason::Disconnect`]; the driver waits up to the [close grace](Server::close_grace) for them to
///   settle, then drops what is left. The registry is empty when `serve` returns.
/// - A service that fails readiness ends the connection, as a broken service would for every request.
pub struct Server<S> {
    service: S,
    registry: Registry,
    max_frame_size: usize,
    close_grace: Duration,
    on_response: ResponseHandler,
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
        Self {
            service,
            registry: Registry::new(),
            max_frame_size: DEFAULT_MAX_FRAME_SIZE,
            close_grace: DEFAULT_CLOSE_GRACE,
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

    /// How long requests may take to settle after the connection closed (default [`DEFAULT_CLOSE_GRACE`]).
    pub fn close_grace(mut self, grace: Duration) -> Self {
        self.close_grace = grace;
        self
    }

    /// Where replies from the peer go (the table of this side's outgoing requests).
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
    pub async fn serve_with<R, W, C>(self, reader: R, writer: W, codec: C) -> io::Result<()>
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
        C: Decoder<Item = Result<BytesMut, FrameError>, Error = io::Error>
            + for<'a> Encoder<&'a [u8], Error = io::Error>
            + Clone,
    {
        let (tx, rx) = mpsc::unbounded_channel();
        let writer = write_loop(FramedWrite::new(writer, codec.clone()), rx);
        let reader = self.read_loop(FramedRead::new(reader, codec), tx);
        let (read, write) = future::join(reader, writer).await;
        read.and(write)
    }

    async fn read_loop<R, C>(
        mut self,
        mut frames: FramedRead<R, C>,
        tx: mpsc::UnboundedSender<Bytes>,
    ) -> io::Result<()>
    where
        R: AsyncRead + Unpin,
        C: Decoder<Item = Result<BytesMut, FrameError>, Error = io::Error>,
    {
        let mut conn = Connection {
            tx,
            in_flight_ids: HashSet::new(),
        };
        let mut in_flight = FuturesUnordered::new();
        let mut result = Ok(());
        loop {
            let next = tokio::select! {
                // Replies first: they free table entries and reach the peer sooner.
                biased;
                Some(done) = in_flight.next(), if !in_flight.is_empty() => {
                    conn.finish(done);
                    continue;
                }
                () = conn.tx.closed() => break,
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
                    let error = match frame_error {
                        FrameError::InvalidHeader(_) => ErrorObject::parse_error(&frame_error),
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
                    (self.on_response)(response);
                    continue;
                }
                Err(invalid) => {
                    tracing::debug!(%invalid, "invalid message");
                    conn.send(&Response::error(invalid.id, invalid.error));
                    continue;
                }
            };
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

        // The peer is gone (or the service broke): every request in flight is cancelled through its lifecycle,
        // and gets the grace period to settle (in cooperative mode a handler may still clean up).
        let cancelled = self.registry.cancel_all(CancelReason::Disconnect);
        if !in_flight.is_empty() {
            tracing::debug!(in_flight = in_flight.len(), cancelled, "connection closed");
            let drain = async {
                while let Some(done) = in_flight.next().await {
                    conn.finish(done);
                }
            };
            if tokio::time::timeout(self.close_grace, drain).await.is_err() {
                tracing::warn!(
                    left = in_flight.len(),
                    "requests still running after the close grace; dropping them"
                );
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
    tx: mpsc::UnboundedSender<Bytes>,
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
        match serde_json::to_vec(reply) {
            // A closed channel means the writer is gone; the read loop notices and winds down.
            Ok(bytes) => {
                let _ = self.tx.send(Bytes::from(bytes));
            }
            Err(error) => tracing::error!(%error, "reply could not be serialized"),
        }
    }
}

async fn write_loop<W, C>(
    mut sink: FramedWrite<W, C>,
    mut rx: mpsc::UnboundedReceiver<Bytes>,
) -> io::Result<()>
where
    W: AsyncWrite + Unpin,
    C: for<'a> Encoder<&'a [u8], Error = io::Error>,
{
    let result: io::Result<()> = async {
        while let Some(bytes) = rx.recv().await {
            sink.feed(&bytes[..]).await?;
            // Batch whatever else is ready into one flush.
            while let Ok(bytes) = rx.try_recv() {
                sink.feed(&bytes[..]).await?;
            }
            sink.flush().await?;
        }
        Ok(())
    }
    .await;
    if let Err(error) = &result {
        tracing::debug!(%error, "writing to the connection failed");
    }
    // Dropping the receiver tells the read loop that the peer cannot hear us any more.
    drop(rx);
    match result {
        // A peer that hung up is a disconnect, not a failure of this side.
        Err(error) if error.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}
