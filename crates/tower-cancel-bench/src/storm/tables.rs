//! Figure 10's tables: the runs in rounds (the targets alternating within each round), their percentiles with 95%
//! intervals over the rounds, and the bars of `storm.svg`.

use std::time::Duration;

use super::{
    close::{self, CloseRun},
    open_loop::{Plan, CANCEL_LAG},
    under_storm::{self, StormRun, NEED},
};
use crate::{
    plot::Bars,
    report::{percentile, Table},
    run::on_fresh_runtime as run,
    stats::{Interval, Verdict},
    target::{Protocol, Target},
    targets::Targets,
};

/// The goal of another connection's p99 while a connection holding many requests closes (table B), µs: issue 30's
/// 10 ms.
const CLOSE_STALL_TARGET_US: f64 = 10_000.0;

/// The sizes of figure 10.
#[derive(Clone, Copy, Debug)]
pub struct StormSizes {
    /// Ordinary requests per second, in both tables.
    pub ordinary_rate: f64,
    /// Storm requests (each cancelled) per second.
    pub storm_rate: f64,
    /// How long one run of table A sends for.
    pub run_for: Duration,
    /// Rounds of table A.
    pub rounds: usize,
    /// How long a run waits for the replies still due after its last write, and (twice that) for the server to
    /// return once the connection is closed.
    pub grace: Duration,
    /// Requests held on the connection that closes, in table B.
    pub close_held: u64,
    /// Rounds of table B.
    pub close_rounds: usize,
    /// How long B runs before A closes, in table B (its first [`close::WARM_UP`] left out of the window).
    pub close_before: Duration,
}

/// Table A and B as Markdown, with the bars of the plot (one per target, under the storm).
pub fn tables(
    sizes: &StormSizes,
    all: &[Target],
    targets: &mut Targets,
) -> Result<(String, Vec<Bars>), Box<dyn std::error::Error>> {
    let (storm, bars) = storm_table(sizes, all, targets)?;
    let close = close_table(sizes, targets)?;
    let plan = Plan {
        ordinary_rate: sizes.ordinary_rate,
        storm_rate: sizes.storm_rate,
        duration: sizes.run_for,
        grace: sizes.grace,
    };
    let text = format!(
        "Ordinary requests (`bench/work` ms 0; MCP `tools/call` of `work` ms 0) at {:.0} per second, open loop: each \
         is written at its scheduled time whatever the replies do (by a thread of its own that sleeps to that time), \
         and its latency runs from its *scheduled* time to its reply read, so that a server which stalls is charged \
         for every request it delays (no coordinated omission); the writer's own lateness is its column. The storm, \
         on the same connection: {:.0} requests per second held by their handlers, each cancelled {} ms after it \
         is written ({:.0} cancels per second); each cancel timed as in figure 3, from just before its frame is \
         written to the cancelled reply read (LSP), or to the handler's guard dropped (MCP, which answers nothing). \
         One in-memory duplex connection per target and run, client and server on one 2-worker runtime; runs of {} \
         s ({} ordinary requests, {} cancels), {} rounds, the targets and the two loads alternating within each \
         round. The peers configured for the need have their limit at {NEED}; at their defaults (tower-lsp-server \
         4, async-lsp the CPUs) the held storm requests fill their limit, and the ordinary requests wait behind \
         them: that is what their users get. p50 and p99: the mean of the rounds' percentiles with its 95% \
         interval; p999: of all the rounds' samples pooled (one round has too few). A request or cancel not \
         answered within {} ms of the last write is missed, and counts in the percentiles as slower than any \
         answered (a percentile that falls among the missed shows \"missed\"). An MCP cancel that reaches the \
         server before its handler's first poll stops a handler that never began: nothing marks when it took \
         effect, so it is counted apart (untimed, not missed) and left out of the percentiles.\n\n{storm}\nConnection close: \
         connection A (`CancelStack::lsp()`) holds {} requests; connection B, on the same runtime, carries ordinary \
         requests at {:.0} per second; {} ms after B starts, A's client closes A. B's latency (from the scheduled \
         time) over the time before the close (its first {} ms left out), against over the close: the requests \
         scheduled before A's serve future returned (every held request cancelled and dropped) and answered after \
         the close began. p50 and p99: the mean of the {} rounds' with its 95% interval; p999 and max: of all the \
         rounds' samples pooled. The peers are not in this table: it measures the core's close, and holding a \
         million requests in each peer would cost gigabytes and minutes (figure 3's bytes per request).\n\n{close}",
        sizes.ordinary_rate,
        sizes.storm_rate,
        CANCEL_LAG.as_millis(),
        sizes.storm_rate,
        sizes.run_for.as_secs_f64(),
        plan.ordinary_count(),
        plan.storm_count(),
        sizes.rounds,
        sizes.grace.as_millis(),
        sizes.close_held,
        sizes.ordinary_rate,
        sizes.close_before.as_millis(),
        close::WARM_UP.as_millis(),
        sizes.close_rounds,
    );
    Ok((text, bars))
}

/// A percentile in µs, the missed counted as slower than every answered; `None` when it falls among the missed.
fn percentile_with_missed(samples: &[Duration], missed: usize, p: f64) -> Option<f64> {
    let total = samples.len() + missed;
    let rank = ((p / 100.0) * total as f64).ceil() as usize;
    if total == 0 || rank.clamp(1, total) > samples.len() {
        return None;
    }
    // The nearest rank among all: the answered come first.
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    Some(sorted[rank.clamp(1, total) - 1].as_secs_f64() * 1e6)
}

/// The rounds' percentile with its interval, or "missed" when it fell among the missed in any round.
fn over_rounds(values: &[Option<f64>]) -> (String, Option<f64>) {
    match values.iter().copied().collect::<Option<Vec<f64>>>() {
        Some(values) if !values.is_empty() => {
            let interval = Interval::of(&values);
            (interval.show(1), Some(interval.mean))
        }
        _ => ("missed".to_owned(), None),
    }
}

fn pooled(samples: &[&[Duration]], missed: usize, p: f64) -> String {
    let all: Vec<Duration> = samples.iter().flat_map(|s| s.iter().copied()).collect();
    percentile_with_missed(&all, missed, p)
        .map_or_else(|| "missed".to_owned(), |us| format!("{us:.1}"))
}

fn storm_table(
    sizes: &StormSizes,
    all: &[Target],
    targets: &mut Targets,
) -> Result<(String, Vec<Bars>), Box<dyn std::error::Error>> {
    let loads = [0.0, sizes.storm_rate];
    // runs[target][load]: one per round.
    let mut runs: Vec<[Vec<StormRun>; 2]> = all.iter().map(|_| Default::default()).collect();
    for _ in 0..sizes.rounds {
        for (target, runs) in all.iter().zip(&mut runs) {
            for (load, storm_rate) in loads.iter().enumerate() {
                let (target, plan) = (
                    *target,
                    Plan {
                        ordinary_rate: sizes.ordinary_rate,
                        storm_rate: *storm_rate,
                        duration: sizes.run_for,
                        grace: sizes.grace,
                    },
                );
                runs[load].push(run(async move { under_storm::run(&target, plan).await })?);
            }
        }
    }
    let mut table = Table::new(&[
        "target",
        "storm",
        "ordinary p50 (µs)",
        "p99 (µs)",
        "p999 (µs, pooled)",
        "ordinary missed",
        "cancel p50 (µs)",
        "cancel p99 (µs)",
        "cancels missed (left held)",
        "cancelled before the handler ran (MCP, untimed)",
        "writer late p99 (µs)",
        "closed cleanly",
    ]);
    let mut bars = Vec::new();
    for (target, runs) in all.iter().zip(&runs) {
        for (load, rounds) in runs.iter().enumerate() {
            let ordinary = |p| -> Vec<Option<f64>> {
                rounds
                    .iter()
                    .map(|r| percentile_with_missed(&r.ordinary, r.ordinary_missed, p))
                    .collect()
            };
            let cancel = |p| -> Vec<Option<f64>> {
                rounds
                    .iter()
                    .map(|r| percentile_with_missed(&r.cancels, r.cancels_missed, p))
                    .collect()
            };
            let ordinary_missed: usize = rounds.iter().map(|r| r.ordinary_missed).sum();
            let cancels_missed: usize = rounds.iter().map(|r| r.cancels_missed).sum();
            let ordinary_samples: Vec<&[Duration]> =
                rounds.iter().map(|r| &r.ordinary[..]).collect();
            let late: Vec<f64> = rounds
                .iter()
                .map(|r| percentile(&r.lateness, 99.0).as_secs_f64() * 1e6)
                .collect();
            let (ordinary_p99, ordinary_p99_mean) = over_rounds(&ordinary(99.0));
            let (cancel_p50, cancel_p99, cancel_p99_mean) = if load == 0 {
                ("–".to_owned(), "–".to_owned(), None)
            } else {
                let (p99, mean) = over_rounds(&cancel(99.0));
                (over_rounds(&cancel(50.0)).0, p99, mean)
            };
            table.row(&[
                target.name.to_owned(),
                if load == 0 {
                    "none".to_owned()
                } else {
                    format!("{:.0}/s", sizes.storm_rate)
                },
                over_rounds(&ordinary(50.0)).0,
                ordinary_p99,
                pooled(&ordinary_samples, ordinary_missed, 99.9),
                ordinary_missed.to_string(),
                cancel_p50,
                cancel_p99,
                if load == 0 {
                    "–".to_owned()
                } else {
                    cancels_missed.to_string()
                },
                if load == 0 || target.protocol == Protocol::Lsp {
                    "–".to_owned()
                } else {
                    rounds
                        .iter()
                        .map(|r| r.cancelled_before_start)
                        .sum::<usize>()
                        .to_string()
                },
                Interval::of(&late).show(1),
                if rounds.iter().all(|r| r.closed_cleanly) {
                    "yes"
                } else {
                    "no"
                }
                .to_owned(),
            ]);
            if load == 1 {
                bars.push(Bars {
                    name: target.name.to_owned(),
                    cancel_p99: cancel_p99_mean,
                    ordinary_p99: ordinary_p99_mean,
                });
                if target.name.starts_with("tower-cancel (") {
                    targets.add(
                        &format!(
                            "(ordinary requests under a cancel storm, reported: {})",
                            target.name
                        ),
                        format!(
                            "ordinary p99 {} µs, cancel p99 {} µs, {ordinary_missed} ordinary and \
                             {cancels_missed} cancels missed",
                            over_rounds(&ordinary(99.0)).0,
                            over_rounds(&cancel(99.0)).0
                        ),
                        "10",
                        "reported",
                    );
                }
            }
        }
    }
    Ok((table.finish(), bars))
}

fn close_table(
    sizes: &StormSizes,
    targets: &mut Targets,
) -> Result<String, Box<dyn std::error::Error>> {
    let mut runs: Vec<CloseRun> = Vec::new();
    for _ in 0..sizes.close_rounds {
        let (held, rate, before) = (sizes.close_held, sizes.ordinary_rate, sizes.close_before);
        runs.push(run(async move { close::run(held, rate, before).await })?);
    }
    let mut table = Table::new(&[
        "B's requests",
        "samples (all rounds)",
        "p50 (µs)",
        "p99 (µs)",
        "p999 (µs, pooled)",
        "max (µs)",
        "missed",
        "A's close took (ms)",
    ]);
    let took: Vec<f64> = runs
        .iter()
        .map(|r| r.close_took.as_secs_f64() * 1e3)
        .collect();
    let took = Interval::of(&took);
    let returned = runs.iter().all(|r| r.returned);
    for (name, window, missed) in [
        (
            "before A's close",
            runs.iter().map(|r| &r.before[..]).collect::<Vec<_>>(),
            0,
        ),
        (
            "over A's close",
            runs.iter().map(|r| &r.during[..]).collect(),
            runs.iter().map(|r| r.missed).sum(),
        ),
    ] {
        let per_round = |p| -> Vec<Option<f64>> {
            window
                .iter()
                .map(|samples| percentile_with_missed(samples, 0, p))
                .collect()
        };
        let count: usize = window.iter().map(|s| s.len()).sum();
        table.row(&[
            name.to_owned(),
            count.to_string(),
            over_rounds(&per_round(50.0)).0,
            over_rounds(&per_round(99.0)).0,
            pooled(&window, missed, 99.9),
            pooled(&window, missed, 100.0),
            missed.to_string(),
            if name.starts_with("over") {
                format!(
                    "{}{}",
                    took.show(1),
                    if returned { "" } else { " (not returned)" }
                )
            } else {
                "–".to_owned()
            },
        ]);
        if name.starts_with("over") {
            // A round whose p99 fell among B's missed requests misses the goal.
            let verdict = match per_round(99.0).into_iter().collect::<Option<Vec<f64>>>() {
                Some(p99s) if !p99s.is_empty() && missed == 0 => {
                    Interval::of(&p99s).at_most(CLOSE_STALL_TARGET_US)
                }
                _ => Verdict::Missed,
            };
            targets.add(
                &format!(
                    "another connection's p99 at most {} ms while a connection holding {} requests closes",
                    CLOSE_STALL_TARGET_US / 1000.0,
                    sizes.close_held
                ),
                format!(
                    "the other's p99 {} µs, max {} µs over the close; the close took {} ms",
                    over_rounds(&per_round(99.0)).0,
                    pooled(&window, missed, 100.0),
                    took.show(1)
                ),
                "10",
                verdict,
            );
        }
    }
    Ok(table.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_percentile_among_the_missed_is_none() {
        let ms = |n: u64| Duration::from_millis(n);
        let samples = [ms(1), ms(2), ms(3), ms(4)];
        // Nothing missed: the plain nearest rank.
        assert_eq!(percentile_with_missed(&samples, 0, 50.0), Some(2000.0));
        assert_eq!(percentile_with_missed(&samples, 0, 100.0), Some(4000.0));
        // 4 missed of 8: the median is the 4th answered, p51 falls among the missed.
        assert_eq!(percentile_with_missed(&samples, 4, 50.0), Some(4000.0));
        assert_eq!(percentile_with_missed(&samples, 4, 51.0), None);
        assert_eq!(percentile_with_missed(&[], 0, 50.0), None);
    }
}
