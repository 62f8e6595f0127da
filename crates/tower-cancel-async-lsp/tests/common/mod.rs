//! A server on async-lsp's `Router` behind the adapter, driven over an in-memory pipe by a client that writes and
//! reads raw `Content-Length` frames.

#![allow(dead_code, unreachable_pub)]

use std::{
    ops::ControlFlow,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::Duration,
};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::{
    io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, WriteHalf},
    sync::mpsc,
    task::JoinHandle,
};
use tower_cancel::{CancelStack, Registry};
use tower_cancel_async_lsp::{
    async_lsp::{
        lsp_types::{
            notification::{Exit, Initialized, Notification, WorkDoneProgressCancel},
            request::{Request, WorkDoneProgressCreate},
            NumberOrString, WorkDoneProgressCreateParams,
        },
        router::Router,
        ClientSocket, ResponseError,
    },
    AsyncLsp, Watch,
};
use tower_cancel_io::Server;

/// What the handlers did.
#[derive(Debug, Default)]
pub struct Counters {
    pub started: AtomicUsize,
    pub finished: AtomicUsize,
    /// Futures dropped before they finished: stopped.
    pub stopped: AtomicUsize,
}

impl Counters {
    pub fn started(&self) -> usize {
        self.started.load(Ordering::SeqCst)
    }
    pub fn finished(&self) -> usize {
        self.finished.load(Ordering::SeqCst)
    }
    pub fn stopped(&self) -> usize {
        self.stopped.load(Ordering::SeqCst)
    }
}

struct Run(Arc<Counters>, bool);

impl Drop for Run {
    fn drop(&mut self) {
        let counter = if self.1 {
            &self.0.finished
        } else {
            &self.0.stopped
        };
        counter.fetch_add(1, Ordering::SeqCst);
    }
}

/// `test/sleep {"ms"}` -> `{"slept": ms}`.
pub enum Sleep {}

#[derive(Serialize, Deserialize)]
pub struct Ms {
    pub ms: u64,
}

impl Request for Sleep {
    type Params = Ms;
    type Result = Value;
    const METHOD: &'static str = "test/sleep";
}

/// `test/ask {"question"}`: asks the client `test/question` and answers `{"answer": <its result>}` (or
/// `{"failed": <the error>}`).
pub enum Ask {}

impl Request for Ask {
    type Params = Value;
    type Result = Value;
    const METHOD: &'static str = "test/ask";
}

/// The request `test/ask` makes to the client.
pub enum Question {}

impl Request for Question {
    type Params = Value;
    type Result = Value;
    const METHOD: &'static str = "test/question";
}

/// `test/append {"v"}` (notification): appends `v` to the router's state.
pub enum Append {}

impl Notification for Append {
    type Params = Value;
    const METHOD: &'static str = "test/append";
}

/// `test/read`: the router's state when the request was called.
pub enum Read {}

impl Request for Read {
    type Params = Value;
    type Result = Value;
    const METHOD: &'static str = "test/read";
}

/// `test/emit {"v"}`: emits the event `Bump(v)` through the handler's `ClientSocket`, answers `null`.
pub enum Emit {}

impl Request for Emit {
    type Params = Value;
    type Result = Value;
    const METHOD: &'static str = "test/emit";
}

/// `test/progress {"token"}`: creates the progress token `token` on the client (`window/workDoneProgress/create`
/// through the handler's `ClientSocket`), then works until stopped.
pub enum MakeProgress {}

impl Request for MakeProgress {
    type Params = Value;
    type Result = Value;
    const METHOD: &'static str = "test/progress";
}

/// The event `test/emit` emits; its handler appends it to the state.
pub struct Bump(pub Value);

pub fn router(client: ClientSocket, counters: Arc<Counters>) -> Router<Vec<Value>> {
    let mut router = Router::new(Vec::new());
    let sleeps = counters.clone();
    let emitter = client.clone();
    let creator = client.clone();
    let progresses = counters.clone();
    router
        .request::<Sleep, _>(move |_, Ms { ms }| {
            let counters = sleeps.clone();
            async move {
                counters.started.fetch_add(1, Ordering::SeqCst);
                let mut run = Run(counters, false);
                tokio::time::sleep(Duration::from_millis(ms)).await;
                run.1 = true;
                Ok::<_, ResponseError>(json!({ "slept": ms }))
            }
        })
        .request::<Ask, _>(move |_, question| {
            let client = client.clone();
            let counters = counters.clone();
            async move {
                counters.started.fetch_add(1, Ordering::SeqCst);
                let mut run = Run(counters, false);
                let answer = match client.request::<Question>(question).await {
                    Ok(answer) => json!({ "answer": answer }),
                    Err(error) => json!({ "failed": error.to_string() }),
                };
                run.1 = true;
                Ok(answer)
            }
        })
        .request::<MakeProgress, _>(move |_, params| {
            let client = creator.clone();
            let counters = progresses.clone();
            async move {
                counters.started.fetch_add(1, Ordering::SeqCst);
                let _run = Run(counters, false);
                let token = NumberOrString::String(params["token"].as_str().unwrap_or("").into());
                let created = client
                    .request::<WorkDoneProgressCreate>(WorkDoneProgressCreateParams { token })
                    .await;
                if let Err(error) = created {
                    return Ok(json!({ "failed": error.to_string() }));
                }
                std::future::pending::<Result<Value, ResponseError>>().await
            }
        })
        .notification::<Initialized>(|_, _| ControlFlow::Continue(()))
        .notification::<WorkDoneProgressCancel>(|_, _| ControlFlow::Continue(()))
        .notification::<Exit>(|_, ()| ControlFlow::Break(Ok(())))
        .notification::<Append>(|state, params| {
            state.push(params["v"].clone());
            ControlFlow::Continue(())
        })
        .request::<Read, _>(|state, _| {
            let seen = Value::from(state.clone());
            async move { Ok(seen) }
        })
        .request::<Emit, _>(move |_, params| {
            let emitted = emitter.emit(Bump(params["v"].clone())).is_ok();
            async move { Ok(Value::from(emitted)) }
        })
        .event::<Bump>(|state, Bump(v)| {
            state.push(v);
            ControlFlow::Continue(())
        });
    router
}

/// One served connection and its client end.
pub struct Harness {
    pub client: Client,
    pub counters: Arc<Counters>,
    pub watch: Watch,
    pub registry: Registry,
    pub served: JoinHandle<std::io::Result<()>>,
}

pub fn start(stack: CancelStack<tower_cancel::dialect::Lsp>) -> Harness {
    let counters = Arc::new(Counters::default());
    let lsp = AsyncLsp::new_server({
        let counters = counters.clone();
        |client| router(client, counters)
    });
    let watch = lsp.watch();
    let server = Server::with_stack(stack, lsp.service());
    let registry = server.registry().clone();
    let (client_io, server_io) = tokio::io::duplex(1 << 16);
    let (server_read, server_write) = tokio::io::split(server_io);
    let served = tokio::spawn(lsp.serve(server, server_read, server_write));
    Harness {
        client: Client::new(client_io),
        counters,
        watch,
        registry,
        served,
    }
}

/// The client end: frames out, and every message the server writes, in order.
pub struct Client {
    writer: Option<WriteHalf<tokio::io::DuplexStream>>,
    pub received: mpsc::UnboundedReceiver<Value>,
}

impl Client {
    pub fn new(io: tokio::io::DuplexStream) -> Self {
        let (read, writer) = tokio::io::split(io);
        let (tx, received) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut read = BufReader::new(read);
            loop {
                let mut length = None;
                loop {
                    let mut line = String::new();
                    if read.read_line(&mut line).await.unwrap_or(0) == 0 {
                        return;
                    }
                    if line == "\r\n" {
                        break;
                    }
                    if let Some(value) = line.trim_end().strip_prefix("Content-Length: ") {
                        length = value.parse::<usize>().ok();
                    }
                }
                let mut body = vec![0; length.expect("a Content-Length")];
                if read.read_exact(&mut body).await.is_err() {
                    return;
                }
                let message = serde_json::from_slice(&body).expect("JSON from the server");
                if tx.send(message).is_err() {
                    return;
                }
            }
        });
        Self {
            writer: Some(writer),
            received,
        }
    }

    pub async fn send(&mut self, message: Value) {
        self.send_raw(message.to_string().as_bytes()).await;
    }

    pub async fn send_raw(&mut self, body: &[u8]) {
        let writer = self.writer.as_mut().expect("not closed");
        let mut frame = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
        frame.extend_from_slice(body);
        writer.write_all(&frame).await.unwrap();
    }

    pub async fn request(&mut self, id: impl Into<Value>, method: &str, params: Value) {
        self.send(json!({ "jsonrpc": "2.0", "id": id.into(), "method": method, "params": params }))
            .await;
    }

    pub async fn cancel(&mut self, id: impl Into<Value>) {
        self.send(
            json!({ "jsonrpc": "2.0", "method": "$/cancelRequest", "params": { "id": id.into() } }),
        )
        .await;
    }

    /// The next message from the server (an hour of paused time at most: the server's own timers come first).
    pub async fn next(&mut self) -> Value {
        tokio::time::timeout(Duration::from_secs(3600), self.received.recv())
            .await
            .expect("a message from the server")
            .expect("the connection open")
    }

    /// The next two messages, which must be a reply and a `$/cancelRequest` (in either order): reply first.
    pub async fn reply_and_cancel(&mut self) -> [Value; 2] {
        let mut messages = [self.next().await, self.next().await];
        messages.sort_by_key(|m| m.get("method").is_some());
        assert_eq!(messages[1]["method"], "$/cancelRequest", "{messages:?}");
        messages
    }

    /// Whether the server wrote nothing more (after letting everything runnable run).
    pub async fn nothing_more(&mut self) -> bool {
        settle().await;
        self.received.try_recv().is_err()
    }

    /// Close the client's writing side: the server sees the end of its input.
    pub async fn close(&mut self) {
        if let Some(mut writer) = self.writer.take() {
            writer.shutdown().await.unwrap();
        }
    }
}

/// Let every task run until all wait (on paused time, without moving the clock).
pub async fn settle() {
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
}

/// The exact reply of a cancelled request.
pub fn cancelled(id: impl Into<Value>) -> Value {
    json!({ "jsonrpc": "2.0", "id": id.into(), "error": { "code": -32800, "message": "Request cancelled" } })
}
