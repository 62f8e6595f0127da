//! The client side (figure 12): our [`Peer`], the handle that sends requests to the other side of a connection.
//!
//! A peer here is what a transport's connection gives: [`Server::with_stack`]`(CancelStack::lsp(), handler)` over
//! one end of a Unix socket pair, its [`Server::peer`] sending through the connection and the driver handing it the
//! replies it reads. Three measures:
//! - [`pending_bytes`]: heap bytes per outgoing call waiting for a reply the other side never sends;
//! - [`calls_per_second`]: outgoing calls completed per second against a server that answers at once;
//! - [`cascade_latency`]: a request whose handler waits on an outgoing call through its context's peer
//!   ([`CascadeLayer`](tower_cancel::CascadeLayer)) is cancelled by its client; the time from that cancel written
//!   to the outgoing call's cancel read by the other side.

use std::{
    io,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use futures_util::{stream::FuturesUnordered, FutureExt, StreamExt};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::{
    io::{AsyncWrite, AsyncWriteExt},
    net::{unix::OwnedReadHalf, UnixStream},
    task::JoinHandle,
};
use tokio_util::codec::FramedRead;
use tower::service_fn;
use tower_cancel::{BoxError, CancelStack, ErrorObject, Peer, Request};
use tower_cancel_io::{ContentLengthCodec, Framing, Server};

use crate::{client::HELD_MS, memory, ours::LSP_BARE};

/// How long one cascade may take before the harness counts it as missed.
const PATIENCE: Duration = Duration::from_secs(5);

/// Our end of a connection, served by the driver with the LSP stack over a handler that serves nothing (the other
/// side sends no requests here): its peer (with its default timeout of 60 s, or with none when `timeout` is false),
/// and the task serving it.
fn our_end(stream: UnixStream, timeout: bool) -> (Peer, JoinHandle<io::Result<()>>) {
    let handler = service_fn(|req: Request| async move {
        Err::<Value, _>(ErrorObject::method_not_found(req.method()))
    });
    let server = Server::with_stack(CancelStack::lsp(), handler);
    let peer = server
        .peer()
        .expect("the stack's dialect gives the connection a peer");
    let peer = if timeout {
        peer
    } else {
        peer.without_default_timeout()
    };
    let (read, write) = stream.into_split();
    let serving = tokio::spawn(server.serve(read, write, Framing::ContentLength));
    (peer, serving)
}

/// Heap bytes per outgoing call pending: `count` calls sent to a side that reads them and never answers, each
/// call's future held in a `FuturesUnordered` and polled once (its waker registered, as an awaited call's is), the
/// whole process's heap growth from before the first to the other side having read them all, divided by their
/// number. One call is made and kept before counting starts. It means something only in a process whose allocator
/// counts: the `heap_bytes` binary ([`crate::bytes`]). With `timeout`, each call has the peer's default timeout
/// (its timer is made at the first poll).
pub async fn pending_bytes(count: u64, timeout: bool) -> io::Result<f64> {
    let (ours, theirs) = UnixStream::pair()?;
    let read = Arc::new(AtomicU64::new(0));
    let sink = tokio::spawn(sink(theirs, read.clone()));
    let (peer, serving) = our_end(ours, timeout);
    let mut calls = FuturesUnordered::new();
    calls.push(peer.request("bench/work", json!({ "ms": HELD_MS, "tag": 0 })));
    let before = memory::in_use();
    for tag in 1..=count {
        calls.push(peer.request("bench/work", json!({ "ms": HELD_MS, "tag": tag })));
    }
    // Every call polled once; none is ready.
    assert!(calls.next().now_or_never().is_none(), "no call is answered");
    while read.load(Ordering::Acquire) < count + 1 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let bytes = (memory::in_use() - before) as f64 / count as f64;
    drop(calls);
    sink.abort();
    let _ = serving.await;
    Ok(bytes)
}

/// The other side of [`pending_bytes`]: reads frames, counts them, answers nothing.
async fn sink(stream: UnixStream, read: Arc<AtomicU64>) {
    let mut frames = FramedRead::new(stream, ContentLengthCodec::default());
    while let Some(Ok(_)) = frames.next().await {
        read.fetch_add(1, Ordering::Release);
    }
}

/// Outgoing calls completed per second over one connection, at most `window` in flight, `total` in all, against
/// the bare driver answering `bench/work` (ms 0) at once: the same server as figure 2's reference, so that the
/// harness's raw client against it ([`crate::workload::throughput`]) is the measure to compare with. With
/// `timeout`, each call has the peer's default timeout.
pub async fn calls_per_second(window: usize, total: u64, timeout: bool) -> io::Result<f64> {
    let (ours, theirs) = UnixStream::pair()?;
    let (read, write) = tokio::io::split(theirs);
    let server = tokio::spawn((LSP_BARE.serve)(Box::pin(read), Box::pin(write), window));
    let (peer, serving) = our_end(ours, timeout);
    let init = json!({ "processId": null, "rootUri": null, "capabilities": {} });
    peer.request("initialize", init)
        .await
        .map_err(io::Error::other)?;
    let start = Instant::now();
    let mut calls = FuturesUnordered::new();
    let (mut sent, mut done) = (0, 0);
    while done < total {
        while calls.len() < window && sent < total {
            calls.push(peer.request("bench/work", json!({ "ms": 0, "tag": 0 })));
            sent += 1;
        }
        let answer = calls.next().await.expect("calls are in flight");
        answer.map_err(io::Error::other)?;
        done += 1;
    }
    let per_second = total as f64 / start.elapsed().as_secs_f64();
    drop(peer);
    server.abort();
    let _ = serving.await;
    Ok(per_second)
}

/// One round of cascades.
#[derive(Clone, Debug, Default)]
pub struct Cascades {
    /// From the client's cancel written to the outgoing call's cancel read, one per cascade.
    pub outgoing_cancel: Vec<Duration>,
    /// From the same cancel written to the cancelled request's reply read.
    pub reply: Vec<Duration>,
    /// Cascades where either did not come within the patience.
    pub missed: usize,
}

/// `samples` cascades, one at a time. The client sends `bench/nested`; its handler, behind `CancelStack::lsp()` on
/// our driver, calls the client back through its context's peer (`bench/held`, which the client never answers);
/// once the client has read that call, it cancels `bench/nested` and the clock starts, just before the cancel frame
/// is written. It stops when the client reads the `$/cancelRequest` for the outgoing call, and, for the second
/// column, the -32800 reply to its own request.
pub async fn cascade_latency(samples: usize) -> io::Result<Cascades> {
    let (client, server) = UnixStream::pair()?;
    let service = Server::with_stack(CancelStack::lsp(), service_fn(nested));
    let (read, write) = server.into_split();
    let serving = tokio::spawn(service.serve(read, write, Framing::ContentLength));
    let (read, mut write) = client.into_split();
    let mut frames = FramedRead::new(read, ContentLengthCodec::default());
    let init = json!({ "processId": null, "rootUri": null, "capabilities": {} });
    send(
        &mut write,
        &json!({ "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init }),
    )
    .await?;
    while next(&mut frames).await?.id != Some(json!(0)) {}
    send(
        &mut write,
        &json!({ "jsonrpc": "2.0", "method": "initialized", "params": {} }),
    )
    .await?;
    let mut cascades = Cascades {
        outgoing_cancel: Vec::with_capacity(samples),
        reply: Vec::with_capacity(samples),
        missed: 0,
    };
    for id in 1..=samples as u64 {
        send(
            &mut write,
            &json!({ "jsonrpc": "2.0", "id": id, "method": "bench/nested", "params": {} }),
        )
        .await?;
        let outgoing = loop {
            let frame = next(&mut frames).await?;
            if frame.method.as_deref() == Some("bench/held") {
                break frame.id.expect("a request");
            }
        };
        let cancel = frame_bytes(
            &json!({ "jsonrpc": "2.0", "method": "$/cancelRequest", "params": { "id": id } }),
        );
        let start = Instant::now();
        write.write_all(&cancel).await?;
        let (mut cancel_read, mut reply_read) = (None, None);
        let waited = tokio::time::timeout(PATIENCE, async {
            while cancel_read.is_none() || reply_read.is_none() {
                let frame = next(&mut frames).await?;
                match frame.method.as_deref() {
                    Some("$/cancelRequest") if frame.params["id"] == outgoing => {
                        cancel_read = Some(start.elapsed());
                    }
                    None if frame.id == Some(json!(id)) => reply_read = Some(start.elapsed()),
                    _ => {}
                }
            }
            io::Result::Ok(())
        })
        .await;
        match (waited, cancel_read, reply_read) {
            (Ok(Ok(())), Some(cancel), Some(reply)) => {
                cascades.outgoing_cancel.push(cancel);
                cascades.reply.push(reply);
            }
            (Ok(Err(error)), ..) => return Err(error),
            _ => cascades.missed += 1,
        }
    }
    drop(write);
    drop(frames);
    let _ = tokio::time::timeout(Duration::from_secs(10), serving).await;
    Ok(cascades)
}

/// The handler of [`cascade_latency`]'s server: `bench/nested` waits on a call to the client through its context's
/// peer (a child of the request: cancelled, and the client told, when the request is).
async fn nested(req: Request) -> Result<Value, BoxError> {
    match req.method() {
        "initialize" => Ok(json!({ "capabilities": {} })),
        "bench/nested" => {
            let client = req.peer().ok_or("no peer for the request")?;
            drop(req);
            client.request("bench/held", json!({})).await?;
            Ok(json!("done"))
        }
        _ => Ok(Value::Null),
    }
}

/// What the client reads of a frame.
#[derive(Deserialize)]
struct Frame {
    id: Option<Value>,
    method: Option<String>,
    #[serde(default)]
    params: Value,
}

async fn next(frames: &mut FramedRead<OwnedReadHalf, ContentLengthCodec>) -> io::Result<Frame> {
    let frame = frames
        .next()
        .await
        .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))??
        .map_err(io::Error::other)?;
    serde_json::from_slice(&frame).map_err(io::Error::other)
}

fn frame_bytes(message: &Value) -> Vec<u8> {
    let body = message.to_string();
    format!("Content-Length: {}\r\n\r\n{body}", body.len()).into_bytes()
}

async fn send(write: &mut (impl AsyncWrite + Unpin), message: &Value) -> io::Result<()> {
    write.write_all(&frame_bytes(message)).await
}
