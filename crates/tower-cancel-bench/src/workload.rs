//! The end-to-end workloads, run by the same client against every target.

use std::{
    collections::VecDeque,
    io,
    time::{Duration, Instant},
};

use crate::{
    client::{Client, Shape, Transport, HELD_MS},
    memory, probe,
    target::{Protocol, Target},
};

/// How long one cancel may take before the harness counts it as never answered.
const CANCEL_PATIENCE: Duration = Duration::from_secs(5);

/// Requests per second on one connection.
#[derive(Clone, Copy, Debug)]
pub struct Throughput {
    /// Requests completed (answered, or for MCP cancelled) per second.
    pub per_second: f64,
    /// Error replies among them (the cancelled requests', on LSP).
    pub errors: u64,
}

/// Run `total` requests of `shape` with at most `window` in flight. With `cancel_every = Some(n)`, every n-th
/// request is held by its handler and cancelled right after it is sent (MCP answers nothing to those: they count as
/// done when the cancel is written).
pub async fn throughput(
    target: &Target,
    transport: Transport,
    window: usize,
    total: u64,
    cancel_every: Option<u64>,
    shape: Shape,
) -> io::Result<Throughput> {
    // At most `window` requests are in flight: a held one counts until its cancelled reply (LSP), and an MCP one is
    // cancelled before the next is sent.
    let mut client = Client::connect(target, transport, window)?.with_shape(shape);
    client.handshake().await?;
    let (mut sent, mut done, mut in_flight, mut errors) = (0u64, 0u64, 0usize, 0u64);
    let start = Instant::now();
    while done < total {
        while in_flight < window && sent < total {
            sent += 1;
            let id = sent;
            if cancel_every.is_some_and(|n| id % n == 0) {
                client.queue_work(id, HELD_MS);
                client.queue_cancel(id);
                if target.protocol == Protocol::Mcp {
                    done += 1;
                    continue;
                }
            } else {
                client.queue_work(id, 0);
            }
            in_flight += 1;
        }
        client.flush().await?;
        if in_flight == 0 {
            continue;
        }
        let mut reply = Some(client.next_reply().await?);
        while let Some(answer) = reply {
            in_flight -= 1;
            done += 1;
            errors += u64::from(answer.is_error);
            reply = client.ready_reply()?;
        }
    }
    let elapsed = start.elapsed();
    client.close(Duration::from_secs(10)).await;
    Ok(Throughput {
        per_second: total as f64 / elapsed.as_secs_f64(),
        errors,
    })
}

/// Cancel latencies with `in_flight` requests held by their handlers.
#[derive(Clone, Debug, Default)]
pub struct Latencies {
    /// One per cancel that was answered (LSP: the reply read; MCP: the handler stopped).
    pub samples: Vec<Duration>,
    /// Cancels that got no answer within the patience.
    pub missed: usize,
    /// Whether the target returned within 10 s of the connection closing with everything in flight.
    pub closed_cleanly: bool,
}

/// The most requests [`cancel_latency`] and [`held_bytes`] have in flight at once with `in_flight` held: those, and
/// one trivial request behind them (the barrier that shows they were all read).
pub fn need_when_holding(in_flight: u64) -> usize {
    in_flight as usize + 1
}

/// Hold `in_flight` requests, then cancel `samples` of them one at a time, oldest first. Each sample runs from just
/// before the cancel frame, already serialized, is written, to the cancelled reply read (MCP, which answers nothing:
/// to the handler stopped); the clock starts at the same point for every target. Each cancelled request is replaced,
/// so that the count in flight stays the same.
pub async fn cancel_latency(
    target: &Target,
    transport: Transport,
    in_flight: u64,
    samples: usize,
) -> io::Result<Latencies> {
    probe::clear();
    let mut client = Client::connect(target, transport, need_when_holding(in_flight))?;
    client.handshake().await?;
    let mut held = VecDeque::with_capacity(in_flight as usize + samples);
    let mut next_id = 1;
    for _ in 0..in_flight {
        client.queue_work(next_id, HELD_MS);
        held.push_back(next_id);
        next_id += 1;
        if client.queued() > 32 * 1024 {
            client.flush().await?;
        }
    }
    client.barrier(next_id).await?;
    next_id += 1;
    let mut latencies = Latencies {
        samples: Vec::with_capacity(samples),
        ..Latencies::default()
    };
    for _ in 0..samples {
        let id = held.pop_front().expect("requests are replaced");
        client.queue_cancel(id);
        let start = Instant::now();
        client.flush().await?;
        let answered = match target.protocol {
            Protocol::Lsp => tokio::time::timeout(CANCEL_PATIENCE, client.wait_for(id))
                .await
                .ok()
                .transpose()?
                .map(|_| start.elapsed()),
            Protocol::Mcp => probe::wait_for_stop(id, CANCEL_PATIENCE)
                .await
                .map(|stopped| stopped.saturating_duration_since(start)),
        };
        match answered {
            Some(latency) => latencies.samples.push(latency),
            None => latencies.missed += 1,
        }
        client.queue_work(next_id, HELD_MS);
        held.push_back(next_id);
        client.barrier(next_id + 1).await?;
        next_id += 2;
    }
    latencies.closed_cleanly = client.close(Duration::from_secs(10)).await;
    Ok(latencies)
}

/// Heap bytes per request held: `in_flight` requests held by their handlers over one connection to `target`, the
/// whole process's heap growth from before the connection is made (so what a server reserves when a connection
/// starts counts too) to when the server has read them all, divided by their number. The client's share (its
/// buffers, its half of the connection) is in it, the same for every target. It means something only in a process
/// whose allocator counts: the `heap_bytes` binary ([`crate::bytes`]).
pub async fn held_bytes(target: &Target, transport: Transport, in_flight: u64) -> io::Result<f64> {
    let before = memory::in_use();
    let mut client = Client::connect(target, transport, need_when_holding(in_flight))?;
    client.handshake().await?;
    for id in 1..=in_flight {
        client.queue_work(id, HELD_MS);
        if client.queued() > 32 * 1024 {
            client.flush().await?;
        }
    }
    client.barrier(in_flight + 1).await?;
    let bytes = (memory::in_use() - before) as f64 / in_flight as f64;
    client.close(Duration::from_secs(10)).await;
    Ok(bytes)
}
