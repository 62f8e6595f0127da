//! What tower-cancel's `metrics` feature exports, as Prometheus scrapes it. An LSP server runs over a real socket
//! pair with a Prometheus exporter listening on 127.0.0.1 (a free port); a client completes, cancels, times out
//! and disconnects a few requests with raw frames; then the exporter's `/metrics` page is fetched over HTTP and its
//! `tower_cancel_` lines printed. It ends by itself within a few seconds.
//!
//! ```text
//! cargo run -p examples --bin metrics
//! ```

use std::{
    io,
    net::{Ipv4Addr, SocketAddr, TcpListener},
    time::Duration,
};

use examples::SleepStats;
use futures_util::{SinkExt, StreamExt};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
use serde_json::{json, Value};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{
        unix::{OwnedReadHalf, OwnedWriteHalf},
        TcpStream, UnixStream,
    },
};
use tokio_util::codec::{FramedRead, FramedWrite};
use tower::{service_fn, ServiceBuilder};
use tower_cancel::{metrics, CancelStack, ErrorObject, Registry, Request, TimeoutLayer};
use tower_cancel_io::{ContentLengthCodec, Framing, Server};

const LONG_MS: u64 = 60_000;

async fn handle(stats: SleepStats, req: Request) -> Result<Value, ErrorObject> {
    match req.method() {
        "sleep" => Ok(examples::sleep(&stats, req.params_as()?).await),
        other => Err(ErrorObject::method_not_found(other)),
    }
}

/// The client's end of the socket, speaking raw `Content-Length` frames.
struct Client {
    write: FramedWrite<OwnedWriteHalf, ContentLengthCodec>,
    read: FramedRead<OwnedReadHalf, ContentLengthCodec>,
}

impl Client {
    async fn send(&mut self, message: Value) {
        let bytes = serde_json::to_vec(&message).expect("serializable");
        self.write.send(&bytes[..]).await.expect("the server is up");
    }

    async fn sleep(&mut self, id: u64, params: Value) {
        let message = json!({ "jsonrpc": "2.0", "id": id, "method": "sleep", "params": params });
        self.send(message).await;
    }

    async fn cancel(&mut self, id: u64) {
        let message =
            json!({ "jsonrpc": "2.0", "method": "$/cancelRequest", "params": { "id": id } });
        self.send(message).await;
    }

    /// The next reply, as it was on the wire.
    async fn reply(&mut self) -> String {
        let frame = self
            .read
            .next()
            .await
            .expect("the server is still connected")
            .expect("readable")
            .expect("a whole frame");
        String::from_utf8_lossy(&frame).into_owned()
    }
}

/// A port nobody listens on now: the exporter takes an address, not a listener, so ask the system for a free
/// port and hand it over (another process could take it in between; for an example that is good enough).
fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port())
}

/// `GET /metrics` over a plain TCP connection: the page's body.
async fn scrape(addr: SocketAddr) -> io::Result<String> {
    // The exporter's listener is bound by a task of its own: give it a moment.
    let mut attempts = 0;
    let mut stream = loop {
        match TcpStream::connect(addr).await {
            Ok(stream) => break stream,
            Err(_) if attempts < 50 => {
                attempts += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(error) => return Err(error),
        }
    };
    let request = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let body = response.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    Ok(body.to_owned())
}

async fn run() -> io::Result<()> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()?));
    PrometheusBuilder::new()
        .with_http_listener(addr)
        // Buckets make the histogram a Prometheus histogram (the exporter renders a summary without them).
        .set_buckets_for_metric(
            Matcher::Full(metrics::CANCEL_TO_SETTLE_SECONDS.to_owned()),
            &[0.000_1, 0.001, 0.01, 0.1, 1.0],
        )
        .and_then(PrometheusBuilder::install)
        .map_err(io::Error::other)?;
    metrics::describe();

    let stats = SleepStats::default();
    let service = ServiceBuilder::new()
        .layer(CancelStack::lsp().timeouts(TimeoutLayer::none().from_meta("timeoutMs")))
        .service(service_fn(move |req| handle(stats.clone(), req)));
    // A small early-cancel window, so that cancels for ids that never come overflow it.
    let server = Server::new(service).with_registry(Registry::with_early_cancel_capacity(2));
    let registry = server.registry().clone();
    let (server_end, client_end) = UnixStream::pair()?;
    let serving = tokio::spawn(async move {
        let (read, write) = server_end.into_split();
        server.serve(read, write, Framing::ContentLength).await
    });
    let (read, write) = client_end.into_split();
    let mut client = Client {
        write: FramedWrite::new(write, ContentLengthCodec::new()),
        read: FramedRead::new(read, ContentLengthCodec::new()),
    };

    println!("the client, over a Unix socket pair with Content-Length frames:");
    let show = |what: &str, reply: String| println!("  {what:<37} {reply}");
    for id in 1..=3 {
        client.sleep(id, json!({ "ms": 5 })).await;
        show(&format!("request {id}, sleeps 5 ms:"), client.reply().await);
    }
    // The server reads frames in order, so the request is in flight when its cancel arrives.
    client.sleep(4, json!({ "ms": LONG_MS })).await;
    client.cancel(4).await;
    show("request 4, cancelled while it runs:", client.reply().await);
    client.cancel(5).await;
    client.sleep(5, json!({ "ms": LONG_MS })).await;
    show("request 5, cancelled before it came:", client.reply().await);
    let own_deadline = json!({ "ms": LONG_MS, "_meta": { "timeoutMs": 50 } });
    client.sleep(6, own_deadline).await;
    show("request 6, its own 50 ms deadline:", client.reply().await);
    for id in 97..=99 {
        client.cancel(id).await;
    }
    println!("  cancels for 97, 98, 99, which never come (a window of 2 remembers the last two)");
    client.sleep(7, json!({ "ms": LONG_MS })).await;
    drop(client);
    serving.await.expect("the server task ran")?;
    println!("  request 7, in flight when the client hung up");
    assert!(registry.is_empty(), "every request settled");

    println!();
    println!("GET http://{addr}/metrics, its tower_cancel_ lines:");
    let page = scrape(addr).await?;
    for line in page.lines().filter(|line| line.contains("tower_cancel_")) {
        println!("  {line}");
    }
    Ok(())
}

#[tokio::main]
async fn main() -> io::Result<()> {
    tokio::time::timeout(Duration::from_secs(10), run())
        .await
        .map_err(|_| io::Error::other("the example took more than 10 s"))?
}
