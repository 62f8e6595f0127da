//! The benchmark harness: every figure of BENCHMARKS.md in one run.
//!
//! ```text
//! cargo run --release -p tower-cancel-bench              # everything (under 10 minutes on 2 cores)
//! cargo run --release -p tower-cancel-bench -- --quick   # each workload small: proves the harness works
//! cargo run --release -p tower-cancel-bench -- --out DIR # where results.md and cancel-latency.svg go
//! cargo run --release -p tower-cancel-bench -- --only 3  # one figure (1 to 6, or 8) alone
//! ```

use std::{fs, future::Future, path::PathBuf, time::Instant};

use tower_cancel_bench::{
    client::Transport,
    cpu,
    http::{self, HttpTarget},
    memory,
    ours::{
        LSP_BARE, LSP_STACK, LSP_STACK_SPAWNED, LSP_STACK_SPAWNED_LIMITED, MCP_STACK, SPAWNED_LIMIT,
    },
    overhead, peers,
    plot::{self, Series},
    report::{median, micros, percentile, Table},
    scale,
    target::Target,
    workload,
};

#[global_allocator]
static GLOBAL: &stats_alloc::StatsAlloc<std::alloc::System> = memory::ALLOCATOR;

/// How big each workload is.
struct Sizes {
    overhead_calls: i64,
    overhead_rounds: usize,
    e2e_requests: u64,
    e2e_rounds: usize,
    windows: &'static [usize],
    in_flight: &'static [u64],
    cancel_samples: usize,
    scale_held: &'static [usize],
    scale_samples: usize,
    mixed_requests: u64,
    cpu_requests: u64,
    cpu_samples: usize,
    http_samples: usize,
    http_clients: usize,
    http_requests: u64,
}

const FULL: Sizes = Sizes {
    overhead_calls: 200_000,
    overhead_rounds: 7,
    e2e_requests: 100_000,
    e2e_rounds: 3,
    windows: &[1, 64, 1024],
    in_flight: &[1, 1_000, 10_000, 100_000],
    cancel_samples: 1_000,
    scale_held: &[1_000, 1_000_000],
    scale_samples: 1_000,
    mixed_requests: 100_000,
    cpu_requests: 20_000,
    cpu_samples: 500,
    http_samples: 1_000,
    http_clients: 16,
    http_requests: 50_000,
};

const QUICK: Sizes = Sizes {
    overhead_calls: 2_000,
    overhead_rounds: 3,
    e2e_requests: 2_000,
    e2e_rounds: 1,
    windows: &[1, 64],
    in_flight: &[1, 100],
    cancel_samples: 10,
    scale_held: &[100, 10_000],
    scale_samples: 50,
    mixed_requests: 2_000,
    cpu_requests: 500,
    cpu_samples: 10,
    http_samples: 20,
    http_clients: 16,
    http_requests: 400,
};

const LSP_TARGETS: [Target; 3] = [LSP_STACK, peers::TOWER_LSP, peers::ASYNC_LSP];
const MCP_TARGETS: [Target; 2] = [MCP_STACK, peers::RMCP];

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
    // `--only N`: run figure N alone (1 to 6, or 8), to profile it or to refresh one table.
    let only = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1))
        .cloned();
    let wanted = |figure: &str| only.as_deref().is_none_or(|only| only == figure);
    let began = Instant::now();

    let mut text = format!(
        "# Results{}\n\n{}\n",
        if quick {
            " (quick mode: sizes too small to mean anything)"
        } else {
            ""
        },
        machine()
    );
    let mut section = |title: &str, body: String| {
        let part = format!("## {title}\n\n{body}\n");
        println!("{part}");
        text.push_str(&part);
    };

    if wanted("1") {
        section(
            "1. Overhead in process (ns per request)",
            overhead_table(sizes),
        );
    }
    if wanted("2") {
        section(
            "2. End to end throughput (requests per second)",
            throughput_table(sizes)?,
        );
    }
    let mut series = Vec::new();
    if wanted("3") {
        let (latency_text, lines) = latency_tables(sizes)?;
        section(
            "3. Cancel latency (µs) and 5. memory per request in flight",
            latency_text,
        );
        series = lines;
    }
    if wanted("4") {
        section("4. Scale in process", scale_table(sizes));
    }
    if wanted("5") {
        section(
            "5. Peers: throughput with 10% of requests cancelled",
            mixed_table(sizes)?,
        );
    }
    if wanted("6") {
        section(
            "6. CPU-bound handlers: requests inline or spawned",
            cpu_tables(sizes)?,
        );
    }
    if wanted("8") {
        section("8. HTTP: MCP Streamable HTTP", http_tables(sizes)?);
    }

    fs::create_dir_all(&out)?;
    fs::write(out.join("results.md"), &text)?;
    if !series.is_empty() {
        plot::cancel_latency(&out.join("cancel-latency.svg"), &series)?;
    }
    println!(
        "written: {}/results.md and cancel-latency.svg in {:.0} s",
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
    format!("Machine: {cpu}, {cores} cores available; {profile} build; tokio multi-thread runtime with 2 workers.\n")
}

/// Run `work` on a fresh runtime, so that no run inherits another's tasks.
fn run<F: Future + Send + 'static>(work: F) -> F::Output
where
    F::Output: Send + 'static,
{
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        tokio::spawn(work)
            .await
            .expect("the workload does not panic")
    })
}

fn overhead_table(sizes: &Sizes) -> String {
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
        for (index, (_, call)) in variants.iter_mut().enumerate() {
            let start = Instant::now();
            for _ in 0..sizes.overhead_calls {
                call(next_id);
                next_id += 1;
            }
            times[index].push(start.elapsed().as_nanos() as f64 / sizes.overhead_calls as f64);
        }
    }
    let medians: Vec<f64> = times.iter().map(|t| median(t)).collect();
    let bare = medians[1];
    let mut table = Table::new(&[
        "variant",
        "ns per request (median)",
        "added to the bare service (ns)",
        "throughput vs bare",
    ]);
    for ((name, _), ns) in variants.iter().zip(&medians) {
        table.row(&[
            (*name).to_owned(),
            format!("{ns:.0}"),
            format!("{:+.0}", ns - bare),
            format!("{:.2}", bare / ns),
        ]);
    }
    format!(
        "{} calls per round, {} rounds, median. A call makes the request (method string, params), calls the service and \
         takes the answer (the trivial handler is ready at once).\n\n{}",
        sizes.overhead_calls,
        sizes.overhead_rounds,
        table.finish()
    )
}

fn throughput_table(sizes: &Sizes) -> Result<String, Box<dyn std::error::Error>> {
    let mut table = Table::new(&[
        "transport",
        "in flight",
        "bare driver (req/s)",
        "full stack (req/s)",
        "ratio",
    ]);
    for transport in [Transport::Duplex, Transport::Unix] {
        for &window in sizes.windows {
            let requests = if window == 1 {
                sizes.e2e_requests / 4
            } else {
                sizes.e2e_requests
            };
            let (mut bare, mut stack) = (Vec::new(), Vec::new());
            for _ in 0..sizes.e2e_rounds {
                bare.push(
                    run(async move {
                        workload::throughput(&LSP_BARE, transport, window, requests, None).await
                    })?
                    .per_second,
                );
                stack.push(
                    run(async move {
                        workload::throughput(&LSP_STACK, transport, window, requests, None).await
                    })?
                    .per_second,
                );
            }
            let (bare, stack) = (median(&bare), median(&stack));
            table.row(&[
                transport.name().to_owned(),
                window.to_string(),
                format!("{bare:.0}"),
                format!("{stack:.0}"),
                format!("{:.3}", stack / bare),
            ]);
        }
    }
    Ok(format!(
        "LSP framing, trivial handler (`bench/work` with ms 0), one connection, median of {} runs of {} requests \
         (a quarter of that with 1 in flight), bare and stack alternating.\n\n{}",
        sizes.e2e_rounds,
        sizes.e2e_requests,
        table.finish()
    ))
}

fn latency_tables(sizes: &Sizes) -> Result<(String, Vec<Series>), Box<dyn std::error::Error>> {
    let mut table = Table::new(&[
        "target",
        "in flight",
        "p50 (µs)",
        "p99 (µs)",
        "max (µs)",
        "missed",
        "heap bytes per request held",
        "closed cleanly",
    ]);
    let mut series = Vec::new();
    for target in LSP_TARGETS.iter().chain(&MCP_TARGETS) {
        let mut line = Series {
            name: target.name.to_owned(),
            points: Vec::new(),
        };
        for &in_flight in sizes.in_flight {
            let samples = sizes.cancel_samples;
            let target = *target;
            let result = run(async move {
                workload::cancel_latency(&target, Transport::Duplex, in_flight, samples).await
            })?;
            let p99 = percentile(&result.samples, 99.0);
            table.row(&[
                target.name.to_owned(),
                in_flight.to_string(),
                micros(percentile(&result.samples, 50.0)),
                micros(p99),
                micros(percentile(&result.samples, 100.0)),
                result.missed.to_string(),
                format!("{:.0}", result.bytes_per_request),
                if result.closed_cleanly { "yes" } else { "no" }.to_owned(),
            ]);
            line.points
                .push((in_flight as f64, p99.as_secs_f64() * 1e6));
        }
        series.push(line);
    }
    Ok((
        format!(
            "In-memory duplex, {} cancels per row, one at a time, each cancelled request replaced so that the count \
             stays. LSP: from the `$/cancelRequest` frame written to the cancelled reply read. MCP sends no reply to a \
             cancelled request: from the `notifications/cancelled` frame written to the handler stopped (its guard \
             dropped). Heap bytes: the whole process's heap growth while the requests were sent, divided by their \
             number (the client's share is the same for every target).\n\n{}",
            sizes.cancel_samples,
            table.finish()
        ),
        series,
    ))
}

fn scale_table(sizes: &Sizes) -> String {
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
        "max (µs)",
        "cancel the rest (ms)",
        "left in registry",
    ]);
    for &held in sizes.scale_held {
        let s = scale::measure(held, sizes.scale_samples);
        table.row(&[
            held.to_string(),
            format!("{:.0}", s.bare_bytes),
            format!("{:.0}", s.stack_bytes),
            format!("{:.0}", s.stack_bytes - s.bare_bytes),
            format!("{:.1}", s.hold_time.as_secs_f64() * 1e3),
            micros(percentile(&s.cancel_one, 50.0)),
            micros(percentile(&s.cancel_one, 99.0)),
            micros(percentile(&s.cancel_one, 100.0)),
            format!("{:.1}", s.cancel_all.as_secs_f64() * 1e3),
            s.left_in_registry.to_string(),
        ]);
    }
    format!(
        "`CancelStack::lsp()` over a handler that never finishes, called and polled once per request in process (no \
         connection); {} single cancels spread over the table (the cancel notification called, the cancelled reply \
         taken), then the rest cancelled at once as a closed connection does. Bytes are heap bytes per request held.\n\n{}",
        sizes.scale_samples,
        table.finish()
    )
}

fn mixed_table(sizes: &Sizes) -> Result<String, Box<dyn std::error::Error>> {
    let mut table = Table::new(&[
        "target",
        "requests per second",
        "error replies",
        "vs tower-cancel",
    ]);
    for targets in [&LSP_TARGETS[..], &MCP_TARGETS[..]] {
        let mut ours = 0.0;
        for target in targets {
            let target = *target;
            let requests = sizes.mixed_requests;
            let result = run(async move {
                workload::throughput(&target, Transport::Duplex, 64, requests, Some(10)).await
            })?;
            if ours == 0.0 {
                ours = result.per_second;
            }
            table.row(&[
                target.name.to_owned(),
                format!("{:.0}", result.per_second),
                result.errors.to_string(),
                format!("{:.2}", result.per_second / ours),
            ]);
        }
    }
    Ok(format!(
        "In-memory duplex, 64 in flight, {} requests; every tenth is held by its handler and cancelled right after it \
         is sent (LSP answers it with an error; MCP answers nothing, so it counts as done when the cancel is written).\n\n{}",
        sizes.mixed_requests,
        table.finish()
    ))
}

fn cpu_tables(sizes: &Sizes) -> Result<String, Box<dyn std::error::Error>> {
    let limited = format!("spawned, limit {SPAWNED_LIMIT}");
    let modes = [
        ("inline", LSP_STACK),
        ("spawned", LSP_STACK_SPAWNED),
        (limited.as_str(), LSP_STACK_SPAWNED_LIMITED),
    ];
    let mut throughput = Table::new(&[
        "handler",
        "in flight",
        "inline (req/s)",
        "spawned (req/s)",
        "spawned / inline",
        &format!("{limited} (req/s)"),
        &format!("{limited} / inline"),
    ]);
    for spin_us in [0, cpu::SPIN_US] {
        for window in [1, 64] {
            let requests = match (spin_us, window) {
                (0, 1) => sizes.e2e_requests / 4,
                (0, _) => sizes.e2e_requests,
                _ => sizes.cpu_requests,
            };
            // Rounds interleave the modes, so that drift in the machine's speed touches all alike.
            let mut runs = vec![Vec::new(); modes.len()];
            for _ in 0..sizes.e2e_rounds {
                for ((_, target), runs) in modes.iter().zip(&mut runs) {
                    let target = *target;
                    runs.push(run(async move {
                        cpu::throughput(&target, window, requests, spin_us).await
                    })?);
                }
            }
            let [inline, spawned, limited] = [0, 1, 2].map(|mode| median(&runs[mode]));
            throughput.row(&[
                handler_name(spin_us),
                window.to_string(),
                format!("{inline:.0}"),
                format!("{spawned:.0}"),
                format!("{:.2}", spawned / inline),
                format!("{limited:.0}"),
                format!("{:.2}", limited / inline),
            ]);
        }
    }
    let mut latency = Table::new(&[
        "requests",
        "computing meanwhile",
        "p50 (µs)",
        "p99 (µs)",
        "max (µs)",
        "missed",
    ]);
    for busy in [0, 64] {
        for (mode, target) in modes.iter() {
            let (target, samples) = (*target, sizes.cpu_samples);
            let result =
                run(
                    async move { cpu::cancel_latency(&target, busy, samples, cpu::SPIN_US).await },
                )?;
            latency.row(&[
                (*mode).to_owned(),
                if busy == 0 {
                    "none".to_owned()
                } else {
                    format!("{busy} × {} µs, replaced as answered", cpu::SPIN_US)
                },
                micros(percentile(&result.samples, 50.0)),
                micros(percentile(&result.samples, 99.0)),
                micros(percentile(&result.samples, 100.0)),
                result.missed.to_string(),
            ]);
        }
    }
    let held = sizes.in_flight[sizes.in_flight.len() - 1];
    let mut memory = Table::new(&["requests", "heap bytes per request held"]);
    for (mode, target) in &modes[..2] {
        let target = *target;
        let result =
            run(
                async move { workload::cancel_latency(&target, Transport::Duplex, held, 1).await },
            )?;
        memory.row(&[
            (*mode).to_owned(),
            format!("{:.0}", result.bytes_per_request),
        ]);
    }
    Ok(format!(
        "`CancelStack::lsp()`, LSP framing, in-memory duplex, one connection; client and server share the runtime's 2 \
         workers. A computing handler spins on `Instant::now()` for {} µs in one poll (`bench/spin`). Inline: the \
         driver's default; spawned: `Server::spawn_requests(true)`; limit {SPAWNED_LIMIT}: spawned, over \
         `ConcurrencyLimit::new({SPAWNED_LIMIT})` below the stack. Throughput: median of {} runs of {} computing \
         requests ({} trivial ones, a quarter of that with 1 in flight), the modes alternating.\n\n{}\nCancel \
         latency: {} cancels per row, one at a time, of a request held by its handler, from the `$/cancelRequest` \
         frame written to the cancelled reply read, while the same connection keeps the computing requests in \
         flight.\n\n{}\nMemory: {} requests held (as in figure 3), heap bytes per request held, the client's share \
         included.\n\n{}",
        cpu::SPIN_US,
        sizes.e2e_rounds,
        sizes.cpu_requests,
        sizes.e2e_requests,
        throughput.finish(),
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

/// Figure 8's disconnect latency rows: ours in each revision, rmcp's where a hang-up is its cancel.
const HTTP_LATENCY_TARGETS: [HttpTarget; 3] = [
    http::OURS_STATELESS,
    http::RMCP_STATELESS,
    http::OURS_SESSIONS,
];
/// Figure 8's throughput rows, ours first in each revision.
const HTTP_THROUGHPUT_TARGETS: [HttpTarget; 4] = [
    http::OURS_STATELESS,
    http::RMCP_STATELESS,
    http::OURS_SESSIONS,
    http::RMCP_SESSIONS,
];

fn http_tables(sizes: &Sizes) -> Result<String, Box<dyn std::error::Error>> {
    let mut latency = Table::new(&[
        "server, revision",
        "p50 (µs)",
        "p99 (µs)",
        "max (µs)",
        "missed",
        "left in flight",
    ]);
    for target in HTTP_LATENCY_TARGETS {
        let samples = sizes.http_samples;
        let result = run(async move { http::disconnect_latency(&target, samples).await })?;
        latency.row(&[
            target.name.to_owned(),
            micros(percentile(&result.samples, 50.0)),
            micros(percentile(&result.samples, 99.0)),
            micros(percentile(&result.samples, 100.0)),
            result.missed.to_string(),
            result
                .left_in_flight
                .map_or_else(|| "–".to_owned(), |n| n.to_string()),
        ]);
    }
    // Rounds interleave the servers, so that drift in the machine's speed touches all alike.
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
    let mut ours = 0.0;
    for (target, runs) in HTTP_THROUGHPUT_TARGETS.iter().zip(&runs) {
        let per_second = median(runs);
        if target.name.starts_with("tower-cancel") {
            ours = per_second;
        }
        throughput.row(&[
            target.name.to_owned(),
            format!("{per_second:.0}"),
            format!("{:.2}", per_second / ours),
        ]);
    }
    Ok(format!(
        "One endpoint per server at `/mcp` of an axum router on 127.0.0.1, each in its default configuration (ours \
         with `cancel_on_disconnect_in_sessions(true)`), one tool `sleep {{ms, tag}}` whose guard records the \
         instant its future is dropped (rmcp's tool races its work against the request's `ct`).\n\nDisconnect to \
         handler stopped: {} requests per row, one at a time, each a raw HTTP/1.1 POST on a new connection; once \
         the handler runs, the connection is dropped and the time taken from there to the handler's guard dropped \
         (rmcp's 2025-11-25 sessions are not in this table: a hang-up there is not a cancel).\n\n{}\nThroughput: \
         {} concurrent clients over one keep-alive reqwest pool (HTTP/1.1), {} `tools/call` of `sleep 0` in all, \
         median of {} runs, the servers alternating; in 2025-11-25 each client opens its own session first.\n\n{}",
        sizes.http_samples,
        latency.finish(),
        sizes.http_clients,
        sizes.http_requests,
        sizes.e2e_rounds,
        throughput.finish()
    ))
}
