//! Figure 5's workload for one target (an in-memory duplex, 64 in flight, every tenth request held and cancelled),
//! once, for an instruction profile of what serving a request costs there, client included:
//!
//! ```sh
//! cargo build --release -p tower-cancel-bench --bin serve_profile
//! valgrind --tool=callgrind --callgrind-out-file=ours.out \
//!     target/release/serve_profile "tower-cancel (LSP)" 20000
//! callgrind_annotate --inclusive=yes ours.out | head -80
//! ```
//!
//! NAME is a target of the harness as its tables name it. As with `call_profile`, run two counts and divide the
//! difference of the totals by the difference of the counts: the instructions of one request, without the start-up
//! and the handshake. Each target's client is the same, so the difference between two targets is their servers'.
//!
//! With `--wakes`, it also prints how the target's connection task was polled and woken (see the `wakes` module),
//! which tells figure 5's two kinds of run apart; in time, with the context switches:
//!
//! ```sh
//! perf stat -e task-clock,context-switches target/release/serve_profile "tower-cancel (LSP)" 400000 --wakes
//! ```

use std::process::ExitCode;

use tower_cancel_bench::{
    client::{Shape, Transport},
    run::on_fresh_runtime,
    target, wakes, workload,
};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (name, requests, count_wakes) = match &args[..] {
        [name, requests] => (name, requests, false),
        [name, requests, flag] if flag == "--wakes" => (name, requests, true),
        _ => {
            eprintln!("usage: serve_profile NAME REQUESTS [--wakes]");
            return ExitCode::from(2);
        }
    };
    let Some(target) = target::by_name(name) else {
        eprintln!("serve_profile: no target named {name:?}");
        return ExitCode::from(2);
    };
    let Ok(requests) = requests.parse::<u64>() else {
        eprintln!("serve_profile: REQUESTS must be a whole number, not {requests:?}");
        return ExitCode::from(2);
    };
    let (target, wakes) = if count_wakes {
        let (target, wakes) =
            wakes::watch(target).expect("the only target watched in this process");
        (target, Some(wakes))
    } else {
        (target, None)
    };
    let run = on_fresh_runtime(async move {
        workload::throughput(
            &target,
            Transport::Duplex,
            64,
            requests,
            Some(10),
            Shape::default(),
        )
        .await
    });
    match run {
        Ok(result) => {
            println!(
                "{name}: {requests} requests, {:.0} per second, {} error replies",
                result.per_second, result.errors
            );
            if let Some(wakes) = wakes {
                println!(
                    "its connection task: polled {} times, woken {} times during a poll and {} times between polls",
                    wakes.polls(),
                    wakes.during_poll(),
                    wakes.between_polls()
                );
            }
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("serve_profile: {error}");
            ExitCode::FAILURE
        }
    }
}
