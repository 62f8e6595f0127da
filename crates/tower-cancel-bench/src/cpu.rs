//! Figure 6: handlers that compute without awaiting, served with requests polled by the connection's task
//! (inline, the driver's default) or each on a task of its own (`Server::spawn_requests(true)`).
//!
//! Inline, a connection's handlers and the reading of its frames share one task: a handler that computes delays
//! every frame behind it, the peer's cancels included, and the connection uses one core. These workloads
//! measure what that costs and what spawning costs in its place: requests per second, and the latency of a cancel
//! while the workers are busy.

use std::{
    io,
    time::{Duration, Instant},
};

use crate::{
    client::{Client, Reply, Transport, HELD_MS},
    target::Target,
    workload::Latencies,
};

/// How long a CPU-bound handler computes for.
pub const SPIN_US: u64 = 50;

/// How long one reply may take before the harness counts its cancel as never answered.
const PATIENCE: Duration = Duration::from_secs(10);

/// Compute for `duration` without awaiting or sleeping: the thread is taken, as by a handler parsing or
/// type-checking.
pub fn burn(duration: Duration) {
    let until = Instant::now() + duration;
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}

/// Requests per second on one connection (in-memory duplex): `total` requests computing `spin_us` each, at most
/// `window` in flight.
pub async fn throughput(
    target: &Target,
    window: usize,
    total: u64,
    spin_us: u64,
) -> io::Result<f64> {
    // Only tower-cancel's own targets serve `bench/spin`; they have no limit to set.
    let mut client = Client::connect(target, Transport::Duplex, window)?;
    client.handshake().await?;
    let (mut sent, mut done, mut in_flight) = (0u64, 0u64, 0usize);
    let start = Instant::now();
    while done < total {
        while in_flight < window && sent < total {
            sent += 1;
            client.queue_spin(sent, spin_us);
            in_flight += 1;
        }
        client.flush().await?;
        let mut reply = Some(client.next_reply().await?);
        while reply.is_some() {
            in_flight -= 1;
            done += 1;
            reply = client.ready_reply()?;
        }
    }
    let elapsed = start.elapsed();
    client.close(PATIENCE).await;
    Ok(total as f64 / elapsed.as_secs_f64())
}

/// Cancel latencies of a held request (`bench/work` sleeping an hour) while `busy` requests computing `spin_us`
/// each stay in flight on the same connection (each one answered is replaced at once): from just before the
/// `$/cancelRequest` frame, already serialized, is written, to the cancelled reply read. One cancel at a time, after at least `busy` replies since the last
/// one, so that every cancel meets the same load; each cancelled request is replaced.
pub async fn cancel_latency(
    target: &Target,
    busy: usize,
    samples: usize,
    spin_us: u64,
) -> io::Result<Latencies> {
    // The busy requests, the held one and its marker.
    let mut client = Client::connect(target, Transport::Duplex, busy + 2)?;
    client.handshake().await?;
    let mut latencies = Latencies::default();
    let mut next_id = 1;
    let mut spinning = 0;
    let mut held = Held::send(&mut client, &mut next_id);
    while latencies.samples.len() < samples {
        while spinning < busy {
            client.queue_spin(next_id, spin_us);
            next_id += 1;
            spinning += 1;
        }
        client.flush().await?;
        if held.cancel_at.is_none() && held.read && held.replies_since >= busy {
            client.queue_cancel(held.id);
            held.cancel_at = Some(Instant::now());
            client.flush().await?;
        }
        let Some(reply) = next_reply(&mut client).await? else {
            latencies.missed += 1;
            break;
        };
        if reply.id == held.id {
            let cancelled_at = held.cancel_at.expect("only a cancel ends the held request");
            latencies.samples.push(cancelled_at.elapsed());
            held = Held::send(&mut client, &mut next_id);
            continue;
        }
        if reply.id == held.marker {
            held.read = true;
        } else {
            spinning -= 1;
        }
        held.replies_since += 1;
    }
    latencies.closed_cleanly = client.close(PATIENCE).await;
    Ok(latencies)
}

/// The request a cancel is measured on.
struct Held {
    id: u64,
    /// A trivial request sent right after it: its reply tells that the server has read (and registered) the held
    /// request, so the cancel finds it running rather than remembered for later.
    marker: u64,
    read: bool,
    replies_since: usize,
    cancel_at: Option<Instant>,
}

impl Held {
    fn send(client: &mut Client, next_id: &mut u64) -> Self {
        let (id, marker) = (*next_id, *next_id + 1);
        *next_id += 2;
        client.queue_work(id, HELD_MS);
        client.queue_spin(marker, 0);
        Self {
            id,
            marker,
            read: false,
            replies_since: 0,
            cancel_at: None,
        }
    }
}

async fn next_reply(client: &mut Client) -> io::Result<Option<Reply>> {
    tokio::time::timeout(PATIENCE, client.next_reply())
        .await
        .ok()
        .transpose()
}
