//! Many connections to one server (figure 11): what an idle connection costs, and whether many idle ones slow the
//! busy ones.
//!
//! One process, one runtime: every connection's serve future is a task of its own on the runtime, as a server's
//! accept loop spawns them, over a Unix socket pair (so the kernel holds the socket buffers, not the heap). An idle
//! connection has been initialized (`initialize`, its reply, `initialized`) and has served one trivial request, as
//! a connection an editor opened and left does; then nothing is in flight on it and its client writes nothing more.
//! The idle connections' client side is a bare socket ([`Idle`]), not the harness's [`Client`](crate::client::Client)
//! (whose 1 MiB write buffer would swamp the figure).
//!
//! Every connection, idle or busy, is served with the concurrency limit of the busy work (the peers that have one
//! set it to [`WINDOW`]): a server configures its connections alike.

use std::{
    io,
    time::{Duration, Instant},
};

use serde_json::{json, Value};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::UnixStream,
    task::JoinHandle,
};

use crate::{
    client::{Shape, Transport},
    memory,
    ours::LSP_STACK,
    peers,
    target::{BoxRead, BoxWrite, Target},
    workload,
};

/// The targets of figure 11: ours, the hand-written baseline (both variants), the two LSP peers at the work's need.
pub const TARGETS: [Target; 5] = [
    LSP_STACK,
    peers::BASELINE_SPAWNED,
    peers::BASELINE_INLINE,
    peers::TOWER_LSP,
    peers::ASYNC_LSP,
];

/// How many connections are busy.
pub const BUSY: usize = 10;

/// Requests in flight on each busy connection.
pub const WINDOW: usize = 64;

/// An idle connection: the client's end of the socket, and the task serving the other end.
#[derive(Debug)]
pub struct Idle {
    stream: UnixStream,
    server: JoinHandle<()>,
}

impl Idle {
    /// Connect to `target` on a new socket pair, initialize, have one trivial request answered, then leave it idle.
    pub async fn open(target: &Target) -> io::Result<Self> {
        let (client, server) = UnixStream::pair()?;
        let (read, write) = tokio::io::split(server);
        let (read, write): (BoxRead, BoxWrite) = (Box::pin(read), Box::pin(write));
        let server = tokio::spawn((target.serve)(read, write, WINDOW));
        let mut idle = Self {
            stream: client,
            server,
        };
        let init = json!({ "processId": null, "rootUri": null, "capabilities": {} });
        idle.write(&json!({ "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init }))
            .await?;
        idle.read_one().await?;
        idle.write(&json!({ "jsonrpc": "2.0", "method": "initialized", "params": {} }))
            .await?;
        idle.write(&json!({ "jsonrpc": "2.0", "id": 1, "method": "bench/work", "params": { "ms": 0, "tag": 0 } }))
            .await?;
        idle.read_one().await?;
        Ok(idle)
    }

    async fn write(&mut self, message: &Value) -> io::Result<()> {
        let body = message.to_string();
        let frame = format!("Content-Length: {}\r\n\r\n{body}", body.len());
        self.stream.write_all(frame.as_bytes()).await
    }

    /// Read one whole frame (the only one the server sends at that point) into a buffer dropped after.
    async fn read_one(&mut self) -> io::Result<()> {
        let mut buffer = Vec::with_capacity(256);
        loop {
            if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                let length = std::str::from_utf8(&buffer[..end])
                    .ok()
                    .and_then(|headers| {
                        headers
                            .lines()
                            .find_map(|l| l.strip_prefix("Content-Length: "))
                    })
                    .and_then(|n| n.trim().parse::<usize>().ok())
                    .ok_or_else(|| io::Error::other("a frame without Content-Length"))?;
                if buffer.len() >= end + 4 + length {
                    return Ok(());
                }
            }
            if self.stream.read_buf(&mut buffer).await? == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        }
    }

    /// Close the client's end and wait up to `patience` for the server to return.
    pub async fn close(self, patience: Duration) {
        drop(self.stream);
        let mut server = self.server;
        if tokio::time::timeout(patience, &mut server).await.is_err() {
            server.abort();
        }
    }
}

/// Open `count` idle connections to `target`.
pub async fn open_idle(target: &Target, count: usize) -> io::Result<Vec<Idle>> {
    let mut idle = Vec::with_capacity(count);
    for _ in 0..count {
        idle.push(Idle::open(target).await?);
    }
    Ok(idle)
}

/// Close every idle connection.
pub async fn close_idle(idle: Vec<Idle>) {
    for connection in idle {
        connection.close(Duration::from_secs(10)).await;
    }
}

/// Heap bytes per idle connection to `target`: the whole process's heap growth over opening `count` more, divided
/// by their number. One connection is opened and kept before counting starts, so that what the first connection
/// alone costs (a target's statics, the runtime's first registrations) is not spread over the rest. It means
/// something only in a process whose allocator counts: the `heap_bytes` binary ([`crate::bytes`]).
pub async fn idle_bytes(target: &Target, count: usize) -> io::Result<f64> {
    let first = Idle::open(target).await?;
    let before = memory::in_use();
    let idle = open_idle(target, count).await?;
    let bytes = (memory::in_use() - before) as f64 / count as f64;
    close_idle(idle).await;
    first.close(Duration::from_secs(10)).await;
    Ok(bytes)
}

/// Requests per second over [`BUSY`] connections to `target` together, each with [`WINDOW`] in flight and
/// `requests_each` requests, while `idle` idle connections to the same target are open (opened before the clock
/// starts, closed after it stops). The clock runs from the busy connections' start to the last one's end.
pub async fn busy_throughput(target: Target, idle: usize, requests_each: u64) -> io::Result<f64> {
    let idle = open_idle(&target, idle).await?;
    let start = Instant::now();
    let busy: Vec<_> = (0..BUSY)
        .map(|_| {
            tokio::spawn(async move {
                workload::throughput(
                    &target,
                    Transport::Unix,
                    WINDOW,
                    requests_each,
                    None,
                    Shape::default(),
                )
                .await
            })
        })
        .collect();
    for connection in busy {
        connection.await.map_err(io::Error::other)??;
    }
    let per_second = (BUSY as u64 * requests_each) as f64 / start.elapsed().as_secs_f64();
    close_idle(idle).await;
    Ok(per_second)
}
