//! The benchmark harness: every figure of BENCHMARKS.md in one run, and the targets judged by them.
//!
//! ```text
//! bash crates/tower-cancel-bench/run.sh              # criterion, then everything here (about 20 minutes on 2 cores)
//! bash crates/tower-cancel-bench/run.sh --quick      # each workload small: proves the harness works
//! bash crates/tower-cancel-bench/run.sh --only 3     # one figure (1 to 6, 8 to 12) alone
//! bash crates/tower-cancel-bench/run.sh --only 10,12 # those figures, in their order, in one process
//! bash crates/tower-cancel-bench/run.sh --out DIR    # where results.md, cancel-latency.svg and storm.svg go
//! ```
//!
//! This binary runs on the plain system allocator: the bytes figures are counted by the `heap_bytes` binary, which
//! it runs for each (see `bytes.rs`); run.sh builds both.

use std::{
    fs,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use tower_cancel_bench::{
    bytes::{self, Held},
    client::{Shape, Transport},
    connections, cpu, criterion_results,
    http::{self, HttpTarget},
    ours::{
        LSP_BARE, LSP_STACK, LSP_STACK_ADAPTIVE, LSP_STACK_KEEPING, LSP_STACK_SPAWNED,
        LSP_STACK_SPAWNED_LIMITED, LSP_STACK_TIMEOUT, MCP_STACK, SPAWNED_LIMIT,
    },
    overhead, peer_side, peers,
    plot::{self, Series},
    replicas,
    report::{percentile, Table},
    run::on_fresh_runtime as run,
    scale,
    stats::{Interval, Verdict},
    storm,
    storm::tables::StormSizes,
    target::Target,
    targets::Targets,
    workload,
};

/// How big each workload is.
struct Sizes {
    overhead_calls: i64,
    overhead_rounds: usize,
    e2e_requests: u64,
    e2e_rounds: usize,
    windows: &'static [usize],
    in_flight: &'static [u64],
    cancel_samples: usize,
    latency_rounds: usize,
    scale_held: &'static [usize],
    scale_samples: usize,
    mixed_requests: u64,
    mixed_rounds: usize,
    cpu_requests: u64,
    /// Cancels per round of figure 6's latency table.
    cpu_samples: usize,
    /// Rounds of figure 6's latency table, the modes alternating within each.
    cpu_latency_rounds: usize,
    /// Hang-ups per round of figure 8's latency table.
    http_samples: usize,
    /// Rounds of figure 8's latency table, the servers alternating within each.
    http_latency_rounds: usize,
    http_clients: usize,
    http_requests: u64,
    replica_samples: usize,
    replica_rounds: usize,
    scale_rounds: usize,
    storm: StormSizes,
    idle_connections: usize,
    busy_requests: u64,
    connection_rounds: usize,
    pending_calls: u64,
    peer_requests: u64,
    peer_rounds: usize,
    cascade_samples: usize,
}

const FULL: Sizes = Sizes {
    overhead_calls: 200_000,
    overhead_rounds: 15,
    e2e_requests: 100_000,
    e2e_rounds: 10,
    windows: &[1, 64, 1024],
    in_flight: &[1, 1_000, 10_000, 100_000],
    cancel_samples: 1_000,
    latency_rounds: 6,
    scale_held: &[1_000, 1_000_000],
    scale_samples: 1_000,
    mixed_requests: 100_000,
    mixed_rounds: 10,
    cpu_requests: 20_000,
    cpu_samples: 250,
    cpu_latency_rounds: 6,
    http_samples: 250,
    http_latency_rounds: 6,
    http_clients: 16,
    http_requests: 50_000,
    replica_samples: 1_000,
    replica_rounds: 5,
    scale_rounds: 3,
    // rmcp, the slowest peer, does about 90k requests per second on figure 5's workload: 2000 ordinary, 5000 held
    // and 5000 cancels per second leave every target far from saturation. 4 rounds of 2.5 s: 20,000 ordinary
    // requests per row for the pooled p999.
    storm: StormSizes {
        ordinary_rate: 2_000.0,
        storm_rate: 5_000.0,
        run_for: Duration::from_millis(2_500),
        rounds: 4,
        grace: Duration::from_secs(1),
        close_held: 1_000_000,
        close_rounds: 3,
        close_before: Duration::from_millis(1_100),
    },
    idle_connections: 1_000,
    busy_requests: 20_000,
    connection_rounds: 10,
    pending_calls: 100_000,
    peer_requests: 200_000,
    peer_rounds: 10,
    cascade_samples: 1_000,
};

const QUICK: Sizes = Sizes {
    overhead_calls: 2_000,
    overhead_rounds: 3,
    e2e_requests: 2_000,
    // Two rounds at least, so that the intervals are computed (and so exercised) in CI too.
    e2e_rounds: 2,
    windows: &[1, 64],
    in_flight: &[1, 100],
    cancel_samples: 10,
    latency_rounds: 2,
    scale_held: &[100, 10_000],
    scale_samples: 50,
    mixed_requests: 2_000,
    mixed_rounds: 2,
    cpu_requests: 500,
    cpu_samples: 10,
    cpu_latency_rounds: 2,
    http_samples: 10,
    http_latency_rounds: 2,
    http_clients: 16,
    http_requests: 400,
    replica_samples: 20,
    replica_rounds: 2,
    scale_rounds: 2,
    storm: StormSizes {
        ordinary_rate: 500.0,
        storm_rate: 1_000.0,
        run_for: Duration::from_millis(200),
        rounds: 2,
        grace: Duration::from_millis(200),
        close_held: 10_000,
        close_rounds: 2,
        close_before: Duration::from_millis(300),
    },
    idle_connections: 50,
    busy_requests: 200,
    connection_rounds: 2,
    pending_calls: 1_000,
    peer_requests: 2_000,
    peer_rounds: 2,
    cascade_samples: 20,
};

/// Ours first, then the hand-written baseline (each request spawned, then every request polled inline), the peers
/// with their limits set to the work's real need, then the peers at their defaults.
const LSP_TARGETS: [Target; 9] = [
    LSP_STACK,
    peers::BASELINE_SPAWNED,
    peers::BASELINE_INLINE,
    peers::TOWER_LSP,
    peers::TOWER_LSP_ADAPTED,
    peers::ASYNC_LSP,
    peers::ASYNC_LSP_ADAPTED,
    peers::TOWER_LSP_DEFAULTS,
    peers::ASYNC_LSP_DEFAULTS,
];
const MCP_TARGETS: [Target; 3] = [MCP_STACK, peers::RMCP, peers::RMCP_ADAPTED];

/// Our other ways of running a request, in figure 5 beside our default (inline) one: what a user who picks another
/// mode of the driver gets against the same peers. Reported, not judged: the goals are our default's.
const OUR_OTHER_LSP_MODES: &[Target] = &[
    LSP_STACK_SPAWNED,
    // The driver's adaptive mode: a request polled inline first, moved to a task of its own while still pending.
    LSP_STACK_ADAPTIVE,
];

/// Figure 5's goal against `peer`: how many times its throughput ours must reach with 10% of the requests
/// cancelled on one connection (issue 30's goals); `None` for a row that is no peer (a framework under its
/// adapter, one of our own modes).
fn throughput_goal(peer: &Target) -> Option<f64> {
    const HAND_WRITTEN_AND_ASYNC_LSP: f64 = 1.2;
    const TOWER_LSP_AND_RMCP: f64 = 1.5;
    let name = peer.name;
    if [
        peers::BASELINE_SPAWNED.name,
        peers::BASELINE_INLINE.name,
        peers::ASYNC_LSP.name,
        peers::ASYNC_LSP_DEFAULTS.name,
    ]
    .contains(&name)
    {
        Some(HAND_WRITTEN_AND_ASYNC_LSP)
    } else if [
        peers::TOWER_LSP.name,
        peers::TOWER_LSP_DEFAULTS.name,
        peers::RMCP.name,
    ]
    .contains(&name)
    {
        Some(TOWER_LSP_AND_RMCP)
    } else {
        None
    }
}

/// Whether `target` is a peer at its default settings, whose limit (4, or the CPUs) lets only one request be held
/// along with the barrier behind it.
fn at_defaults(target: &Target) -> bool {
    [
        peers::TOWER_LSP_DEFAULTS.name,
        peers::ASYNC_LSP_DEFAULTS.name,
    ]
    .contains(&target.name)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let out = args
        .iter()
        .position(|a| a == "--out")
        .and_then(|i| args.get(i + 1))
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(if quick {
                "target/bench-quick"
            } else {
                "bench-results"
            })
        });
    let sizes = if quick { &QUICK } else { &FULL };
    // `--only N`: run figure N alone (1 to 6, or 8 to 12), to profile it or to refresh one table.
    let only = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1))
        .cloned();
    let wanted = |figure: &str| {
        only.as_deref()
            .is_none_or(|only| only.split(',').any(|o| o == figure))
    };
    let began = Instant::now();

    let mut text = String::new();
    let mut section = |title: &str, body: String| {
        let part = format!("## {title}\n\n{body}\n");
        println!("{part}");
        text.push_str(&part);
    };
    let mut targets = Targets::default();

    if wanted("1") {
        // Criterion ran just before, from run.sh (not with `--only`, nor in quick mode, where it only tests).
        let criterion = (only.is_none() && !quick).then(criterion_dir).flatten();
        section(
            "1. Overhead in process (ns per request)",
            overhead_table(sizes, criterion.as_deref(), &mut targets),
        );
    }
    if wanted("2") {
        section(
            "2. End to end throughput (requests per second)",
            throughput_table(sizes, &mut targets)?,
        );
    }
    let mut series = Vec::new();
    let mut storm_bars = Vec::new();
    if wanted("3") {
        let (latency_text, lines) = latency_tables(sizes, &mut targets)?;
        section(
            "3. Cancel latency (µs), and memory per request held over a connection",
            latency_text,
        );
        series = lines;
    }
    if wanted("4") {
        section("4. Scale in process", scale_table(sizes, &mut targets)?);
    }
    if wanted("5") {
        section(
            "5. Peers: throughput with 10% of requests cancelled",
            mixed_table(sizes, &mut targets)?,
        );
    }
    if wanted("6") {
        section(
            "6. CPU-bound handlers: requests inline, spawned or adaptive",
            cpu_tables(sizes)?,
        );
    }
    if wanted("8") {
        section("8. HTTP: MCP Streamable HTTP", http_tables(sizes)?);
    }
    if wanted("9") {
        section(
            "9. A cancel across replicas (Redis on loopback, and in process)",
            replicas_table(sizes, &mut targets)?,
        );
    }
    if wanted("10") {
        let all: Vec<Target> = LSP_TARGETS.iter().chain(&MCP_TARGETS).copied().collect();
        let (storm_text, bars) = storm::tables::tables(&sizes.storm, &all, &mut targets)?;
        section(
            "10. What users feel: ordinary requests under a cancel storm, and while a connection with a million held \
             requests closes",
            storm_text,
        );
        storm_bars = bars;
    }
    if wanted("11") {
        section(
            "11. Many connections: idle ones' memory, busy ones' throughput beside them",
            connections_table(sizes, &mut targets)?,
        );
    }
    if wanted("12") {
        section(
            "12. The client side: our Peer's pending calls, outgoing throughput, cascade latency",
            peer_side_tables(sizes, &mut targets)?,
        );
    }

    let targets = if targets.is_empty() {
        String::new()
    } else {
        let part = format!(
            "## Targets\n\nEach judged by the figure named, from this run. Met only when the whole 95% interval \
             clears the target; missed when the whole interval is on the wrong side; otherwise not met, the \
             interval straddling it.\n\n{}\n",
            targets.finish()
        );
        println!("{part}");
        part
    };
    let text = format!(
        "# Results{}\n\n{}\n{targets}{text}",
        if quick {
            " (quick mode: sizes too small to mean anything)"
        } else {
            ""
        },
        machine()
    );
    fs::create_dir_all(&out)?;
    fs::write(out.join("results.md"), &text)?;
    if !series.is_empty() {
        plot::cancel_latency(&out.join("cancel-latency.svg"), &series)?;
    }
    if !storm_bars.is_empty() {
        plot::storm_bars(&out.join("storm.svg"), &storm_bars)?;
    }
    println!(
        "written: {}/results.md, cancel-latency.svg and storm.svg in {:.0} s",
        out.display(),
        began.elapsed().as_secs_f64()
    );
    Ok(())
}

fn machine() -> String {
    let cpu = fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    format!(
        "Machine: {cpu}, {cores} cores available; {profile} build; tokio multi-thread runtime with 2 workers; the \
         system allocator, not counting (bytes are counted in a process of their own, by the `heap_bytes` binary). \
         Intervals: mean of the rounds ± t(0.975, n − 1) · s / √n; a ratio or a difference between two targets is \
         taken round by round (the targets alternate within each round), then averaged.\n"
    )
}

/// The target directory criterion wrote to: the one this binary was built in (`target/release/..`).
fn criterion_dir() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    Some(exe.parent()?.parent()?.to_path_buf())
}

/// The target of the stack's overhead, ns per request, for a handler ready at once (the goal of the second and third
/// performance rounds; the first's was 250).
const OVERHEAD_TARGET_NS: f64 = 120.0;
/// The target of the stack's overhead, ns per request, for a handler that awaits once (the third round's).
const OVERHEAD_YIELDING_TARGET_NS: f64 = 150.0;
/// What a request may pay for its scope being attached to a replica and still count as nothing: the noise floor of
/// the paired difference of two stacks in one run.
const ATTACHMENT_NOISE_NS: f64 = 5.0;
/// The target of end-to-end throughput, as a fraction of the bare driver's (second round; the first's was 0.95).
const THROUGHPUT_TARGET: f64 = 0.97;
/// The target of our LSP cancel p99 at the largest count in flight (to the cancelled reply read), µs: the third
/// round's (the second's was 100).
const CANCEL_P99_TARGET_US: f64 = 10.0;
/// The same for MCP (to the handler stopped: MCP sends no reply), µs: the second round's, which the third round
/// leaves as it was (its goal is stated for LSP).
const CANCEL_P99_MCP_TARGET_US: f64 = 100.0;
/// The target of the bytes the stack adds per request in flight (second round; the first's was 256).
const BYTES_TARGET: f64 = 192.0;

fn overhead_table(sizes: &Sizes, criterion: Option<&Path>, targets: &mut Targets) -> String {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let _entered = runtime.enter();
    let mut variants = overhead::variants();
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); variants.len()];
    let mut next_id = 0;
    // Rounds interleave the variants, so that drift in the machine's speed touches all alike.
    for _ in 0..sizes.overhead_rounds {
        for (index, variant) in variants.iter_mut().enumerate() {
            let start = Instant::now();
            for _ in 0..sizes.overhead_calls {
                (variant.call)(next_id);
                next_id += 1;
            }
            times[index].push(start.elapsed().as_nanos() as f64 / sizes.overhead_calls as f64);
        }
    }
    let mut table = Table::new(&[
        "variant",
        "ns per request",
        "added to its bare service (ns)",
        "criterion (ns per call)",
    ]);
    let mut added = Vec::new();
    for (variant, own) in variants.iter().zip(&times) {
        let difference = variant
            .baseline
            .map(|baseline| Interval::of_differences(own, &times[baseline]));
        added.push(difference);
        let criterion = criterion
            .and_then(|dir| criterion_results::estimate(dir, "overhead", variant.name))
            .map_or_else(
                || "–".to_owned(),
                |e| format!("{:.1} [{:.1}, {:.1}]", e.point, e.low, e.high),
            );
        table.row(&[
            variant.name.to_owned(),
            Interval::of(own).show(0),
            difference.map_or_else(|| "(reference)".to_owned(), |d| d.show(0)),
            criterion,
        ]);
    }
    for (index, goal, handler) in [
        (overhead::STACK, OVERHEAD_TARGET_NS, "handler ready at once"),
        (
            overhead::STACK_YIELDING,
            OVERHEAD_YIELDING_TARGET_NS,
            "handler that awaits once",
        ),
        (
            overhead::STACK_CONNECTION,
            OVERHEAD_TARGET_NS,
            "connection path, handler ready at once",
        ),
        (
            overhead::STACK_CONNECTION_YIELDING,
            OVERHEAD_YIELDING_TARGET_NS,
            "connection path, handler that awaits once",
        ),
    ] {
        if let Some(added) = added[index] {
            targets.add(
                &format!("stack overhead at most {goal} ns per request ({handler})"),
                format!("{} ns", added.show(0)),
                "1",
                added.at_most(goal),
            );
        }
    }
    if let Some(added) = added[overhead::STACK_CONNECTION_CHILD_PEER] {
        targets.add(
            "(a handler taking its child peer, connection path, over the bare service: reported)",
            format!("{} ns", added.show(0)),
            "1",
            "reported",
        );
    }
    // The stack against what a user would otherwise write around the same bare service, round by round.
    let versus_hand_written =
        Interval::of_differences(&times[overhead::STACK], &times[overhead::HAND_WRITTEN]);
    targets.add(
        "(the stack against the hand-written map of tokens, reported)",
        format!(
            "{} ns per request (stack − hand-written)",
            versus_hand_written.show(0)
        ),
        "1",
        "reported",
    );
    // Cancels across replicas: a scope attached to a replica costs a request that is never cancelled nothing
    // (only a cancel that misses looks at the attachment). Measured as the paired difference of the two exchanges.
    let attached = Interval::of_differences(
        &times[overhead::STACK_EXCHANGE_REPLICA],
        &times[overhead::STACK_EXCHANGE],
    );
    targets.add(
        &format!(
            "a request never cancelled pays nothing for its scope's replica attachment (at most {ATTACHMENT_NOISE_NS} \
             ns, the noise floor)"
        ),
        format!("{} ns", attached.show(1)),
        "1",
        attached.at_most(ATTACHMENT_NOISE_NS),
    );
    format!(
        "{} calls per round, {} rounds, the variants interleaved within each round; a call makes the request (method \
         string, id, params), calls the service and polls its answer to the end with a real (`Arc`) waker. Each \
         variant is compared with the bare service of its shape, round by round: the plain shape (numeric id, small \
         params, a handler ready at once, which never has the stack register a waker nor arm a timer), a handler \
         that awaits once (`tokio::task::yield_now`), and a string id with 4 KiB params. The connection path: the plain \
         and awaiting shapes again with each request read by a `Connection` (`Connection::receive` of the parsed \
         message, as the `tower-cancel-io` driver does) of a scope speaking LSP, as `Server::with_stack` makes it: \
         the stack registers the request in the connection's scope and counts it in the connection, and its cascade \
         layer gives the handler a child of the connection's peer; the last row's handler takes that child \
         (`Request::peer`). The hand-written row is what a careful user without this library wraps the same bare \
         service in: a `CancellationToken` per request in a `Mutex<HashMap<Id, _>>` hashed with foldhash, a named \
         future (no box) that polls the inner future and, while it is pending, `token.cancelled()`, the entry \
         removed when the future ends or is dropped.\n\nThe last column is \
         criterion's, from the `cargo bench` run.sh makes just before (\"–\" when it did not): its point estimate of \
         the time per call, the slope of its regression of time on iterations (the mean where it has no slope), \
         with its 95% bootstrap interval. It is not a median.\n\n{}",
        sizes.overhead_calls,
        sizes.overhead_rounds,
        table.finish()
    )
}

/// The rows of figure 2: the transport, requests in flight, the shape of the requests, and the stack measured
/// against the bare driver.
fn throughput_rows(sizes: &Sizes) -> Vec<(Transport, usize, &'static str, Shape, Target)> {
    let mut rows = Vec::new();
    for transport in [Transport::Duplex, Transport::Unix] {
        for &window in sizes.windows {
            rows.push((transport, window, "plain", Shape::default(), LSP_STACK));
        }
    }
    let window = sizes.windows[1];
    rows.extend([
        (
            Transport::Duplex,
            window,
            "handler awaits once",
            Shape::YIELDS,
            LSP_STACK,
        ),
        (
            Transport::Duplex,
            window,
            "handler awaits once, stack with a 30 s timeout",
            Shape::YIELDS,
            LSP_STACK_TIMEOUT,
        ),
        (
            Transport::Duplex,
            window,
            "string ids, 4 KiB params",
            Shape::STRING_IDS_4K_PARAMS,
            LSP_STACK,
        ),
        (
            Transport::Duplex,
            window,
            "handler keeps its request",
            Shape::default(),
            LSP_STACK_KEEPING,
        ),
    ]);
    rows
}

fn throughput_table(
    sizes: &Sizes,
    targets: &mut Targets,
) -> Result<String, Box<dyn std::error::Error>> {
    let mut table = Table::new(&[
        "transport",
        "in flight",
        "requests",
        "bare driver (req/s)",
        "full stack (req/s)",
        "stack / bare",
    ]);
    let mut ratios = Vec::new();
    for (transport, window, shape_name, shape, stack) in throughput_rows(sizes) {
        let requests = if window == 1 {
            sizes.e2e_requests / 4
        } else {
            sizes.e2e_requests
        };
        let (mut bare, mut ours) = (Vec::new(), Vec::new());
        // Bare and stack alternate, round after round (ABAB…), so that drift touches both alike.
        for _ in 0..sizes.e2e_rounds {
            for (target, runs) in [(LSP_BARE, &mut bare), (stack, &mut ours)] {
                runs.push(
                    run(async move {
                        workload::throughput(&target, transport, window, requests, None, shape)
                            .await
                    })?
                    .per_second,
                );
            }
        }
        let ratio = Interval::of_ratios(&ours, &bare);
        ratios.push((
            format!("{}, {window} in flight, {shape_name}", transport.name()),
            ratio,
        ));
        table.row(&[
            transport.name().to_owned(),
            window.to_string(),
            shape_name.to_owned(),
            Interval::of(&bare).show(0),
            Interval::of(&ours).show(0),
            ratio.show(3),
        ]);
    }
    let plain: Vec<_> = ratios
        .iter()
        .filter(|(name, _)| name.ends_with("plain"))
        .collect();
    if let Some((worst_name, worst)) = plain.iter().min_by(|a, b| a.1.mean.total_cmp(&b.1.mean)) {
        targets.add(
            &format!("end-to-end throughput at least {THROUGHPUT_TARGET} of the bare driver (plain requests)"),
            format!("lowest mean: {} ({worst_name})", worst.show(3)),
            "2",
            Verdict::all(plain.iter().map(|(_, r)| r.at_least(THROUGHPUT_TARGET))),
        );
    }
    // The round's goal is stated at 1024 in flight, where the driver's own cost per request is least; the other
    // shapes are judged row by row.
    let judged = plain
        .iter()
        .copied()
        .filter(|(name, _)| name.contains(", 1024 in flight,"))
        .chain(ratios.iter().filter(|(name, _)| !name.ends_with("plain")));
    for (name, ratio) in judged {
        targets.add(
            &format!(
                "end-to-end throughput at least {THROUGHPUT_TARGET} of the bare driver ({name})"
            ),
            ratio.show(3),
            "2",
            ratio.at_least(THROUGHPUT_TARGET),
        );
    }
    Ok(format!(
        "LSP framing, `bench/work` with ms 0, one connection, {} rounds of {} requests each (a quarter of that with \
         1 in flight), bare and stack alternating within each round. Plain: numeric ids, small params, a handler \
         ready at once. Awaits once: the handler awaits `tokio::task::yield_now()` first. String ids: a UUID's 36 \
         characters. 4 KiB params: a 4096-byte string in them. Keeps its request: the handler's future holds the \
         request to its end (the bare driver's handler lets it go, as the stack's plain handler does). Each cell is \
         the mean of the rounds with its 95% interval; the ratio is the mean of the rounds' ratios.\n\n{}",
        sizes.e2e_rounds,
        sizes.e2e_requests,
        table.finish()
    ))
}

/// One round of figure 3 for one target and count.
struct LatencyRound {
    p50: f64,
    p99: f64,
    max: f64,
    missed: usize,
    closed_cleanly: bool,
}

fn latency_tables(
    sizes: &Sizes,
    targets: &mut Targets,
) -> Result<(String, Vec<Series>), Box<dyn std::error::Error>> {
    let all: Vec<Target> = LSP_TARGETS.iter().chain(&MCP_TARGETS).copied().collect();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    // rounds[target][count]: one entry per round.
    let mut rounds: Vec<Vec<Vec<LatencyRound>>> = all
        .iter()
        .map(|_| sizes.in_flight.iter().map(|_| Vec::new()).collect())
        .collect();
    for (count_index, &in_flight) in sizes.in_flight.iter().enumerate() {
        // The targets alternate within each round (ABC… ABC…), so that drift touches all alike.
        for _ in 0..sizes.latency_rounds {
            for (target_index, target) in all.iter().enumerate() {
                if at_defaults(target) && in_flight > 1 {
                    continue;
                }
                let (target, samples) = (*target, sizes.cancel_samples);
                let result = run(async move {
                    workload::cancel_latency(&target, Transport::Duplex, in_flight, samples).await
                })?;
                rounds[target_index][count_index].push(LatencyRound {
                    p50: us(percentile(&result.samples, 50.0)),
                    p99: us(percentile(&result.samples, 99.0)),
                    max: us(percentile(&result.samples, 100.0)),
                    missed: result.missed,
                    closed_cleanly: result.closed_cleanly,
                });
            }
        }
    }
    let mut table = Table::new(&[
        "target",
        "in flight",
        "p50 (µs)",
        "p99 (µs)",
        "max of the rounds (µs)",
        "missed",
        "closed cleanly",
    ]);
    let mut series = Vec::new();
    let p99s = |target: usize, count: usize| -> Vec<f64> {
        rounds[target][count].iter().map(|r| r.p99).collect()
    };
    for (target_index, target) in all.iter().enumerate() {
        let mut line = Series {
            name: target.name.to_owned(),
            points: Vec::new(),
        };
        for (count_index, &in_flight) in sizes.in_flight.iter().enumerate() {
            let runs = &rounds[target_index][count_index];
            if runs.is_empty() {
                continue;
            }
            let p50: Vec<f64> = runs.iter().map(|r| r.p50).collect();
            let p99 = Interval::of(&p99s(target_index, count_index));
            table.row(&[
                target.name.to_owned(),
                in_flight.to_string(),
                Interval::of(&p50).show(1),
                p99.show(1),
                format!("{:.1}", runs.iter().map(|r| r.max).fold(0.0, f64::max)),
                runs.iter().map(|r| r.missed).sum::<usize>().to_string(),
                if runs.iter().all(|r| r.closed_cleanly) {
                    "yes"
                } else {
                    "no"
                }
                .to_owned(),
            ]);
            line.points.push((in_flight as f64, p99.mean));
        }
        series.push(line);
    }

    // Ours against each peer, round by round: the peer's p99 minus ours (positive: ours is lower).
    let mut versus = Table::new(&["in flight", "peer", "peer's p99 − ours (µs)", "ours"]);
    let mut ahead = Vec::new();
    for (ours, peers) in [
        (0, 1..LSP_TARGETS.len()),
        (LSP_TARGETS.len(), LSP_TARGETS.len() + 1..all.len()),
    ] {
        for (count_index, &in_flight) in sizes.in_flight.iter().enumerate() {
            for peer in peers.clone() {
                let peer_p99 = p99s(peer, count_index);
                if peer_p99.is_empty() || peers::is_adapted(&all[peer]) {
                    continue;
                }
                let difference = Interval::of_differences(&peer_p99, &p99s(ours, count_index));
                let verdict = difference.at_least(0.0);
                ahead.push(verdict);
                versus.row(&[
                    in_flight.to_string(),
                    all[peer].name.to_owned(),
                    difference.show(1),
                    match verdict {
                        Verdict::Met => "lower",
                        Verdict::Missed => "higher",
                        Verdict::Unclear => "not told apart",
                    }
                    .to_owned(),
                ]);
            }
        }
    }
    // Each framework under its adapter against itself alone: what its users pay (or gain) in cancel latency.
    let index_of = |name: &str| all.iter().position(|t| t.name == name);
    let mut adapted = Table::new(&[
        "framework",
        "in flight",
        "p99 under the adapter − alone (µs)",
    ]);
    for (under, alone) in peers::ADAPTED {
        let (Some(under), Some(alone)) = (index_of(under.name), index_of(alone.name)) else {
            continue;
        };
        for (count_index, &in_flight) in sizes.in_flight.iter().enumerate() {
            let (under_p99, alone_p99) = (p99s(under, count_index), p99s(alone, count_index));
            if under_p99.is_empty() || alone_p99.is_empty() {
                continue;
            }
            adapted.row(&[
                all[alone].name.to_owned(),
                in_flight.to_string(),
                Interval::of_differences(&under_p99, &alone_p99).show(1),
            ]);
        }
    }
    let largest = sizes.in_flight.len() - 1;
    for (ours, goal) in [
        (0, CANCEL_P99_TARGET_US),
        (LSP_TARGETS.len(), CANCEL_P99_MCP_TARGET_US),
    ] {
        let p99 = Interval::of(&p99s(ours, largest));
        targets.add(
            &format!(
                "cancel p99 at most {goal} µs with {} in flight ({})",
                sizes.in_flight[largest], all[ours].name
            ),
            format!("{} µs", p99.show(1)),
            "3",
            p99.at_most(goal),
        );
    }
    let lower = ahead.iter().filter(|v| **v == Verdict::Met).count();
    let higher = ahead.iter().filter(|v| **v == Verdict::Missed).count();
    targets.add(
        "ahead of every peer on cancel latency (p99, every count in flight)",
        format!(
            "of {} comparisons: ours lower in {lower}, higher in {higher}, not told apart in {}",
            ahead.len(),
            ahead.len() - lower - higher
        ),
        "3",
        Verdict::all(ahead.iter().copied()),
    );

    // Bytes, each in a process of its own that counts them.
    let held = sizes.in_flight[largest];
    let mut memory = Table::new(&["target", "heap bytes per request held"]);
    let mut memory_targets = vec![LSP_STACK, LSP_STACK_KEEPING];
    memory_targets.extend(all.iter().skip(1).filter(|t| !at_defaults(t)).copied());
    let mut reported = Vec::new();
    for target in memory_targets {
        let bytes = bytes::measure(Held::OverConnection(target.name, Transport::Duplex, held))?;
        reported.push(format!("{bytes:.0} ({})", target.name));
        memory.row(&[target.name.to_owned(), format!("{bytes:.0}")]);
    }
    targets.add(
        "(memory over a connection, reported)",
        format!("bytes per request held: {}", reported.join(", ")),
        "3",
        "reported",
    );

    Ok((
        format!(
            "In-memory duplex, {} rounds, the targets alternating within each round; in each, {} cancels one at a \
             time, each cancelled request replaced so that the count stays. The clock starts at the same point for \
             every target: just before the cancel frame, already serialized, is written. LSP: to the cancelled reply \
             read. MCP sends no reply to a cancelled request: to the handler stopped (its guard dropped). Each \
             cell is the mean of the rounds' percentiles with its 95% interval. The peers run with their \
             concurrency limit set to the work's real need (the requests held and the one behind them), and at \
             their defaults (tower-lsp-server 4, async-lsp the number of CPUs), which hold only 1 request with the \
             one behind it.\n\n{}\nOurs against each peer, round by round: the peer's p99 minus ours, with its 95% \
             interval; \"lower\" when the whole interval is above 0. The \"+ tower-cancel\" rows (a framework \
             under its adapter) are no peers: each is compared with its framework alone below.\n\n{}\nEach framework \
             under its adapter against itself alone, round by round: positive when the adapter adds latency.\n\n{}\nMemory: {held} requests held by their \
             handlers over one connection, in a process that counts its heap (the `heap_bytes` binary) and does \
             nothing else: the whole process's heap growth from before the connection is made (so what a server \
             reserves when a connection starts counts) to all of them read, divided by their number. The client's \
             share (its buffers, its half of the connection) is in every row alike. Counted, not timed: one \
             run each.\n\n{}",
            sizes.latency_rounds,
            sizes.cancel_samples,
            table.finish(),
            versus.finish(),
            adapted.finish(),
            memory.finish()
        ),
        series,
    ))
}

fn scale_table(sizes: &Sizes, targets: &mut Targets) -> Result<String, Box<dyn std::error::Error>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let _entered = runtime.enter();
    let mut table = Table::new(&[
        "held",
        "bare (B/request)",
        "stack (B/request)",
        "added by the stack (B)",
        "hold all (ms)",
        "one cancel p50 (µs)",
        "p99 (µs)",
        "max of the rounds (µs)",
        "cancel the rest (ms)",
        "left in registry",
    ]);
    let mut added = 0.0;
    // Rounds of every size in turn; the bytes are counted once (the same in every run).
    let mut runs: Vec<Vec<scale::Scale>> = vec![Vec::new(); sizes.scale_held.len()];
    for _ in 0..sizes.scale_rounds {
        for (index, &held) in sizes.scale_held.iter().enumerate() {
            runs[index].push(scale::measure(held, sizes.scale_samples));
        }
    }
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    for (&held, runs) in sizes.scale_held.iter().zip(&runs) {
        let bare = bytes::measure(Held::InProcess(false, held))?;
        let stack = bytes::measure(Held::InProcess(true, held))?;
        added = stack - bare;
        let each = |f: &dyn Fn(&scale::Scale) -> f64| runs.iter().map(f).collect::<Vec<f64>>();
        let max = each(&|s| us(percentile(&s.cancel_one, 100.0)))
            .into_iter()
            .fold(0.0, f64::max);
        table.row(&[
            held.to_string(),
            format!("{bare:.0}"),
            format!("{stack:.0}"),
            format!("{added:.0}"),
            Interval::of(&each(&|s| ms(s.hold_time))).show(1),
            Interval::of(&each(&|s| us(percentile(&s.cancel_one, 50.0)))).show(1),
            Interval::of(&each(&|s| us(percentile(&s.cancel_one, 99.0)))).show(1),
            format!("{max:.1}"),
            Interval::of(&each(&|s| ms(s.cancel_all))).show(1),
            runs.iter()
                .map(|s| s.left_in_registry)
                .max()
                .unwrap_or(0)
                .to_string(),
        ]);
    }
    let largest = sizes.scale_held[sizes.scale_held.len() - 1];
    targets.add(
        &format!("at most {BYTES_TARGET} bytes per in-flight request added by the stack"),
        format!(
            "{added:.0} bytes, with {largest} held in process (counted: the same in every run)"
        ),
        "4",
        if added <= BYTES_TARGET {
            Verdict::Met
        } else {
            Verdict::Missed
        },
    );
    Ok(format!(
        "`CancelStack::lsp()` over a handler that never finishes, called and polled once per request in process (no \
         connection); {} single cancels spread over the table (the cancel notification called, the cancelled reply \
         taken), then the rest cancelled at once as a closed connection does. {} rounds, the sizes in turn within \
         each; the times are the mean of the rounds' with its 95% interval (the max the largest of every round's, \
         the left the most of any). Bytes are heap bytes per request held, counted in a process of their own (the \
         `heap_bytes` binary; the same in every run); the times are taken here, without counting.\n\n{}",
        sizes.scale_samples,
        sizes.scale_rounds,
        table.finish()
    ))
}

fn mixed_table(sizes: &Sizes, targets: &mut Targets) -> Result<String, Box<dyn std::error::Error>> {
    let mut table = Table::new(&[
        "target",
        "requests per second",
        "error replies per round",
        "tower-cancel / target",
    ]);
    let mut measured: Vec<(&'static str, Vec<f64>)> = Vec::new();
    // Ours by default first (the reference), then our other modes, then the peers.
    let lsp: Vec<Target> = LSP_TARGETS[..1]
        .iter()
        .chain(OUR_OTHER_LSP_MODES)
        .chain(&LSP_TARGETS[1..])
        .copied()
        .collect();
    for group in [&lsp[..], &MCP_TARGETS[..]] {
        let mut runs = vec![Vec::new(); group.len()];
        let mut errors = vec![0; group.len()];
        // The targets alternate within each round (ABC… ABC…), so that drift touches all alike.
        for _ in 0..sizes.mixed_rounds {
            for (index, target) in group.iter().enumerate() {
                let (target, requests) = (*target, sizes.mixed_requests);
                let result = run(async move {
                    workload::throughput(
                        &target,
                        Transport::Duplex,
                        64,
                        requests,
                        Some(10),
                        Shape::default(),
                    )
                    .await
                })?;
                runs[index].push(result.per_second);
                errors[index] = result.errors;
            }
        }
        for (index, target) in group.iter().enumerate() {
            let ratio = Interval::of_ratios(&runs[0], &runs[index]);
            table.row(&[
                target.name.to_owned(),
                Interval::of(&runs[index]).show(0),
                errors[index].to_string(),
                if index == 0 {
                    "(reference)".to_owned()
                } else {
                    ratio.show(2)
                },
            ]);
            if let Some(goal) = throughput_goal(target) {
                targets.add(
                    &format!(
                        "throughput with 10% cancelled at least {goal}× the peer's: {}",
                        target.name
                    ),
                    format!("{}× (tower-cancel / peer)", ratio.show(2)),
                    "5",
                    ratio.at_least(goal),
                );
            }
        }
        measured.extend(group.iter().map(|t| t.name).zip(runs));
    }
    let runs_of = |name: &str| measured.iter().find(|(n, _)| *n == name).map(|(_, r)| r);
    let mut adapted = Table::new(&["framework", "under the adapter / alone"]);
    for (under, alone) in peers::ADAPTED {
        if let (Some(under_runs), Some(alone_runs)) = (runs_of(under.name), runs_of(alone.name)) {
            adapted.row(&[
                alone.name.to_owned(),
                Interval::of_ratios(under_runs, alone_runs).show(2),
            ]);
        }
    }
    Ok(format!(
        "In-memory duplex, 64 in flight, {} rounds of {} requests, the targets alternating within each round; every \
         tenth request is held by its handler and cancelled right after it is sent (LSP answers it with an error; \
         MCP answers nothing, so it counts as done when the cancel is written). The peers with their concurrency \
         limit set to the work's need (64), and at their defaults (tower-lsp-server 4, async-lsp the number of \
         CPUs). Requests per second: the mean of the rounds with its 95% interval; the ratio is the mean of the \
         rounds' ratios. The peers are whole frameworks (routing, typed params and results, their own framing and \
         main loop); ours is the layers over the `tower-cancel-io` driver and a plain handler, its requests polled \
         inline by the connection's task (the driver's default; the reference of the ratios), then each on a task of \
         its own (`Server::spawn_requests(true)`). The hand-written baseline as a careful user writes it (a \
         `CancellationToken` per request in a foldhash `HashMap`, the handler raced against it with `select!`, \
         -32800 for a cancelled one): each request spawned, then every request polled inline by the read loop in a \
         `FuturesUnordered`. A \"+ \
         tower-cancel\" row is that framework's own server under its adapter crate (the stack and the driver in \
         front of the framework's routing): no peer to be ahead of, it is compared with the framework alone, round \
         by round (what a user of the framework pays in throughput for the stack's guarantees).\n\n{}\n{}",
        sizes.mixed_rounds,
        sizes.mixed_requests,
        table.finish(),
        adapted.finish()
    ))
}

fn cpu_tables(sizes: &Sizes) -> Result<String, Box<dyn std::error::Error>> {
    let limited = format!("spawned, limit {SPAWNED_LIMIT}");
    // Inline (the default) first: every other mode is compared with it, round by round.
    let modes = [
        ("inline", LSP_STACK),
        ("spawned", LSP_STACK_SPAWNED),
        (limited.as_str(), LSP_STACK_SPAWNED_LIMITED),
        ("adaptive", LSP_STACK_ADAPTIVE),
    ];
    let mut columns = vec![
        "handler".to_owned(),
        "in flight".to_owned(),
        "inline (req/s)".to_owned(),
    ];
    for (mode, _) in &modes[1..] {
        columns.push(format!("{mode} (req/s)"));
        columns.push(format!("{mode} / inline"));
    }
    let mut throughput = Table::new(&columns.iter().map(String::as_str).collect::<Vec<_>>());
    for spin_us in [0, cpu::SPIN_US] {
        for window in [1, 64] {
            let requests = match (spin_us, window) {
                (0, 1) => sizes.e2e_requests / 4,
                (0, _) => sizes.e2e_requests,
                _ => sizes.cpu_requests,
            };
            // The modes alternate within each round (ABCD ABCD…), so that drift touches all alike.
            let mut runs = vec![Vec::new(); modes.len()];
            for _ in 0..sizes.e2e_rounds {
                for ((_, target), runs) in modes.iter().zip(&mut runs) {
                    let target = *target;
                    runs.push(run(async move {
                        cpu::throughput(&target, window, requests, spin_us).await
                    })?);
                }
            }
            let inline = &runs[0];
            let mut row = vec![
                handler_name(spin_us),
                window.to_string(),
                Interval::of(inline).show(0),
            ];
            for other in &runs[1..] {
                row.push(Interval::of(other).show(0));
                row.push(Interval::of_ratios(other, inline).show(2));
            }
            throughput.row(&row);
        }
    }
    let mut latency = Table::new(&[
        "requests",
        "computing meanwhile",
        "p50 (µs)",
        "p99 (µs)",
        "max of the rounds (µs)",
        "missed",
    ]);
    let us = |samples: &[Duration], p: f64| percentile(samples, p).as_secs_f64() * 1e6;
    for busy in [0, 64] {
        // rounds[mode]: one run per round, the modes alternating within each round.
        let mut rounds = vec![Vec::new(); modes.len()];
        for _ in 0..sizes.cpu_latency_rounds {
            for ((_, target), rounds) in modes.iter().zip(&mut rounds) {
                let (target, samples) = (*target, sizes.cpu_samples);
                rounds.push(run(async move {
                    cpu::cancel_latency(&target, busy, samples, cpu::SPIN_US).await
                })?);
            }
        }
        for ((mode, _), runs) in modes.iter().zip(&rounds) {
            let of_rounds =
                |p: f64| Interval::of(&runs.iter().map(|r| us(&r.samples, p)).collect::<Vec<_>>());
            latency.row(&[
                (*mode).to_owned(),
                if busy == 0 {
                    "none".to_owned()
                } else {
                    format!("{busy} × {} µs, replaced as answered", cpu::SPIN_US)
                },
                of_rounds(50.0).show(1),
                of_rounds(99.0).show(1),
                format!(
                    "{:.1}",
                    runs.iter()
                        .map(|r| us(&r.samples, 100.0))
                        .fold(0.0, f64::max)
                ),
                runs.iter().map(|r| r.missed).sum::<usize>().to_string(),
            ]);
        }
    }
    let held = sizes.in_flight[sizes.in_flight.len() - 1];
    let mut memory = Table::new(&["requests", "heap bytes per request held"]);
    for (mode, target) in modes
        .iter()
        .filter(|(_, target)| target.name != LSP_STACK_SPAWNED_LIMITED.name)
    {
        let bytes = bytes::measure(Held::OverConnection(target.name, Transport::Duplex, held))?;
        memory.row(&[(*mode).to_owned(), format!("{bytes:.0}")]);
    }
    Ok(format!(
        "`CancelStack::lsp()`, LSP framing, in-memory duplex, one connection; client and server share the runtime's 2 \
         workers. A computing handler spins on `Instant::now()` for {} µs in one poll (`bench/spin`). Inline: the \
         driver's default; spawned: `Server::spawn_requests(true)`; limit {SPAWNED_LIMIT}: spawned, over \
         `ConcurrencyLimit::new({SPAWNED_LIMIT})` below the stack; adaptive: `Server::adaptive_requests(true)` (each \
         request polled once inline, moved to a task of its own only if still pending). Throughput: {} rounds, the \
         four modes alternating within each round; in each, {} computing requests ({} trivial ones, a quarter of that with 1 in \
         flight). Each cell is the mean of the rounds with its 95% interval; each ratio is the mean of the rounds' \
         ratios.\n\n{}\nCancel latency: {} rounds, the four modes alternating within each round; in each, {} \
         cancels one at a time, of a request held by its handler, from just before the `$/cancelRequest` frame, \
         already serialized, is written to the cancelled reply read, while the same connection keeps the computing \
         requests in flight. p50 and p99: the mean of the rounds' percentiles with its 95% interval; the max is the \
         largest of every round's, and the missed are counted over all of them.\n\n{}\nMemory: {} requests held (as \
         in figure 3, counted in a process of their own), heap bytes per request held, the client's share \
         included. Counted, not timed: one run each.\n\n{}",
        cpu::SPIN_US,
        sizes.e2e_rounds,
        sizes.cpu_requests,
        sizes.e2e_requests,
        throughput.finish(),
        sizes.cpu_latency_rounds,
        sizes.cpu_samples,
        latency.finish(),
        held,
        memory.finish()
    ))
}

fn handler_name(spin_us: u64) -> String {
    if spin_us == 0 {
        "trivial".to_owned()
    } else {
        format!("computes {spin_us} µs")
    }
}

/// Figure 8's disconnect latency rows: ours in each revision, rmcp's where a hang-up is its cancel, ours in
/// plain JSON-RPC, then jsonrpsee alone and under its adapter, over HTTP and over WebSocket.
const HTTP_LATENCY_TARGETS: [HttpTarget; 8] = [
    http::OURS_STATELESS,
    http::RMCP_STATELESS,
    http::OURS_SESSIONS,
    http::JSONRPC,
    http::JSONRPSEE_HTTP,
    http::JSONRPSEE_ADAPTED_HTTP,
    http::JSONRPSEE_WS,
    http::JSONRPSEE_ADAPTED_WS,
];
/// Figure 8's throughput rows, ours first in each revision, then ours in plain JSON-RPC and jsonrpsee beside it
/// (over HTTP, then over WebSocket), each alone and under its adapter.
const HTTP_THROUGHPUT_TARGETS: [HttpTarget; 9] = [
    http::OURS_STATELESS,
    http::RMCP_STATELESS,
    http::OURS_SESSIONS,
    http::RMCP_SESSIONS,
    http::JSONRPC,
    http::JSONRPSEE_HTTP,
    http::JSONRPSEE_ADAPTED_HTTP,
    http::JSONRPSEE_WS,
    http::JSONRPSEE_ADAPTED_WS,
];
/// jsonrpsee alone and under its adapter, as (alone, adapted) indices into [`HTTP_THROUGHPUT_TARGETS`].
const JSONRPSEE_PAIRS: [(usize, usize); 2] = [(5, 6), (7, 8)];

fn http_tables(sizes: &Sizes) -> Result<String, Box<dyn std::error::Error>> {
    // rounds[target]: one run per round, the servers alternating within each round (ABC ABC…), so that drift
    // touches all alike.
    let mut rounds = vec![Vec::new(); HTTP_LATENCY_TARGETS.len()];
    for _ in 0..sizes.http_latency_rounds {
        for (target, rounds) in HTTP_LATENCY_TARGETS.iter().zip(&mut rounds) {
            let (target, samples) = (*target, sizes.http_samples);
            rounds.push(run(async move {
                http::disconnect_latency(&target, samples).await
            })?);
        }
    }
    let mut latency = Table::new(&[
        "server, revision",
        "p50 (µs)",
        "p99 (µs)",
        "max of the rounds (µs)",
        "missed",
        "left in flight",
    ]);
    let us = |samples: &[Duration], p: f64| percentile(samples, p).as_secs_f64() * 1e6;
    for (target, runs) in HTTP_LATENCY_TARGETS.iter().zip(&rounds) {
        let of_rounds =
            |p: f64| Interval::of(&runs.iter().map(|r| us(&r.samples, p)).collect::<Vec<_>>());
        let left: Option<usize> = runs.iter().map(|r| r.left_in_flight).sum();
        latency.row(&[
            target.name.to_owned(),
            of_rounds(50.0).show(1),
            of_rounds(99.0).show(1),
            format!(
                "{:.1}",
                runs.iter()
                    .map(|r| us(&r.samples, 100.0))
                    .fold(0.0, f64::max)
            ),
            runs.iter().map(|r| r.missed).sum::<usize>().to_string(),
            left.map_or_else(|| "–".to_owned(), |n| n.to_string()),
        ]);
    }
    let mut runs = vec![Vec::new(); HTTP_THROUGHPUT_TARGETS.len()];
    for _ in 0..sizes.e2e_rounds {
        for (target, runs) in HTTP_THROUGHPUT_TARGETS.iter().zip(&mut runs) {
            let (target, clients, total) = (*target, sizes.http_clients, sizes.http_requests);
            runs.push(run(async move {
                http::throughput(&target, clients, total).await
            })?);
        }
    }
    let mut throughput = Table::new(&["server, revision", "requests per second", "vs ours"]);
    // Each row is compared, round by round, with ours of the same revision or kind: the last of ours above it
    // that speaks as it does (or itself). jsonrpsee's WebSocket rows have none (ours has no WebSocket JSON-RPC).
    let mut ours: Option<usize> = None;
    for (index, target) in HTTP_THROUGHPUT_TARGETS.iter().enumerate() {
        if target.name.starts_with("tower-cancel") {
            ours = Some(index);
        }
        let reference = ours.filter(|&o| HTTP_THROUGHPUT_TARGETS[o].speaks == target.speaks);
        throughput.row(&[
            target.name.to_owned(),
            Interval::of(&runs[index]).show(0),
            match reference {
                Some(o) if o == index => "(reference)".to_owned(),
                Some(o) => Interval::of_ratios(&runs[index], &runs[o]).show(2),
                None => "–".to_owned(),
            },
        ]);
    }
    let mut adapted = Table::new(&["jsonrpsee 0.26", "under its adapter / alone"]);
    for (alone, under) in JSONRPSEE_PAIRS {
        let over = match HTTP_THROUGHPUT_TARGETS[alone].speaks {
            http::Speaks::JsonRpcWs => "WebSocket",
            _ => "HTTP",
        };
        adapted.row(&[
            over.to_owned(),
            Interval::of_ratios(&runs[under], &runs[alone]).show(2),
        ]);
    }
    Ok(format!(
        "One endpoint per server at `/mcp` of an axum router on 127.0.0.1, each in its default configuration (ours \
         with `cancel_on_disconnect_in_sessions(true)`), one tool `sleep {{ms, tag}}` whose guard records the \
         instant its future is dropped (rmcp's tool races its work against the request's `ct`). Then ours in plain \
         JSON-RPC, for reference: `JsonRpc` at `/rpc` over `CancelStack::lsp()`, a method `sleep {{ms, tag}}` in \
         place of the tool, one request per POST and its reply the body (no MCP: no session, no `_meta`, no MCP \
         headers); and beside it jsonrpsee 0.26's `Server` with the same method (`register_async_method`, no \
         cancellation code), alone and under `tower-cancel-jsonrpsee`, over HTTP and over WebSocket (jsonrpsee \
         serves both on one port; over WebSocket each client has a connection of its own, and a hang-up is the TCP \
         connection dropped without a close frame).\n\nDisconnect to \
         handler stopped: {} rounds, the servers alternating within each round, each round on a fresh server; in \
         each, {} requests one at a time (after 10 uncounted), each a raw HTTP/1.1 POST (or a WebSocket) on a new connection; \
         once the handler runs, the connection is dropped and the time taken from there to the handler's guard dropped \
         (rmcp's 2025-11-25 sessions are not in this table: a hang-up there is not a cancel). p50 and p99: the mean \
         of the rounds' percentiles with its 95% interval; the max is the largest of every round's; missed and left \
         in flight (at the end of a round) are summed over the rounds; after 3 misses in a row a round gives up, \
         its remaining requests counted missed.\n\n{}\nThroughput: {} rounds, the servers \
         alternating within each round; in each, {} concurrent clients over one keep-alive reqwest pool \
         (HTTP/1.1), {} `tools/call` of `sleep 0` in all; in 2025-11-25 each client opens its own session first. \
         Requests per second: the mean of the rounds with its 95% interval; vs ours: the mean of the rounds' ratios \
         of the row to ours of the same revision (jsonrpsee's HTTP rows: to ours in plain JSON-RPC; its WebSocket \
         rows have no row of ours to compare with).\n\n{}\njsonrpsee under its adapter (`tower-cancel-jsonrpsee`'s \
         `CancelRpcLayer::new()` as its RPC middleware) against jsonrpsee alone, the same server and method: the \
         mean of the rounds' throughput ratios with its 95% interval.\n\n{}",
        sizes.http_latency_rounds,
        sizes.http_samples,
        latency.finish(),
        sizes.e2e_rounds,
        sizes.http_clients,
        sizes.http_requests,
        throughput.finish(),
        adapted.finish()
    ))
}

/// The cross-replica cancel latency goals (p50, p99), ms.
const REPLICA_P50_MS: f64 = 0.5;
const REPLICA_P99_MS: f64 = 1.0;

fn replicas_table(
    sizes: &Sizes,
    targets: &mut Targets,
) -> Result<String, Box<dyn std::error::Error>> {
    let figures = replicas::run(sizes.replica_samples, sizes.replica_rounds)?;
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    // The rounds' `q` quantiles, in ms.
    let per_round = |rounds: &[Vec<Duration>], q: f64| -> Vec<f64> {
        rounds
            .iter()
            .map(|times| ms(replicas::quantile(times, q)))
            .collect()
    };
    let mut table = Table::new(&[
        "bus",
        "cancels per round",
        "p50 (ms)",
        "p99 (ms)",
        "max of the rounds (ms)",
    ]);
    let mut row = |name: &str, rounds: &[Vec<Duration>]| {
        let max = per_round(rounds, 1.0).into_iter().fold(0.0, f64::max);
        table.row(&[
            name.to_owned(),
            sizes.replica_samples.to_string(),
            Interval::of(&per_round(rounds, 0.50)).show(3),
            Interval::of(&per_round(rounds, 0.99)).show(3),
            format!("{max:.3}"),
        ]);
    };
    row("in process (LocalBus)", &figures.local);
    match &figures.redis {
        Some(redis) => {
            row("Redis Stream on loopback (RedisBus)", redis);
            let (p50, p99) = (
                Interval::of(&per_round(redis, 0.50)),
                Interval::of(&per_round(redis, 0.99)),
            );
            targets.add(
                &format!("a cancel across replicas over Redis: p50 at most {REPLICA_P50_MS} ms, p99 at most {REPLICA_P99_MS} ms"),
                format!("p50 {} ms, p99 {} ms", p50.show(3), p99.show(3)),
                "9",
                Verdict::all([p50.at_most(REPLICA_P50_MS), p99.at_most(REPLICA_P99_MS)]),
            );
        }
        None => table.row(&[
            "Redis Stream on loopback (RedisBus)".to_owned(),
            "not measured: no redis-server installed".to_owned(),
            "–".to_owned(),
            "–".to_owned(),
            "–".to_owned(),
        ]),
    }
    Ok(format!(
        "A request hangs on replica A (the MCP stack over a session's exchange); its cancel is made on replica B, \
         where nothing of that id runs, so B publishes it; the time is from B's cancel until A's response future has \
         resolved (handler dropped, no reply: MCP). One cancel at a time, on a 2-worker runtime; Redis is a private \
         `redis-server` on a free loopback port, each replica on its own connections (a writer's `XADD`, a reader's \
         blocking `XREAD`). {} rounds, the two buses alternating within each; p50 and p99: the mean of the rounds' \
         with its 95% interval. The `replicas` example measures the same through HTTP (`--cancels 1000`): the POST \
         to B included.\n\n{}",
        sizes.replica_rounds,
        table.finish()
    ))
}

fn connections_table(
    sizes: &Sizes,
    targets: &mut Targets,
) -> Result<String, Box<dyn std::error::Error>> {
    let idle = sizes.idle_connections;
    let mut memory = Table::new(&["target", "heap bytes per idle connection"]);
    let mut reported = Vec::new();
    for target in connections::TARGETS {
        let bytes = bytes::measure(Held::IdleConnections(target.name, idle))?;
        reported.push(format!("{bytes:.0} ({})", target.name));
        memory.row(&[target.name.to_owned(), format!("{bytes:.0}")]);
    }
    targets.add(
        "(memory per idle connection, reported)",
        format!("bytes per idle connection: {}", reported.join(", ")),
        "11",
        "reported",
    );
    // without[target], with[target]: one entry per round. Within a round the targets alternate, and each target's
    // two runs swap their order from one round to the next (without first, then with first), so that neither
    // always runs second.
    let count = connections::TARGETS.len();
    let (mut without, mut with) = (vec![Vec::new(); count], vec![Vec::new(); count]);
    for round in 0..sizes.connection_rounds {
        for (index, target) in connections::TARGETS.iter().enumerate() {
            let order = if round % 2 == 0 { [0, idle] } else { [idle, 0] };
            for idle_now in order {
                let (target, requests) = (*target, sizes.busy_requests);
                let per_second = run(async move {
                    connections::busy_throughput(target, idle_now, requests).await
                })?;
                if idle_now == 0 {
                    without[index].push(per_second);
                } else {
                    with[index].push(per_second);
                }
            }
        }
    }
    let mut throughput = Table::new(&[
        "target",
        "busy alone (req/s)",
        &format!("beside {idle} idle (req/s)"),
        "beside idle / alone",
    ]);
    for (index, target) in connections::TARGETS.iter().enumerate() {
        let ratio = Interval::of_ratios(&with[index], &without[index]);
        throughput.row(&[
            target.name.to_owned(),
            Interval::of(&without[index]).show(0),
            Interval::of(&with[index]).show(0),
            ratio.show(3),
        ]);
        if index == 0 {
            targets.add(
                &format!("(busy connections' throughput beside {idle} idle ones, ours, reported)"),
                format!("{} of alone", ratio.show(3)),
                "11",
                "reported",
            );
        }
    }
    Ok(format!(
        "One process, one 2-worker runtime, clients and servers on it alike: each connection's serve future a task \
         of its own, as a server's accept loop spawns them, over a Unix socket pair (the kernel holds the socket \
         buffers, not the heap). An idle connection is initialized (`initialize`, its reply, `initialized`), has \
         served one trivial `bench/work`, and then has nothing in flight; its client is a bare socket that writes \
         nothing more. Every connection is served with the busy work's concurrency limit ({window}; ours and \
         the hand-written ones have none): a server configures its connections alike.\n\nMemory: {idle} idle \
         connections opened one after another in a process that counts its heap (the `heap_bytes` binary), the \
         whole process's heap growth over opening them divided by their number: the server's state, its serve \
         task, the runtime's registration of both socket halves, and the client's share (its socket, the same in \
         every row). One connection is opened and kept before counting starts, so that what only the first costs \
         is not spread over the rest. Counted, not timed: one run each.\n\n{}\nThroughput: {busy} busy \
         connections at once, each {} `bench/work` (ms 0) with {window} in flight (the harness's client, as in \
         figure 2), alone and beside {idle} idle connections to the same target (opened before the clock starts, \
         closed after it stops); requests per second of all {busy} together, from their start to the last one's \
         end. {} rounds, the targets alternating within each, each target's two runs in swapped order from one \
         round to the next; each cell the mean of the rounds with its 95% interval, the ratio the mean of the \
         rounds' ratios.\n\n{}",
        memory.finish(),
        sizes.busy_requests,
        sizes.connection_rounds,
        throughput.finish(),
        window = connections::WINDOW,
        busy = connections::BUSY,
    ))
}

fn peer_side_tables(
    sizes: &Sizes,
    targets: &mut Targets,
) -> Result<String, Box<dyn std::error::Error>> {
    let pending = bytes::measure(Held::PendingCalls(sizes.pending_calls, true))?;
    targets.add(
        "(memory per pending outgoing call, reported)",
        format!("{pending:.0} bytes per call"),
        "12",
        "reported",
    );
    let untimed = bytes::measure(Held::PendingCalls(sizes.pending_calls, false))?;
    targets.add(
        "(memory per pending outgoing call without a timeout, reported)",
        format!("{untimed:.0} bytes per call"),
        "12",
        "reported",
    );

    let mut throughput = Table::new(&[
        "in flight",
        "calls",
        "raw client (req/s)",
        "our Peer (calls/s)",
        "Peer / raw client",
        "our Peer, no timeout (calls/s)",
        "no timeout / raw client",
    ]);
    for &window in sizes.windows {
        let total = if window == 1 {
            sizes.peer_requests / 4
        } else {
            sizes.peer_requests
        };
        // The raw client and the Peer (with its default timeout, then without one) alternate, round after round.
        let (mut raw, mut ours, mut untimed) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..sizes.peer_rounds {
            raw.push(
                run(async move {
                    workload::throughput(
                        &LSP_BARE,
                        Transport::Unix,
                        window,
                        total,
                        None,
                        Shape::default(),
                    )
                    .await
                })?
                .per_second,
            );
            ours.push(run(async move {
                peer_side::calls_per_second(window, total, true).await
            })?);
            untimed.push(run(async move {
                peer_side::calls_per_second(window, total, false).await
            })?);
        }
        let ratio = Interval::of_ratios(&ours, &raw);
        let untimed_ratio = Interval::of_ratios(&untimed, &raw);
        throughput.row(&[
            window.to_string(),
            total.to_string(),
            Interval::of(&raw).show(0),
            Interval::of(&ours).show(0),
            ratio.show(3),
            Interval::of(&untimed).show(0),
            untimed_ratio.show(3),
        ]);
        targets.add(
            &format!("(outgoing calls per second, {window} in flight, reported)"),
            format!("{} of the raw client", ratio.show(3)),
            "12",
            "reported",
        );
    }

    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let (mut cancel_p50, mut cancel_p99, mut reply_p50, mut reply_p99) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut max, mut missed) = (0.0f64, 0);
    for _ in 0..sizes.latency_rounds {
        let samples = sizes.cascade_samples;
        let round = run(async move { peer_side::cascade_latency(samples).await })?;
        cancel_p50.push(us(percentile(&round.outgoing_cancel, 50.0)));
        cancel_p99.push(us(percentile(&round.outgoing_cancel, 99.0)));
        reply_p50.push(us(percentile(&round.reply, 50.0)));
        reply_p99.push(us(percentile(&round.reply, 99.0)));
        max = max.max(us(percentile(&round.outgoing_cancel, 100.0)));
        missed += round.missed;
    }
    let mut cascade = Table::new(&["read by the client", "p50 (µs)", "p99 (µs)"]);
    cascade.row(&[
        "the outgoing call's `$/cancelRequest`".to_owned(),
        Interval::of(&cancel_p50).show(1),
        Interval::of(&cancel_p99).show(1),
    ]);
    cascade.row(&[
        "the cancelled request's -32800 reply".to_owned(),
        Interval::of(&reply_p50).show(1),
        Interval::of(&reply_p99).show(1),
    ]);
    let p99 = Interval::of(&cancel_p99);
    targets.add(
        "(cascade: a cancel to the nested call's cancel read, reported)",
        format!(
            "p50 {} µs, p99 {} µs",
            Interval::of(&cancel_p50).show(1),
            p99.show(1)
        ),
        "12",
        "reported",
    );
    Ok(format!(
        "Our `Peer` as a transport's connection gives it: `Server::with_stack(CancelStack::lsp(), handler)` over one \
         end of a Unix socket pair, `Server::peer()` sending through the connection, the driver handing it the \
         replies it reads.\n\nMemory: {} calls sent to a side that reads them and never answers, each call's \
         future held in a `FuturesUnordered` and polled once (its waker registered, as an awaited call's is); the \
         whole process's heap growth from before the first call to the other side having read them all, divided by \
         their number, in a process that counts its heap (the `heap_bytes` binary). The call's future, its entry in \
         the pending table, its `FuturesUnordered` node and its timer (every call has the peer's default timeout of \
         60 s; the timer is made when the call is first polled) are all in it. One run (counted, not timed): \
         **{pending:.0} bytes per pending call**; {untimed:.0} bytes for a call without a timeout (the peer's \
         `without_default_timeout()`).\n\nThroughput: calls completed per second over one connection, at most N in \
         flight (as one completes the next is made), `bench/work` with ms 0 against the bare driver, which answers \
         at once; the reference is the harness's raw client (the one of figure 2: frames written in batches, \
         replies parsed for their id only) against the same server (the Peer's side includes the `FuturesUnordered` that keeps the calls \
         awaited); the Peer's calls with its default timeout, and without one. {} rounds, raw client and Peer \
         alternating within each; each cell the mean of the rounds with its 95% interval, the ratio the mean of the rounds' \
         ratios.\n\n{}\nCascade: a client (raw frames) sends `bench/nested` to our LSP stack; its handler calls \
         the client back through its context's peer (`bench/held`, never answered), so that the call is a child of \
         the request (`CascadeLayer`). Once the client has read that call, it cancels `bench/nested`; the clock \
         starts just before the cancel frame, already serialized, is written, and stops when the client reads the \
         `$/cancelRequest` of the outgoing call (and, second row, the -32800 reply to its own request). One cascade \
         at a time, nothing else in flight; {} rounds of {} cascades, each on a fresh runtime; each cell the mean of \
         the rounds' percentiles with its 95% interval. Max over the rounds: {max:.1} µs; missed: {missed}.\n\n{}",
        sizes.pending_calls,
        sizes.peer_rounds,
        throughput.finish(),
        sizes.latency_rounds,
        sizes.cascade_samples,
        cascade.finish()
    ))
}
