//! A tower-lsp-server `LanguageServer` served through the adapter by tower-cancel's driver over an in-memory
//! duplex pipe, and a client that writes and reads raw `Content-Length` frames.

#![allow(dead_code, unreachable_pub)]

use std::{
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

use futures_util::FutureExt;
use serde_json::{json, Value};
use tokio::{
    io::{
        AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, DuplexStream, ReadHalf, WriteHalf,
    },
    task::JoinHandle,
};
use tower_cancel::{CancelStack, Registry, TimeoutLayer};
use tower_cancel_io::{Framing, Server};
use tower_cancel_tower_lsp::LspAdapter;
use tower_lsp_server::{
    jsonrpc::Result,
    ls_types::{request::Request as LspRequest, InitializeParams, InitializeResult, ProgressToken},
    Cancellable, Client, LanguageServer, LspService, OngoingProgress, Unbounded,
};

/// The exact reply to a cancelled request `id` (a JSON literal: `7` or `"a"`).
pub fn cancelled(id: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-32800,"message":"Request cancelled"}}}}"#
    )
}

/// How many handlers began, finished, and were stopped (their future dropped unfinished).
#[derive(Debug, Default)]
pub struct Counters {
    pub started: AtomicU64,
    pub finished: AtomicU64,
    pub stopped: AtomicU64,
}

impl Counters {
    pub fn get(&self) -> (u64, u64, u64) {
        (
            self.started.load(Ordering::SeqCst),
            self.finished.load(Ordering::SeqCst),
            self.stopped.load(Ordering::SeqCst),
        )
    }
}

struct Running(Arc<Counters>, bool);

impl Drop for Running {
    fn drop(&mut self) {
        let counter = if self.1 {
            &self.0.finished
        } else {
            &self.0.stopped
        };
        counter.fetch_add(1, Ordering::SeqCst);
    }
}

/// The server's own request to the client, `test/ask`.
pub enum Ask {}

impl LspRequest for Ask {
    type Params = Value;
    type Result = Value;
    const METHOD: &'static str = "test/ask";
}

pub struct TestServer {
    client: Client,
    counters: Arc<Counters>,
}

impl LanguageServer for TestServer {
    async fn initialize(&self, _: InitializeParams) -> Result<InitializeResult> {
        Ok(InitializeResult::default())
    }

    async fn shutdown(&self) -> Result<()> {
        Ok(())
    }
}

impl TestServer {
    /// `test/sleep {"ms"}`: sleeps, counted.
    async fn sleep(&self, params: Value) -> Result<Value> {
        self.counters.started.fetch_add(1, Ordering::SeqCst);
        let mut running = Running(self.counters.clone(), false);
        let ms = params["ms"].as_u64().unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(ms)).await;
        running.1 = true;
        Ok(json!({ "slept": ms }))
    }

    /// `test/askbriefly {"ms"}`: asks the client `test/ask`, but answers `"gave up"` if the client has not
    /// answered within `ms` (the handler then ends while its request to the client still waits).
    async fn ask_briefly(&self, params: Value) -> Result<Value> {
        let ms = params["ms"].as_u64().unwrap_or(0);
        tokio::select! {
            answer = self.client.send_request::<Ask>(params) => answer,
            () = tokio::time::sleep(Duration::from_millis(ms)) => Ok(json!("gave up")),
        }
    }

    /// `test/progress {"token"}`: creates the progress token `token` on the client, begins a cancellable progress
    /// under it, and works until stopped; a guard ends the progress when the handler's future is dropped.
    async fn progress(&self, params: Value) -> Result<Value> {
        self.counters.started.fetch_add(1, Ordering::SeqCst);
        let _running = Running(self.counters.clone(), false);
        let token = match &params["token"] {
            Value::String(token) => ProgressToken::String(token.clone()),
            other => ProgressToken::Number(
                other
                    .as_i64()
                    .and_then(|n| i32::try_from(n).ok())
                    .unwrap_or(0),
            ),
        };
        self.client.create_work_done_progress(token.clone()).await?;
        let begun = self
            .client
            .progress(token, "test/progress")
            .with_cancel_button()
            .begin()
            .await;
        let _end = EndOnDrop(Some(begun));
        std::future::pending().await
    }

    /// `test/echo`: answers its params at once.
    async fn echo(&self, params: Value) -> Result<Value> {
        Ok(params)
    }

    /// `test/ask`: asks the client `test/ask` and answers what the client answered.
    async fn ask(&self, params: Value) -> Result<Value> {
        self.counters.started.fetch_add(1, Ordering::SeqCst);
        let mut running = Running(self.counters.clone(), false);
        let answer = self.client.send_request::<Ask>(params).await;
        running.1 = true;
        answer
    }
}

/// Ends a progress when dropped: tower-lsp's `Client` sends without waiting when its channel has room, which it
/// always has for a fresh sender.
struct EndOnDrop(Option<OngoingProgress<Unbounded, Cancellable>>);

impl Drop for EndOnDrop {
    fn drop(&mut self) {
        if let Some(progress) = self.0.take() {
            let _ = progress.finish().now_or_never();
        }
    }
}

/// The client's side of a served connection.
pub struct Peer {
    /// `None` once reading goes on in the background ([`Peer::read_in_background`]).
    reader: Option<BufReader<ReadHalf<DuplexStream>>>,
    writer: Option<WriteHalf<DuplexStream>>,
    pub registry: Registry,
    pub counters: Arc<Counters>,
    /// A clone of the adapter being served (for its counters).
    pub adapter: LspAdapter<TestServer>,
    pub served: JoinHandle<std::io::Result<()>>,
}

pub fn stack() -> CancelStack<tower_cancel::dialect::Lsp> {
    CancelStack::lsp()
}

impl Peer {
    /// Serve a `TestServer` under `stack`, and initialize it.
    pub async fn start(timeouts: TimeoutLayer) -> Self {
        let counters = Arc::new(Counters::default());
        let handler_counters = counters.clone();
        let service = LspService::build(move |client| TestServer {
            client,
            counters: handler_counters,
        })
        .custom_method("test/sleep", TestServer::sleep)
        .custom_method("test/echo", TestServer::echo)
        .custom_method("test/ask", TestServer::ask)
        .custom_method("test/askbriefly", TestServer::ask_briefly)
        .custom_method("test/progress", TestServer::progress)
        .finish();
        let adapter = LspAdapter::new(service);
        let server = Server::with_stack(stack().timeouts(timeouts), adapter.clone());
        let registry = server.registry().clone();
        let (ours, theirs) = tokio::io::duplex(1 << 20);
        let (read, write) = tokio::io::split(theirs);
        let served = tokio::spawn(server.serve(read, write, Framing::ContentLength));
        let (reader, writer) = tokio::io::split(ours);
        let mut peer = Self {
            reader: Some(BufReader::new(reader)),
            writer: Some(writer),
            registry,
            counters,
            adapter,
            served,
        };
        peer.send(
            json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"capabilities":{}}}),
        )
        .await;
        let reply = peer.recv().await;
        assert_eq!(reply["id"], 0, "{reply}");
        assert!(reply["result"].is_object(), "{reply}");
        peer.send(json!({"jsonrpc":"2.0","method":"initialized","params":{}}))
            .await;
        peer
    }

    pub async fn send(&mut self, message: Value) {
        self.send_raw(&message.to_string()).await;
    }

    pub async fn send_raw(&mut self, body: &str) {
        let frame = format!("Content-Length: {}\r\n\r\n{body}", body.len());
        let writer = self.writer.as_mut().expect("still open");
        writer.write_all(frame.as_bytes()).await.unwrap();
    }

    pub async fn request(&mut self, id: Value, method: &str, params: Value) {
        self.send(json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}))
            .await;
    }

    pub async fn cancel(&mut self, id: Value) {
        self.send(json!({"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":id}}))
            .await;
    }

    /// The next frame's body, as it was on the wire.
    pub async fn recv_raw(&mut self) -> String {
        let reader = self.reader.as_mut().expect("not read in the background");
        read_frame(reader)
            .await
            .expect("the server closed the connection")
    }

    /// From now on, read every frame on a task of its own: each body, parsed, arrives on the returned channel
    /// (which ends when the server closes the connection).
    pub fn read_in_background(&mut self) -> tokio::sync::mpsc::UnboundedReceiver<Value> {
        let mut reader = self.reader.take().expect("read once in the background");
        let (frames, received) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Some(body) = read_frame(&mut reader).await {
                let _ = frames.send(serde_json::from_str(&body).unwrap());
            }
        });
        received
    }

    pub async fn recv(&mut self) -> Value {
        serde_json::from_str(&self.recv_raw().await).unwrap()
    }

    /// Close the client's writing side (the server sees EOF).
    pub async fn close(&mut self) {
        if let Some(mut writer) = self.writer.take() {
            writer.shutdown().await.unwrap();
        }
    }

    /// Nothing more arrives before `wait` passes.
    pub async fn expect_silence(&mut self, wait: Duration) {
        let mut byte = [0u8; 1];
        let reader = self.reader.as_mut().expect("not read in the background");
        let read = tokio::time::timeout(wait, reader.read(&mut byte)).await;
        assert!(
            read.is_err() || matches!(read, Ok(Ok(0))),
            "unexpected bytes from the server"
        );
    }
}

/// The next frame's body, or `None` at the end of the stream.
async fn read_frame(reader: &mut BufReader<ReadHalf<DuplexStream>>) -> Option<String> {
    let mut length = None;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).await.unwrap() == 0 {
            return None;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some(value) = line.strip_prefix("Content-Length: ") {
            length = Some(value.parse::<usize>().unwrap());
        }
    }
    let mut body = vec![0; length.expect("a Content-Length header")];
    reader.read_exact(&mut body).await.unwrap();
    Some(String::from_utf8(body).unwrap())
}

/// Let the server's tasks run (under a paused clock, time advances only when every task waits).
pub async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}
