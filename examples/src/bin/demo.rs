//! The demo: an LSP-style server and a client in one process, over a real socket pair, with `Content-Length`
//! framing. The client sends requests, cancels some of them in every way that matters, and prints what happened
//! and the exact reply on the wire.
//!
//! ```text
//! cargo run -p examples --bin demo
//! ```

use std::time::{Duration, Instant};

use examples::SleepStats;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::{
    unix::{OwnedReadHalf, OwnedWriteHalf},
    UnixStream,
};
use tokio_util::codec::{FramedRead, FramedWrite};
use tower::{service_fn, ServiceBuilder};
use tower_cancel::{CancelStack, ErrorObject, PeerError, Registry, Request, TimeoutLayer};
use tower_cancel_io::{ContentLengthCodec, Framing, Server};

/// How many sleep handlers the server runs at once; the next request waits in the queue.
const CONCURRENCY: usize = 2;
const LONG_MS: u64 = 60_000;

async fn handle(stats: SleepStats, req: Request) -> Result<Value, ErrorObject> {
    match req.method() {
        "demo/sleep" => Ok(examples::sleep(&stats, req.params_as()?).await),
        "demo/stats" => Ok(stats.to_json(&req)),
        "demo/panic" => panic!("the demo handler panics on purpose"),
        other => Err(ErrorObject::method_not_found(other)),
    }
}

struct Client {
    write: FramedWrite<OwnedWriteHalf, ContentLengthCodec>,
    read: FramedRead<OwnedReadHalf, ContentLengthCodec>,
    // The server's handler counters, read in process: asking over the wire would queue behind the limit.
    handlers: SleepStats,
}

impl Client {
    /// Write one message and flush it; the instant it left.
    async fn send(&mut self, message: Value) -> Instant {
        let bytes = serde_json::to_vec(&message).expect("serializable");
        self.write.send(&bytes[..]).await.expect("server is up");
        Instant::now()
    }

    async fn request(&mut self, id: impl Into<Value>, method: &str, params: Value) -> Instant {
        let message =
            json!({ "jsonrpc": "2.0", "id": id.into(), "method": method, "params": params });
        self.send(message).await
    }

    async fn cancel(&mut self, id: impl Into<Value>) -> Instant {
        let message =
            json!({ "jsonrpc": "2.0", "method": "$/cancelRequest", "params": { "id": id.into() } });
        self.send(message).await
    }

    /// The next message from the server, and when it arrived.
    async fn receive(&mut self) -> (Reply, Instant) {
        let frame = tokio::time::timeout(Duration::from_secs(10), self.read.next())
            .await
            .expect("the server answers within 10 s")
            .expect("the server is still connected")
            .expect("readable")
            .expect("a whole frame");
        let at = Instant::now();
        let reply = Reply {
            json: serde_json::from_slice(&frame).expect("JSON"),
            wire: String::from_utf8_lossy(&frame).into_owned(),
        };
        (reply, at)
    }

    /// Ask for the counters. The stats reply must be the next message: anything else would be a reply nobody
    /// should have sent.
    async fn stats(&mut self) -> Value {
        self.request("stats", "demo/stats", json!({})).await;
        let (reply, _) = self.receive().await;
        assert_eq!(
            reply.json["id"], "stats",
            "unexpected message before the stats: {}",
            reply.wire
        );
        reply.json["result"].clone()
    }

    fn started(&self) -> u64 {
        self.handlers.snapshot().started
    }

    async fn wait_until_started(&self, started: u64) {
        while self.started() < started {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

/// A message as it was on the wire, and parsed.
struct Reply {
    json: Value,
    wire: String,
}

/// Rows 10 and 11: the same server stack on a second connection, and a client that sends through a [`Peer`](tower_cancel::Peer): the
/// peer sends the cancels itself, when a call is dropped or times out.
async fn peer_rows(stats: &SleepStats, rows: &mut Vec<Row>) {
    let server_stats = stats.clone();
    let service = ServiceBuilder::new()
        .layer(CancelStack::lsp())
        .service(service_fn(move |req| handle(server_stats.clone(), req)));
    let (server_end, client_end) = UnixStream::pair().expect("a socket pair");
    let server = Server::new(service);
    let server_registry = server.registry().clone();
    tokio::spawn(async move {
        let (read, write) = server_end.into_split();
        server.serve(read, write, Framing::ContentLength).await
    });
    let client_handler = service_fn(|req: Request| async move {
        Err::<Value, _>(ErrorObject::method_not_found(req.method()))
    });
    let client = Server::with_stack(CancelStack::lsp(), client_handler);
    let peer = client.peer().expect("the stack's dialect gives a peer");
    tokio::spawn(async move {
        let (read, write) = client_end.into_split();
        client.serve(read, write, Framing::ContentLength).await
    });
    let wait_cancelled = |cancelled: u64| async move {
        while server_registry.stats().cancelled < cancelled {
            tokio::time::sleep(Duration::from_micros(50)).await;
        }
    };

    // 10. The caller drops its call: the peer sends `$/cancelRequest` and the server stops the handler.
    let started = stats.snapshot().started;
    let call = peer.request("demo/sleep", json!({ "ms": LONG_MS }));
    while stats.snapshot().started == started {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let dropped = Instant::now();
    drop(call);
    wait_cancelled(1).await;
    let stopped = Instant::now();
    rows.push(Row {
        request: "10 peer: sleep 60 s, dropped".into(),
        happened: format!(
            "cancel-on-drop: $/cancelRequest sent, handler stopped ({} cancel sent)",
            peer.stats().cancels_sent
        ),
        wire: "(the caller is gone: the -32800 is dropped as late)".into(),
        micros: micros(dropped, stopped),
    });

    // 11. A call with a timeout: the peer sends the cancel and, as LSP does, waits for the server's -32800.
    let sent = Instant::now();
    let outcome = peer
        .request("demo/sleep", json!({ "ms": LONG_MS }))
        .timeout(Duration::from_millis(50))
        .await;
    rows.push(Row {
        request: "11 peer: sleep 60 s, .timeout(50 ms)".into(),
        happened: format!(
            "timed out after {} ms: cancel sent, server's answer awaited",
            sent.elapsed().as_millis()
        ),
        wire: match outcome {
            Err(PeerError::Rejected(error)) => serde_json::to_string(&error).expect("serializable"),
            other => format!("unexpected: {other:?}"),
        },
        micros: None,
    });
    let left = peer.stats();
    assert_eq!(left.pending, 0, "the peer's pending table ends empty");
}

struct Row {
    request: String,
    happened: String,
    wire: String,
    micros: Option<u128>,
}

fn print_table(rows: &[Row]) {
    println!(
        "{:<28} {:<52} {:>9}  reply on the wire",
        "request", "what happened", "µs"
    );
    println!("{}", "-".repeat(150));
    for row in rows {
        let micros = row.micros.map_or("-".to_owned(), |m| m.to_string());
        println!(
            "{:<28} {:<52} {:>9}  {}",
            row.request, row.happened, micros, row.wire
        );
    }
}

fn micros(from: Instant, to: Instant) -> Option<u128> {
    Some(to.duration_since(from).as_micros())
}

#[tokio::main]
async fn main() {
    // Row 9 panics on purpose; the stack turns it into -32603. Keep the report to one line.
    std::panic::set_hook(Box::new(|info| eprintln!("(a handler panicked: {info})")));
    let stats = SleepStats::default();
    let server_stats = stats.clone();
    // A request may carry its own timeout in `params._meta.timeoutMs`.
    let timeouts = TimeoutLayer::none().from_meta("timeoutMs");
    let service = ServiceBuilder::new()
        .layer(CancelStack::lsp().timeouts(timeouts))
        .concurrency_limit(CONCURRENCY)
        .service(service_fn(move |req| handle(server_stats.clone(), req)));
    let (server_end, client_end) = UnixStream::pair().expect("a socket pair");
    let server = Server::new(service);
    let registry: Registry = server.registry().clone();
    let server_task = tokio::spawn(async move {
        let (read, write) = server_end.into_split();
        server.serve(read, write, Framing::ContentLength).await
    });

    let (read, write) = client_end.into_split();
    let mut client = Client {
        write: FramedWrite::new(write, ContentLengthCodec::new()),
        read: FramedRead::new(read, ContentLengthCodec::new()),
        handlers: stats.clone(),
    };
    let mut rows = Vec::new();

    // 1. A request that is not cancelled.
    client.request(1, "demo/sleep", json!({ "ms": 20 })).await;
    let (reply, _) = client.receive().await;
    rows.push(Row {
        request: "1  sleep 20 ms".into(),
        happened: "completed normally".into(),
        wire: reply.wire,
        micros: None,
    });

    // 2. Cancelled while its handler runs.
    client
        .request(2, "demo/sleep", json!({ "ms": LONG_MS }))
        .await;
    client.wait_until_started(2).await;
    let sent = client.cancel(2).await;
    let (reply, at) = client.receive().await;
    let stopped = client.stats().await;
    rows.push(Row {
        request: "2  sleep 60 s".into(),
        happened: format!(
            "cancelled while running; handler stopped (cancelled={})",
            stopped["cancelled"]
        ),
        wire: reply.wire,
        micros: micros(sent, at),
    });

    // 3. The cancel arrives before its request: the request starts out cancelled.
    let before = client.started();
    let sent = client.cancel(3).await;
    client
        .request(3, "demo/sleep", json!({ "ms": LONG_MS }))
        .await;
    let (reply, at) = client.receive().await;
    let after = client.started();
    rows.push(Row {
        request: "3  sleep 60 s".into(),
        happened: format!("cancel sent first: never ran (started {before} -> {after})"),
        wire: reply.wire,
        micros: micros(sent, at),
    });

    // 4. Cancelled after it completed: the normal reply stands, the cancel is ignored.
    client.request(4, "demo/sleep", json!({ "ms": 5 })).await;
    let (reply, _) = client.receive().await;
    client.cancel(4).await;
    client.stats().await; // the next message is the stats reply: the late cancel got no reply
    rows.push(Row {
        request: "4  sleep 5 ms".into(),
        happened: "cancel after completion: normal reply, cancel ignored".into(),
        wire: reply.wire,
        micros: None,
    });

    // 5. A cancel for an id nobody sent.
    client.cancel(999).await;
    client.stats().await;
    rows.push(Row {
        request: "-  cancel 999".into(),
        happened: "unknown id: ignored, no reply".into(),
        wire: "(nothing)".into(),
        micros: None,
    });

    // 6. A request queued behind the concurrency limit, cancelled before it got a slot.
    let started = client.started();
    client
        .request(61, "demo/sleep", json!({ "ms": LONG_MS }))
        .await;
    client
        .request(62, "demo/sleep", json!({ "ms": LONG_MS }))
        .await;
    client.wait_until_started(started + 2).await;
    client
        .request(63, "demo/sleep", json!({ "ms": LONG_MS }))
        .await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let sent = client.cancel(63).await;
    let (reply, at) = client.receive().await;
    let now_started = client.started();
    rows.push(Row {
        request: format!("63 sleep 60 s (limit {CONCURRENCY})"),
        happened: format!(
            "queued behind 61, 62; cancelled: never ran (started +{})",
            now_started - started
        ),
        wire: reply.wire,
        micros: micros(sent, at),
    });
    for id in [61, 62] {
        let sent = client.cancel(id).await;
        let (reply, at) = client.receive().await;
        rows.push(Row {
            request: format!("{id} sleep 60 s"),
            happened: "cancelled while running".into(),
            wire: reply.wire,
            micros: micros(sent, at),
        });
    }

    // 7. The number 1 and the string "1" are different requests.
    client
        .request("1", "demo/sleep", json!({ "ms": LONG_MS }))
        .await;
    client.request(1, "demo/sleep", json!({ "ms": 5 })).await;
    client.wait_until_started(now_started + 2).await;
    let sent = client.cancel("1").await;
    let first = client.receive().await;
    let second = client.receive().await;
    let ((cancelled, at), (completed, _)) = if first.0.json["id"] == "1" {
        (first, second)
    } else {
        (second, first)
    };
    rows.push(Row {
        request: "\"1\" sleep 60 s".into(),
        happened: "cancel of string id \"1\"".into(),
        wire: cancelled.wire,
        micros: micros(sent, at),
    });
    rows.push(Row {
        request: "1  sleep 5 ms (same time)".into(),
        happened: "number id 1 untouched by it".into(),
        wire: completed.wire,
        micros: None,
    });

    // 8. A request with its own deadline: the timeout cancels it like a peer's cancel would.
    let before = client.handlers.snapshot().cancelled;
    let sent = client
        .request(
            "t",
            "demo/sleep",
            json!({ "ms": LONG_MS, "_meta": { "timeoutMs": 50 } }),
        )
        .await;
    let (reply, at) = client.receive().await;
    let stopped = client.handlers.snapshot();
    rows.push(Row {
        request: "t  sleep 60 s, timeout 50 ms".into(),
        happened: format!(
            "timed out after {} ms: handler stopped (cancelled {before} -> {})",
            at.duration_since(sent).as_millis(),
            stopped.cancelled
        ),
        wire: reply.wire,
        micros: None,
    });

    // 9. A handler that panics: -32603, and the connection goes on.
    client.request(9, "demo/panic", json!({})).await;
    let (reply, _) = client.receive().await;
    rows.push(Row {
        request: "9  panic".into(),
        happened: "handler panicked: internal error, entry removed".into(),
        wire: reply.wire,
        micros: None,
    });

    // 10, 11. The client side: a second connection whose client sends through a Peer.
    peer_rows(&stats, &mut rows).await;

    // 12. The connection closes with a request in flight: it is cancelled (reason Disconnect).
    let started_now = client.started();
    client
        .request(12, "demo/sleep", json!({ "ms": LONG_MS }))
        .await;
    client.wait_until_started(started_now + 1).await;
    drop(client);
    let served = server_task.await.expect("the server task ran");
    rows.push(Row {
        request: "12 sleep 60 s".into(),
        happened: format!(
            "connection closed: cancelled, serve returned {:?}",
            served.map_err(|e| e.kind())
        ),
        wire: "(the peer is gone)".into(),
        micros: None,
    });

    print_table(&rows);
    let registry_stats = registry.stats();
    println!();
    println!(
        "registry at the end: {} in flight, {} registered, {} completed, {} cancelled",
        registry_stats.in_flight,
        registry_stats.registered,
        registry_stats.completed,
        registry_stats.cancelled
    );
    let handlers = stats.snapshot();
    println!(
        "sleep handlers: {} started, {} completed, {} stopped by a cancel",
        handlers.started, handlers.completed, handlers.cancelled
    );
    assert_eq!(registry_stats.in_flight, 0, "the registry must end empty");
}
