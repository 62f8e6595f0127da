//! Where a connection's replies are written: `Server::serve` (and `serve_with`) runs the writer on a tokio task of
//! its own, stopped with the `serve` future; `serve_local_with` polls a writer that cannot be sent beside the read
//! loop. Over a real in-memory duplex, with a writer that reports the task of each of its writes and its drop.

use std::{
    io,
    pin::Pin,
    rc::Rc,
    sync::{Arc, Mutex},
    task::{Context, Poll},
    time::Duration,
};

use serde_json::{json, Value};
use tokio::{
    io::{AsyncBufReadExt, AsyncWrite, AsyncWriteExt, BufReader, DuplexStream, WriteHalf},
    sync::Notify,
    task,
};
use tower::{service_fn, Layer};
use tower_cancel::{BoxError, CancelStack, Request};
use tower_cancel_io::{Framing, NdjsonCodec, Server};

/// How long a test waits for anything before it fails: never what ends a passing test.
const PATIENCE: Duration = Duration::from_secs(10);

/// What the server's writer saw.
#[derive(Clone, Default)]
struct Seen {
    /// The task of each `poll_write`.
    tasks: Arc<Mutex<Vec<Option<task::Id>>>>,
    /// Set, and notified, when the writer is dropped.
    dropped: Arc<Mutex<bool>>,
    changed: Arc<Notify>,
}

impl Seen {
    async fn until_dropped(&self) {
        tokio::time::timeout(PATIENCE, async {
            loop {
                let changed = self.changed.notified();
                if *self.dropped.lock().unwrap() {
                    return;
                }
                changed.await;
            }
        })
        .await
        .expect("the writer was never dropped");
    }
}

/// The server's end of the duplex, recording the task of every write and its own drop. `_local` makes it `!Send`
/// when it holds an `Rc`.
struct Recording<L> {
    inner: WriteHalf<DuplexStream>,
    seen: Seen,
    panics: bool,
    _local: L,
}

impl<L: Unpin> AsyncWrite for Recording<L> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        assert!(!self.panics, "the writer failed");
        self.seen.tasks.lock().unwrap().push(task::try_id());
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl<L> Drop for Recording<L> {
    fn drop(&mut self) {
        *self.seen.dropped.lock().unwrap() = true;
        self.seen.changed.notify_waiters();
    }
}

/// The MCP stack around a handler that answers with the request's method.
fn echo_server() -> Server<
    impl tower::Service<
            Request,
            Response = Option<tower_cancel::Response>,
            Error = std::convert::Infallible,
            Future: Send,
        > + Send
        + 'static,
> {
    let service = CancelStack::mcp().layer(service_fn(|req: Request| async move {
        Ok::<_, BoxError>(json!({ "method": req.method() }))
    }));
    Server::new(service)
}

/// A client end: sends one message per line, reads one per line.
struct Client {
    lines: tokio::io::Lines<BufReader<tokio::io::ReadHalf<DuplexStream>>>,
    write: WriteHalf<DuplexStream>,
}

impl Client {
    async fn send(&mut self, message: Value) {
        let mut line = message.to_string();
        line.push('\n');
        self.write.write_all(line.as_bytes()).await.unwrap();
    }

    async fn receive(&mut self) -> Value {
        let line = tokio::time::timeout(PATIENCE, self.lines.next_line())
            .await
            .expect("no reply in time")
            .unwrap()
            .expect("the connection closed");
        serde_json::from_str(&line).unwrap()
    }
}

/// A duplex: the client's end, and the server's read half and recording write half.
fn connect<L>(
    local: L,
    panics: bool,
) -> (
    Client,
    tokio::io::ReadHalf<DuplexStream>,
    Recording<L>,
    Seen,
) {
    let (client, server_end) = tokio::io::duplex(64 * 1024);
    let (read, write) = tokio::io::split(server_end);
    let seen = Seen::default();
    let writer = Recording {
        inner: write,
        seen: seen.clone(),
        panics,
        _local: local,
    };
    let (client_read, client_write) = tokio::io::split(client);
    let client = Client {
        lines: BufReader::new(client_read).lines(),
        write: client_write,
    };
    (client, read, writer, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_are_written_by_a_task_other_than_the_connections() {
    let (mut client, read, writer, seen) = connect((), false);
    let serve = tokio::spawn(echo_server().serve(read, writer, Framing::Ndjson));
    client
        .send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .await;
    assert_eq!(
        client.receive().await,
        json!({"jsonrpc": "2.0", "id": 1, "result": {"method": "tools/list"}})
    );
    let tasks = seen.tasks.lock().unwrap().clone();
    assert!(!tasks.is_empty());
    for task in tasks {
        let task = task.expect("written inside a tokio task");
        assert_ne!(
            task,
            serve.id(),
            "the reply was written on the connection's task"
        );
    }
    drop(client);
    tokio::time::timeout(PATIENCE, serve)
        .await
        .expect("the connection did not end")
        .unwrap()
        .unwrap();
    assert!(*seen.dropped.lock().unwrap());
}

#[tokio::test]
async fn dropping_the_serve_future_stops_its_writer_even_while_the_outbox_lives_on() {
    let (mut client, read, writer, seen) = connect((), false);
    let server = echo_server();
    // Something that can still queue messages (a handler's peer would): the writer must not wait for it.
    let outbox = server.connection().outbox().clone();
    let serve = tokio::spawn(server.serve(read, writer, Framing::Ndjson));
    client
        .send(json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
        .await;
    assert_eq!(
        client.receive().await,
        json!({"jsonrpc": "2.0", "id": 1, "result": {"method": "ping"}})
    );
    serve.abort();
    seen.until_dropped().await;
    drop(outbox);
}

#[tokio::test]
async fn a_writer_that_cannot_be_sent_is_served_beside_the_read_loop() {
    let (mut client, read, writer, seen) = connect(Rc::new(()), false);
    let codec = NdjsonCodec::with_max_frame_size(1 << 20);
    let serving = echo_server().serve_local_with(read, writer, codec);
    let talk = async {
        client
            .send(json!({"jsonrpc": "2.0", "id": "a", "method": "tools/list"}))
            .await;
        let reply = client.receive().await;
        drop(client);
        reply
    };
    let (served, reply) = tokio::join!(serving, talk);
    served.unwrap();
    assert_eq!(
        reply,
        json!({"jsonrpc": "2.0", "id": "a", "result": {"method": "tools/list"}})
    );
    assert!(*seen.dropped.lock().unwrap());
}

#[tokio::test]
async fn a_panic_of_the_writer_reaches_the_serve_future() {
    let (mut client, read, writer, _seen) = connect((), true);
    let serve = tokio::spawn(echo_server().serve(read, writer, Framing::Ndjson));
    client
        .send(json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
        .await;
    let ended = tokio::time::timeout(PATIENCE, serve)
        .await
        .expect("the connection did not end");
    let panic = ended.expect_err("the serve future returned").into_panic();
    assert_eq!(
        panic.downcast_ref::<&str>(),
        Some(&"the writer failed"),
        "another panic than the writer's"
    );
}
