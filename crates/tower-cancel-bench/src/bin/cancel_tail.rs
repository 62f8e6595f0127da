//! The whole distribution of one target's cancel latency, where figure 3 gives p50 and p99: the share of cancels
//! slower than 10, 20 and 50 µs says whether a p99 comes from a slow path that some cancels take (BENCHMARKS.md,
//! the notes on cancel latency) or from a few stalls of the machine.
//!
//! ```text
//! cancel_tail NAME IN_FLIGHT CANCELS RUNS   # e.g. cancel_tail "tower-cancel (LSP)" 1 3000 3
//! ```
//!
//! NAME is a target of the harness as its tables name it. Each run holds IN_FLIGHT requests over an in-memory
//! duplex and cancels CANCELS of them one at a time, as figure 3 does (`workload::cancel_latency`), on a fresh
//! 2-worker runtime; the samples of every run are pooled. Run it under `perf stat` to count what the runs cost in
//! system calls (`-e syscalls:sys_enter_epoll_wait`: how often a worker parked).

use std::{process::ExitCode, time::Duration};

use tower_cancel_bench::{
    client::Transport, report::percentile, run::on_fresh_runtime, target, workload,
};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("cancel_tail: {error}");
            eprintln!("usage: cancel_tail NAME IN_FLIGHT CANCELS RUNS");
            ExitCode::from(2)
        }
    }
}

fn run(args: &[String]) -> Result<String, String> {
    let [name, in_flight, cancels, runs] = args else {
        return Err(format!("4 arguments expected, {} given", args.len()));
    };
    let target = target::by_name(name).ok_or(format!("no target named {name:?}"))?;
    let number = |what: &str, arg: &str| -> Result<u64, String> {
        arg.parse().map_err(|e| format!("{what} {arg:?}: {e}"))
    };
    let in_flight = number("IN_FLIGHT", in_flight)?;
    let cancels = number("CANCELS", cancels)? as usize;
    let runs = number("RUNS", runs)?;

    let mut samples = Vec::new();
    let mut missed = 0;
    for _ in 0..runs {
        let run = on_fresh_runtime(async move {
            workload::cancel_latency(&target, Transport::Duplex, in_flight, cancels).await
        })
        .map_err(|e| e.to_string())?;
        samples.extend(run.samples);
        missed += run.missed;
    }
    let us = |p: f64| percentile(&samples, p).as_secs_f64() * 1e6;
    let slower = |micros: u64| {
        let limit = Duration::from_micros(micros);
        100.0 * samples.iter().filter(|d| **d > limit).count() as f64 / samples.len().max(1) as f64
    };
    Ok(format!(
        "{name}: {} cancels, {missed} missed; p50 {:.1} µs, p90 {:.1}, p99 {:.1}, p99.9 {:.1}, max {:.1}; \
         slower than 10 µs {:.1}%, 20 µs {:.2}%, 50 µs {:.2}%",
        samples.len(),
        us(50.0),
        us(90.0),
        us(99.0),
        us(99.9),
        us(100.0),
        slower(10),
        slower(20),
        slower(50),
    ))
}
