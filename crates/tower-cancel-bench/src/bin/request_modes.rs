//! Where a handler runs, measured on its own: figure 5's workload (10% cancelled, one connection, 64 in flight) and
//! figure 6's (trivial and computing handlers, 1 and 64 in flight; a cancel's latency while 64 handlers compute)
//! for a few targets, the targets alternating within each round, each compared with the first, round by round.
//!
//! ```text
//! request_modes ROUNDS NAME...   # e.g. request_modes 5 "tower-cancel (LSP)" "tower-cancel (LSP), requests adaptive"
//! ```
//!
//! NAME is a target of the harness as its tables name it; figure 6's rows are run for tower-cancel's own LSP
//! targets only (the peers do not serve `bench/spin`, and it is an LSP request). The sizes are a tenth of the harness's, for a quick side by side.

use std::process::ExitCode;

use tower_cancel_bench::{
    client::{Shape, Transport},
    cpu,
    report::percentile,
    run::on_fresh_runtime as run,
    stats::Interval,
    target::{self, Protocol, Target},
    workload,
};

const MIXED_REQUESTS: u64 = 20_000;
const TRIVIAL_REQUESTS: u64 = 20_000;
const SPIN_REQUESTS: u64 = 4_000;
const CANCEL_SAMPLES: usize = 100;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let parsed = args.split_first().and_then(|(rounds, names)| {
        let rounds = rounds.parse::<usize>().ok()?;
        let targets = names
            .iter()
            .map(|name| target::by_name(name))
            .collect::<Option<Vec<_>>>()?;
        (!targets.is_empty()).then_some((rounds, targets))
    });
    let Some((rounds, targets)) = parsed else {
        eprintln!("usage: request_modes ROUNDS NAME...  (NAME: a target of the harness)");
        return ExitCode::from(2);
    };
    match measure(rounds, &targets) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("request_modes: {error}");
            ExitCode::FAILURE
        }
    }
}

fn measure(rounds: usize, targets: &[Target]) -> Result<(), Box<dyn std::error::Error>> {
    let ours: Vec<Target> = targets
        .iter()
        .filter(|t| t.name.starts_with("tower-cancel") && t.protocol == Protocol::Lsp)
        .copied()
        .collect();
    let mixed = each_round(rounds, targets, |target| {
        run(async move {
            workload::throughput(
                &target,
                Transport::Duplex,
                64,
                MIXED_REQUESTS,
                Some(10),
                Shape::default(),
            )
            .await
            .map(|t| t.per_second)
        })
    })?;
    show(
        "figure 5: 10% cancelled, 64 in flight (req/s)",
        targets,
        &mixed,
    );
    for (spin_us, window) in [(0, 1), (0, 64), (cpu::SPIN_US, 1), (cpu::SPIN_US, 64)] {
        let requests = if spin_us == 0 {
            TRIVIAL_REQUESTS
        } else {
            SPIN_REQUESTS
        };
        let runs = each_round(rounds, &ours, |target| {
            run(async move { cpu::throughput(&target, window, requests, spin_us).await })
        })?;
        let title = format!("figure 6: handler {spin_us} µs, {window} in flight (req/s)");
        show(&title, &ours, &runs);
    }
    let latency = each_round(rounds, &ours, |target| {
        run(async move {
            cpu::cancel_latency(&target, 64, CANCEL_SAMPLES, cpu::SPIN_US)
                .await
                .map(|l| percentile(&l.samples, 50.0).as_secs_f64() * 1e6)
        })
    })?;
    show(
        "figure 6: cancel p50 while 64 handlers compute 50 µs (µs)",
        &ours,
        &latency,
    );
    Ok(())
}

/// `rounds` runs of `workload` for each target, the targets alternating within each round.
fn each_round(
    rounds: usize,
    targets: &[Target],
    workload: impl Fn(Target) -> std::io::Result<f64>,
) -> std::io::Result<Vec<Vec<f64>>> {
    let mut runs = vec![Vec::new(); targets.len()];
    for _ in 0..rounds {
        for (target, runs) in targets.iter().zip(&mut runs) {
            runs.push(workload(*target)?);
        }
    }
    Ok(runs)
}

fn show(title: &str, targets: &[Target], runs: &[Vec<f64>]) {
    println!("\n{title}");
    for (target, values) in targets.iter().zip(runs) {
        println!(
            "  {:<60} {:>22}   / first {}",
            target.name,
            Interval::of(values).show(1),
            Interval::of_ratios(values, &runs[0]).show(2)
        );
    }
}
