//! The harness's client: the same raw-frame JSON-RPC client for every target, so that only the server differs.

use std::{io, time::Duration};

use bytes::BytesMut;
use futures_util::{FutureExt, StreamExt};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::{
    io::{AsyncWrite, AsyncWriteExt},
    task::JoinHandle,
};
use tokio_util::codec::{Decoder, FramedRead};
use tower_cancel_io::{ContentLengthCodec, FrameError, NdjsonCodec};

use crate::target::{BoxRead, BoxWrite, Protocol, Target};

/// How long a handler sleeps when it should stay in flight until cancelled: an hour.
pub const HELD_MS: u64 = 3_600_000;

/// The connection between the client and the target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// tokio's in-memory duplex pipe.
    Duplex,
    /// A Unix socket pair.
    Unix,
}

impl Transport {
    /// The name in the tables.
    pub fn name(self) -> &'static str {
        match self {
            Transport::Duplex => "in-memory duplex",
            Transport::Unix => "Unix socket",
        }
    }
}

/// The shape of the requests the client writes: the plain workload (numeric ids, small params, a handler ready on
/// its first poll) flatters a stack, so some figures use a heavier one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Shape {
    /// String ids of a UUID's 36 characters (as MCP clients send them) instead of numbers.
    pub string_ids: bool,
    /// Bytes of padding in each request's params (`"pad": "xx…"`, as a document's text would be); 0 for none.
    pub pad: usize,
    /// The handler awaits once before its work (`"yields": true`).
    pub yields: bool,
}

impl Shape {
    /// String ids and 4 KiB params.
    pub const STRING_IDS_4K_PARAMS: Self = Self {
        string_ids: true,
        pad: 4096,
        yields: false,
    };

    /// A handler that awaits once.
    pub const YIELDS: Self = Self {
        string_ids: false,
        pad: 0,
        yields: true,
    };

    /// The id of request `n` in this shape.
    fn id(self, n: u64) -> Value {
        if self.string_ids {
            // A UUID's form; the request's number is its last group, read back by `parse`.
            Value::from(format!("6f1c2d3e-0b7a-4c1d-9e2f-{n:012}"))
        } else {
            Value::from(n)
        }
    }
}

/// One reply read from the target.
#[derive(Clone, Copy, Debug)]
pub struct Reply {
    /// The id it answers.
    pub id: u64,
    /// Whether it is an error reply (a cancelled request's, for instance).
    pub is_error: bool,
    /// The error's code, for an error reply that has one.
    pub code: Option<i64>,
}

/// A client connected to a running target.
pub struct Client {
    protocol: Protocol,
    reader: FramedRead<BoxRead, AnyCodec>,
    writer: BoxWrite,
    out: Vec<u8>,
    shape: Shape,
    // The padding of every request's params, made once.
    pad: String,
    // None for a connection to a server that runs elsewhere (see `Client::over`).
    server: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("protocol", &self.protocol)
            .finish()
    }
}

impl Client {
    /// Start `target` on a new connection over `transport` (on the current runtime) and connect to it. `need` is the
    /// most requests the workload will have in flight at once (a peer configured for the real need sets its limit to
    /// it).
    pub fn connect(target: &Target, transport: Transport, need: usize) -> io::Result<Self> {
        let ((server_read, server_write), (client_read, client_write)) = match transport {
            Transport::Duplex => {
                let (a, b) = tokio::io::duplex(64 * 1024);
                (boxed(a), boxed(b))
            }
            Transport::Unix => {
                let (a, b) = tokio::net::UnixStream::pair()?;
                (boxed(a), boxed(b))
            }
        };
        let server = tokio::spawn((target.serve)(server_read, server_write, need));
        Ok(Self {
            server: Some(server),
            ..Self::over(target.protocol, client_read, client_write)
        })
    }

    /// A client over a connection to a server that runs elsewhere (a socket a listener accepted, for instance).
    fn over(protocol: Protocol, reader: BoxRead, writer: BoxWrite) -> Self {
        Self {
            protocol,
            reader: FramedRead::new(reader, AnyCodec::new(protocol)),
            writer,
            out: Vec::with_capacity(1 << 20),
            shape: Shape::default(),
            pad: String::new(),
            server: None,
        }
    }

    /// Write every later request in `shape`.
    pub fn with_shape(mut self, shape: Shape) -> Self {
        self.pad = "x".repeat(shape.pad);
        self.shape = shape;
        self
    }

    /// A client over a socket (or any stream) already connected to a server that runs elsewhere.
    pub fn over_stream<T>(protocol: Protocol, stream: T) -> Self
    where
        T: tokio::io::AsyncRead + AsyncWrite + Send + 'static,
    {
        let (reader, writer) = boxed(stream);
        Self::over(protocol, reader, writer)
    }

    /// `initialize`, its reply, then the `initialized` notification.
    pub async fn handshake(&mut self) -> io::Result<()> {
        let params = match self.protocol {
            Protocol::Lsp => json!({ "processId": null, "rootUri": null, "capabilities": {} }),
            Protocol::Mcp => json!({
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": { "name": "tower-cancel-bench", "version": "0" },
            }),
        };
        self.queue(&json!({ "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params }));
        self.flush().await?;
        self.wait_for(0).await?;
        let initialized = match self.protocol {
            Protocol::Lsp => "initialized",
            Protocol::Mcp => "notifications/initialized",
        };
        self.queue(&json!({ "jsonrpc": "2.0", "method": initialized, "params": {} }));
        self.flush().await
    }

    /// Queue a unit of work: request `id` sleeps `ms`, its handler's guard tagged with `id`.
    pub fn queue_work(&mut self, id: u64, ms: u64) {
        self.queue_work_tagged(id, ms, id);
    }

    /// Queue a unit of work whose handler's guard is tagged with `tag` (a constant tag keeps
    /// [`probe`](crate::probe)'s record of stopped handlers to one entry, however many are cancelled).
    pub fn queue_work_tagged(&mut self, id: u64, ms: u64, tag: u64) {
        let mut args = json!({ "ms": ms, "tag": tag });
        if self.shape.yields {
            args["yields"] = Value::Bool(true);
        }
        if self.shape.pad > 0 {
            args["pad"] = Value::from(self.pad.as_str());
        }
        let id = self.shape.id(id);
        let message = match self.protocol {
            Protocol::Lsp => {
                json!({ "jsonrpc": "2.0", "id": id, "method": "bench/work", "params": args })
            }
            Protocol::Mcp => json!({
                "jsonrpc": "2.0", "id": id, "method": "tools/call",
                "params": { "name": "work", "arguments": args },
            }),
        };
        self.queue(&message);
    }

    /// Queue a request `id` whose handler computes for `us` microseconds without awaiting, then answers
    /// (`bench/spin`: LSP, tower-cancel's own targets only).
    pub fn queue_spin(&mut self, id: u64, us: u64) {
        assert_eq!(self.protocol, Protocol::Lsp, "bench/spin is an LSP request");
        let message = json!({
            "jsonrpc": "2.0", "id": id, "method": "bench/spin", "params": { "us": us },
        });
        self.queue(&message);
    }

    /// Queue the dialect's cancel of request `id`.
    pub fn queue_cancel(&mut self, id: u64) {
        let message = match self.protocol {
            Protocol::Lsp => {
                json!({ "jsonrpc": "2.0", "method": "$/cancelRequest", "params": { "id": self.shape.id(id) } })
            }
            Protocol::Mcp => json!({
                "jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": { "requestId": self.shape.id(id), "reason": "benchmark" },
            }),
        };
        self.queue(&message);
    }

    fn queue(&mut self, message: &Value) {
        let body = serde_json::to_vec(message).expect("a JSON value serializes");
        match self.protocol {
            Protocol::Lsp => {
                self.out.extend_from_slice(
                    format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes(),
                );
                self.out.extend_from_slice(&body);
            }
            Protocol::Mcp => {
                self.out.extend_from_slice(&body);
                self.out.push(b'\n');
            }
        }
    }

    /// Queue bytes as they are, framed or not (the start of a frame, before the connection is dropped).
    pub fn queue_raw(&mut self, bytes: &[u8]) {
        self.out.extend_from_slice(bytes);
    }

    /// Bytes queued and not yet written.
    pub fn queued(&self) -> usize {
        self.out.len()
    }

    /// Write what is queued.
    pub async fn flush(&mut self) -> io::Result<()> {
        self.writer.write_all(&self.out).await?;
        self.writer.flush().await?;
        self.out.clear();
        Ok(())
    }

    /// The next reply; an error if the target closed the connection.
    pub async fn next_reply(&mut self) -> io::Result<Reply> {
        next_reply(&mut self.reader).await
    }

    /// Take the connection's reading half, so that one task reads the replies while another writes the requests
    /// (an open-loop load, whose sends never wait for replies). This client reads nothing after.
    pub fn take_replies(&mut self) -> Replies {
        let nothing: BoxRead = Box::pin(tokio::io::empty());
        let reader = std::mem::replace(
            &mut self.reader,
            FramedRead::new(nothing, AnyCodec::new(self.protocol)),
        );
        Replies { reader }
    }

    /// The next reply if one is already readable without waiting.
    pub fn ready_reply(&mut self) -> io::Result<Option<Reply>> {
        while let Some(frame) = self.reader.next().now_or_never() {
            if let Some(reply) = parse(frame)? {
                return Ok(Some(reply));
            }
        }
        Ok(None)
    }

    /// Read replies until the one to `id`.
    pub async fn wait_for(&mut self, id: u64) -> io::Result<Reply> {
        loop {
            let reply = self.next_reply().await?;
            if reply.id == id {
                return Ok(reply);
            }
        }
    }

    /// Send a trivial request and wait for its reply: everything sent before has been read by the target.
    pub async fn barrier(&mut self, id: u64) -> io::Result<()> {
        self.queue_work(id, 0);
        self.flush().await?;
        self.wait_for(id).await.map(drop)
    }

    /// Close the connection and wait up to `patience` for the target to return. Whether it did (always true for a
    /// server that runs elsewhere: there is nothing to wait for here).
    pub async fn close(mut self, patience: Duration) -> bool {
        let _ = self.writer.shutdown().await;
        drop(self.writer);
        drop(self.reader);
        let Some(mut server) = self.server else {
            return true;
        };
        let returned = tokio::time::timeout(patience, &mut server).await.is_ok();
        if !returned {
            server.abort();
        }
        returned
    }
}

/// The reading half of a client's connection ([`Client::take_replies`]).
pub struct Replies {
    reader: FramedRead<BoxRead, AnyCodec>,
}

impl std::fmt::Debug for Replies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replies").finish_non_exhaustive()
    }
}

impl Replies {
    /// The next reply; an error if the target closed the connection. Cancel safe: a reply is taken from the
    /// connection only when this returns it.
    pub async fn next_reply(&mut self) -> io::Result<Reply> {
        next_reply(&mut self.reader).await
    }
}

async fn next_reply(reader: &mut FramedRead<BoxRead, AnyCodec>) -> io::Result<Reply> {
    loop {
        let frame = reader.next().await;
        if let Some(reply) = parse(frame)? {
            return Ok(reply);
        }
    }
}

fn boxed<T>(stream: T) -> (BoxRead, BoxWrite)
where
    T: tokio::io::AsyncRead + AsyncWrite + Send + 'static,
{
    let (read, write) = tokio::io::split(stream);
    (Box::pin(read), Box::pin(write))
}

fn parse(frame: Option<io::Result<Result<BytesMut, FrameError>>>) -> io::Result<Option<Reply>> {
    #[derive(Deserialize)]
    struct Frame {
        id: Option<Value>,
        method: Option<serde::de::IgnoredAny>,
        error: Option<ErrorCode>,
    }
    #[derive(Deserialize)]
    struct ErrorCode {
        // Any JSON, so that a reply the harness read before still reads.
        code: Option<Value>,
    }
    let closed = || {
        io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the target closed the connection",
        )
    };
    let bytes = frame.ok_or_else(closed)??.map_err(io::Error::other)?;
    let frame: Frame = serde_json::from_slice(&bytes).map_err(io::Error::other)?;
    // Requests and notifications from the target (logs, progress) are not replies.
    if frame.method.is_some() {
        return Ok(None);
    }
    // A string id is the shape's UUID form, its last group the request's number.
    let id = frame.id.as_ref().and_then(|id| match id {
        Value::String(id) => id.rsplit('-').next()?.parse().ok(),
        id => id.as_u64(),
    });
    Ok(id.map(|id| Reply {
        id,
        is_error: frame.error.is_some(),
        code: frame.error.and_then(|error| error.code?.as_i64()),
    }))
}

/// The framing of either protocol, chosen at run time.
struct AnyCodec {
    content_length: ContentLengthCodec,
    ndjson: NdjsonCodec,
    protocol: Protocol,
}

impl AnyCodec {
    fn new(protocol: Protocol) -> Self {
        let max = 64 << 20;
        Self {
            content_length: ContentLengthCodec::with_max_frame_size(max),
            ndjson: NdjsonCodec::with_max_frame_size(max),
            protocol,
        }
    }
}

impl Decoder for AnyCodec {
    type Item = Result<BytesMut, FrameError>;
    type Error = io::Error;

    fn decode(&mut self, src: &mut BytesMut) -> io::Result<Option<Self::Item>> {
        match self.protocol {
            Protocol::Lsp => self.content_length.decode(src),
            Protocol::Mcp => self.ndjson.decode(src),
        }
    }
}
