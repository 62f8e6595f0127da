//! Criterion's figures for the overhead variants, read back from the files it writes, so that they land in
//! `results.md` with the harness's own.
//!
//! For each benchmark criterion prints, and the table gives, its point estimate of the time per call with its 95%
//! bootstrap interval: the slope of its linear regression of time on iterations where it has one (its default
//! sampling), the mean of the samples where it does not. It is not a median.

use std::{fs, path::Path};

use serde::Deserialize;

/// One benchmark's estimate, in nanoseconds per call.
#[derive(Clone, Copy, Debug)]
pub struct Estimate {
    /// Criterion's point estimate.
    pub point: f64,
    /// The lower end of its 95% interval.
    pub low: f64,
    /// The upper end.
    pub high: f64,
    /// Whether it is the regression's slope (else the mean).
    pub slope: bool,
}

#[derive(Deserialize)]
struct Benchmark {
    function_id: String,
}

#[derive(Deserialize)]
struct Estimates {
    mean: Statistic,
    slope: Option<Statistic>,
}

#[derive(Deserialize)]
struct Statistic {
    point_estimate: f64,
    confidence_interval: Bounds,
}

#[derive(Deserialize)]
struct Bounds {
    lower_bound: f64,
    upper_bound: f64,
}

/// The estimate of the benchmark `name` of `group`, from criterion's last run under `target_dir`, if there is one.
pub fn estimate(target_dir: &Path, group: &str, name: &str) -> Option<Estimate> {
    // Criterion names its folders after the benchmark with some characters replaced; its `benchmark.json` keeps
    // the name as given, so look for that.
    for entry in fs::read_dir(target_dir.join("criterion").join(group)).ok()? {
        let folder = entry.ok()?.path().join("new");
        let Ok(benchmark) = fs::read(folder.join("benchmark.json")) else {
            continue;
        };
        let Ok(benchmark) = serde_json::from_slice::<Benchmark>(&benchmark) else {
            continue;
        };
        if benchmark.function_id != name {
            continue;
        }
        let estimates: Estimates =
            serde_json::from_slice(&fs::read(folder.join("estimates.json")).ok()?).ok()?;
        let slope = estimates.slope.is_some();
        let statistic = estimates.slope.unwrap_or(estimates.mean);
        return Some(Estimate {
            point: statistic.point_estimate,
            low: statistic.confidence_interval.lower_bound,
            high: statistic.confidence_interval.upper_bound,
            slope,
        });
    }
    None
}
