//! Soak: a million requests or more, with random cancels, timeouts and disconnects, over a real socket; checks
//! that every reply is one the request could get, that the tables are empty at the end and that memory stays flat.
//!
//! ```text
//! cargo run --release -p tower-cancel-bench --bin soak                                   # 1,000,000 requests
//! cargo run -p tower-cancel-bench --bin soak -- --requests 200000 --max-secs 180         # the CI version (debug)
//! ```
//!
//! Flags: `--requests N` (default 1,000,000), `--max-secs S` (default 540: the run stops sending at N requests or
//! after S seconds, whichever comes first), `--connections C` (32), `--window W` (requests in flight per
//! connection, 64), `--dialect lsp|mcp|both` (both: half the connections each), `--tcp` (TCP on 127.0.0.1 instead
//! of a Unix socket in a temporary directory), `--spawn` (each request on a task of its own:
//! `Server::spawn_requests(true)`), `--timeout-ms T` (the server's timeout, 100), `--seed X`.
//!
//! # What runs
//!
//! One listener per dialect serves each accepted connection with `tower_cancel_io::Server` and the full stack, its
//! own registry per connection (kept by the soak so it can read the tables): LSP is
//! `CancelStack::new(Lsp.server_cancellable(["bench/work"])).timeout(T)`, so a timeout answers -32802 and a peer's
//! cancel -32800; MCP is `CancelStack::mcp().timeout(T)`, so a timeout answers -32001 and a cancel nothing. The
//! handler is the harness's `bench/work` / `tools/call work` (sleep `ms`, answer).
//!
//! Each client connection keeps `W` requests in flight. Of every thousand requests, 30 are slow (their handler
//! sleeps 10 s, far past the timeout), 40 are cancelled before they are sent (an early cancel), 40 while they run
//! (racing their completion or their timeout), 40 after their reply came (a cancel for an id no longer in flight),
//! and 10 are followed by a cancel for an id never used. A connection lives for 100 to 5,000 requests; one in four
//! is dropped abruptly with requests in flight (half of those in the middle of a frame), the others drain and
//! close; then the client connects again. Each client's choices come from `--seed`, so a run repeats them; the
//! timing, and so which side of each race wins (and how the requests spread over the clients), is the machine's.
//!
//! Every reply is checked: its id is one in flight on that connection (never an unknown id, never twice), and its
//! kind is one the request's plan allows (see `Plan::allows`): a request cancelled before it was sent gets -32800
//! on LSP and nothing on MCP; a slow one never completes; MCP never answers -32800.
//!
//! The server and the clients run in this one process on a 2-thread runtime, so the memory figures cover both.
//!
//! # Output
//!
//! - `memory` lines: RSS (`VmRSS` of `/proc/self/status`) and heap bytes in use (allocated and not yet freed, by a
//!   counting allocator; about 32 MiB of it is the clients' 1 MiB write buffers, reserved but not touched), before the
//!   load, after the warm-up (5% of the run: the `start`), at every 10%, with the clients drained and still
//!   connected (`quiesced`), and after every connection closed (`closed`). Each line also gives requests sent, the
//!   connections open and the requests in flight in their registries.
//! - `requests`, `replies`, `cancels`, `connections`: what the clients did and read. Among the timeouts, "fast ones"
//!   are requests that the machine's load pushed past the deadline (allowed, and reported). "MCP cancelled and
//!   unanswered" are the MCP requests cancelled by the client that got no reply by the end of their connection (the
//!   cancel won); the others completed or timed out first.
//! - `tables`: with every client drained but connected: connections open, requests in flight (must be 0) and early
//!   cancels remembered (bounded: at most 1024 per registry); after close: connections open (0), requests left in a
//!   registry when its `serve` returned (must be 0), and the registry counters over every connection
//!   (registered = completed + cancelled).
//! - `PASS`, or `FAIL` with the reasons (exit status 1): a reply that was not allowed, a missing reply, a table not
//!   empty, RSS grown between `start` and the end (at 100% and after close) by more than 20% or 16 MiB, whichever
//!   is larger, or more than 256 KiB of heap still allocated after every connection closed (against before the
//!   load). 16 MiB is what one 16-byte allocation leaked per request would cost over a million requests, and it is
//!   above the noise of glibc's per-thread arenas and of the client buffers of the reconnections (RSS rises by 1 to
//!   2 MiB in the first million requests, then stays); the early-cancel memory is bounded per registry and goes with
//!   it, so it cannot grow with the run. The heap figure is exact (allocated minus freed), so its bound is tight.

use std::{
    process::ExitCode,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use tokio::sync::Barrier;
use tower_cancel_bench::{
    memory,
    soak::{
        drive, listen, mib, name, rss_bytes, Connections, Counts, Endpoint, Rng, Run, Snapshot,
    },
    target::Protocol,
};

#[global_allocator]
static GLOBAL: &stats_alloc::StatsAlloc<std::alloc::System> = memory::ALLOCATOR;

/// Heap bytes that may stay allocated after every connection closed, compared with before the load. What stays is
/// the soak's own bookkeeping (its table of connections keeps its capacity) and the runtime's: a few KiB. At a
/// million requests (about 450 connections) this catches one allocation leaked per request, or about 600 bytes
/// leaked per connection (a registry that its early cancels keep alive is tens of KiB).
const HEAP_LEFT: i64 = 256 << 10;
/// The fraction of the run that warms up before the `start` memory figures.
const WARM_UP: f64 = 0.05;

struct Args {
    requests: u64,
    max_secs: u64,
    connections: usize,
    window: usize,
    protocols: Vec<Protocol>,
    tcp: bool,
    spawn: bool,
    timeout: Duration,
    seed: u64,
}

fn args() -> Result<Args, String> {
    let mut args = Args {
        requests: 1_000_000,
        max_secs: 540,
        connections: 32,
        window: 64,
        protocols: vec![Protocol::Lsp, Protocol::Mcp],
        tcp: false,
        spawn: false,
        timeout: Duration::from_millis(100),
        seed: 0x5eed,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        let number = |v: String| v.replace('_', "").parse::<u64>().map_err(|e| e.to_string());
        match flag.as_str() {
            "--requests" => args.requests = number(value()?)?,
            "--max-secs" => args.max_secs = number(value()?)?,
            "--connections" => args.connections = number(value()?)?.max(1) as usize,
            "--window" => args.window = number(value()?)?.max(1) as usize,
            "--timeout-ms" => args.timeout = Duration::from_millis(number(value()?)?.max(1)),
            "--seed" => args.seed = number(value()?)?,
            "--tcp" => args.tcp = true,
            "--spawn" => args.spawn = true,
            "--dialect" => {
                args.protocols = match value()?.as_str() {
                    "lsp" => vec![Protocol::Lsp],
                    "mcp" => vec![Protocol::Mcp],
                    "both" => vec![Protocol::Lsp, Protocol::Mcp],
                    other => return Err(format!("unknown dialect {other} (lsp, mcp or both)")),
                }
            }
            other => return Err(format!("unknown flag {other}")),
        }
    }
    Ok(args)
}

/// A line of memory figures.
fn memory_line(label: &str, sent: u64, snapshot: &Snapshot) -> (u64, i64) {
    let rss = rss_bytes().unwrap_or(0);
    let heap = memory::in_use();
    println!(
        "memory  {label:<10} rss {:7.1} MiB  heap {:7.1} MiB  sent {sent:>9}  connections open {:>3}  in flight {:>5}",
        mib(rss as f64),
        mib(heap as f64),
        snapshot.live.connections,
        snapshot.live.in_flight,
    );
    (rss, heap)
}

fn main() -> ExitCode {
    let args = match args() {
        Ok(args) => args,
        Err(error) => {
            eprintln!("soak: {error}");
            return ExitCode::from(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let failures = runtime.block_on(soak(args));
    if failures.is_empty() {
        println!("PASS");
        ExitCode::SUCCESS
    } else {
        for failure in &failures {
            println!("FAIL: {failure}");
        }
        ExitCode::FAILURE
    }
}

async fn soak(args: Args) -> Vec<String> {
    let mut failures = Vec::new();
    let connections = Arc::new(Connections::default());
    let dir = std::env::temp_dir().join(format!("tower-cancel-soak-{}", std::process::id()));
    if !args.tcp {
        if let Err(error) = std::fs::create_dir_all(&dir) {
            return vec![format!("creating {}: {error}", dir.display())];
        }
    }
    let mut endpoints = Vec::new();
    for &protocol in &args.protocols {
        let endpoint = if args.tcp {
            Endpoint::Tcp(([127, 0, 0, 1], 0).into())
        } else {
            Endpoint::Unix(dir.join(format!("{}.sock", name(protocol).to_lowercase())))
        };
        match listen(
            protocol,
            endpoint,
            args.timeout,
            args.spawn,
            connections.clone(),
        )
        .await
        {
            Ok(endpoint) => endpoints.push((protocol, endpoint)),
            Err(error) => return vec![format!("listening for {}: {error}", name(protocol))],
        };
    }
    let start = Instant::now();
    let shared = Arc::new(Run::new(
        args.requests,
        start + Duration::from_secs(args.max_secs),
        args.window,
        args.timeout,
        endpoints,
    ));
    println!(
        "soak: {} requests at most, for {} s at most; {} connections ({}) over {}, {} in flight each; server \
         timeout {:?}; seed {:#x}",
        args.requests,
        args.max_secs,
        args.connections,
        args.protocols.iter().map(|&p| name(p)).collect::<Vec<_>>().join(" and "),
        args.protocols
            .iter()
            .map(|&p| shared.endpoint(p).to_string())
            .collect::<Vec<_>>()
            .join(", "),
        args.window,
        args.timeout,
        args.seed,
    );
    println!("soak: server and clients run in this one process (2 worker threads): the memory figures cover both");
    let (_, heap_before) = memory_line("before", 0, &connections.snapshot());

    let barrier = Arc::new(Barrier::new(args.connections + 1));
    let drained = Arc::new(AtomicUsize::new(0));
    let seed = args.seed;
    let clients: Vec<_> = (0..args.connections)
        .map(|index| {
            let protocol = args.protocols[index % args.protocols.len()];
            let (shared, barrier, drained) = (shared.clone(), barrier.clone(), drained.clone());
            tokio::spawn(async move {
                let mut rng = Rng::new(seed, index as u64);
                let mut counts = Counts::default();
                let last = drive(&shared, protocol, &mut rng, &mut counts).await;
                drained.fetch_add(1, Ordering::Release);
                // Every client drained: the tables are read; then the last connections close.
                barrier.wait().await;
                barrier.wait().await;
                if let Some(client) = last {
                    client.close(Duration::ZERO).await;
                }
                counts
            })
        })
        .collect();

    // Memory at the end of the warm-up (the start) and at every tenth of the run, by requests sent or time.
    let mut start_rss = None;
    let mut last_mark = None;
    let mut next_mark = 1;
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    while drained.load(Ordering::Acquire) < args.connections {
        tick.tick().await;
        let sent = shared.sent();
        let by_count = sent as f64 / args.requests.max(1) as f64;
        let by_time = start.elapsed().as_secs_f64() / args.max_secs.max(1) as f64;
        let progress = by_count.max(by_time);
        if start_rss.is_none() && progress >= WARM_UP {
            start_rss = Some(memory_line("start", sent, &connections.snapshot()).0);
        }
        while next_mark <= 10 && progress >= next_mark as f64 / 10.0 {
            let label = format!("{}%", next_mark * 10);
            last_mark = Some(memory_line(&label, sent, &connections.snapshot()).0);
            next_mark += 1;
        }
    }
    let elapsed = start.elapsed();
    let sent = shared.sent();
    let start_rss =
        start_rss.unwrap_or_else(|| memory_line("start", sent, &connections.snapshot()).0);
    let end_running = last_mark.unwrap_or(start_rss);

    // Every client drained, its last connection still open: the registries must empty (an MCP request cancelled
    // by the peer settles on its own task, with no reply to wait for, so give it a moment).
    barrier.wait().await;
    let quiet_deadline = Instant::now() + Duration::from_secs(5);
    let mut quiet = connections.snapshot();
    while quiet.live.in_flight > 0 && Instant::now() < quiet_deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
        quiet = connections.snapshot();
    }
    memory_line("quiesced", sent, &quiet);
    barrier.wait().await;

    let mut counts = Counts::default();
    for client in clients {
        match client.await {
            Ok(client) => counts.merge(client),
            Err(error) => failures.push(format!("a client task failed: {error}")),
        }
    }
    let close_deadline = Instant::now() + Duration::from_secs(10);
    let mut closed = connections.snapshot();
    while closed.live.connections > 0 && Instant::now() < close_deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
        closed = connections.snapshot();
    }
    let (end_rss, heap_closed) = memory_line("closed", sent, &closed);

    let secs = elapsed.as_secs_f64();
    println!(
        "requests     sent {}  in {:.1} s  ({:.0} requests/s)",
        counts.sent,
        secs,
        counts.sent as f64 / secs
    );
    println!(
        "replies      ok {}  cancelled {}  timed out {} (of them fast ones: {})  other errors {}  MCP cancelled \
         and unanswered {}",
        counts.ok,
        counts.cancelled,
        counts.timed_out,
        counts.fast_timed_out,
        counts.other,
        counts.mcp_unanswered
    );
    println!(
        "cancels      sent {}  before {}  during {}  after {}  unknown ids {}",
        counts.cancels(),
        counts.cancels_before,
        counts.cancels_during,
        counts.cancels_after,
        counts.cancels_unknown
    );
    println!(
        "connections  {} opened by the clients  {} dropped abruptly ({} mid-frame)  {} closed by the server with an \
         I/O error",
        counts.sessions, counts.disconnects, counts.partial_frames, closed.closed.io_errors
    );
    println!(
        "tables       quiesced: {} connections open, {} requests in flight, {} early cancels remembered (at most \
         1024 per registry)",
        quiet.live.connections, quiet.live.in_flight, quiet.live.remembered
    );
    let (registered, completed, cancelled, early) = closed.totals();
    println!(
        "tables       closed: {} connections open, {} requests in flight, {} left in a registry when serve returned; \
         {} connections served",
        closed.live.connections, closed.live.in_flight, closed.closed.in_flight, closed.closed.connections
    );
    println!(
        "registries   registered {registered}  completed {completed}  cancelled {cancelled}  early cancels \
         remembered {early}"
    );

    // The verdict.
    // The first few failed checks of each client, at most 20 in all, and how many more there were.
    let shown = counts.notes.len().min(20);
    failures.extend(counts.notes.iter().take(shown).cloned());
    if counts.failures > shown as u64 {
        failures.push(format!(
            "{} more failed checks",
            counts.failures - shown as u64
        ));
    }
    if counts.sent < args.requests && elapsed.as_secs() < args.max_secs {
        failures.push(format!("only {} requests sent", counts.sent));
    }
    if quiet.live.in_flight > 0 {
        failures.push(format!(
            "{} requests still in flight with every client drained",
            quiet.live.in_flight
        ));
    }
    if closed.live.connections > 0 {
        failures.push(format!(
            "{} connections still open after every client closed",
            closed.live.connections
        ));
    }
    if closed.live.in_flight + closed.closed.in_flight > 0 {
        failures.push(format!(
            "{} requests left in the registries",
            closed.live.in_flight + closed.closed.in_flight
        ));
    }
    if registered != completed + cancelled {
        failures.push(format!(
            "registered {registered} != completed {completed} + cancelled {cancelled}"
        ));
    }
    let bound = (start_rss / 5).max(16 << 20);
    for (label, rss) in [("at 100%", end_running), ("after close", end_rss)] {
        if rss > start_rss + bound {
            failures.push(format!(
                "RSS grew from {:.1} MiB after the warm-up to {:.1} MiB {label} (bound +{:.1} MiB)",
                mib(start_rss as f64),
                mib(rss as f64),
                mib(bound as f64)
            ));
        }
    }
    println!(
        "memory       RSS start {:.1} MiB, at 100% {:.1} MiB, after close {:.1} MiB: allowed up to {:.1} MiB \
         (+20% or +16 MiB, the larger)",
        mib(start_rss as f64),
        mib(end_running as f64),
        mib(end_rss as f64),
        mib((start_rss + bound) as f64)
    );
    let heap_left = heap_closed - heap_before;
    if heap_left > HEAP_LEFT {
        failures.push(format!(
            "{:.2} MiB of heap still allocated after every connection closed (bound {:.2} MiB)",
            mib(heap_left as f64),
            mib(HEAP_LEFT as f64)
        ));
    }
    println!(
        "memory       heap {:.2} MiB before the load, {:.2} MiB after every connection closed: {:.3} MiB left \
         (allowed {:.2} MiB)",
        mib(heap_before as f64),
        mib(heap_closed as f64),
        mib(heap_left as f64),
        mib(HEAP_LEFT as f64)
    );
    if !args.tcp {
        let _ = std::fs::remove_dir_all(&dir);
    }
    failures
}
