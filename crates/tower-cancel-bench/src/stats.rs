//! 95% intervals over rounds, and whether a target is met by one.
//!
//! A figure measured in `n` rounds (the targets alternating within each round) is reported as the mean of the
//! rounds with Student's t interval, mean ± t(0.975, n − 1) · s / √n. A comparison between two targets uses the
//! rounds' paired values (the ratio or the difference within each round), so that drift in the machine's speed,
//! which touches both targets of a round alike, cancels out. A target is met only when the whole interval clears it.

use std::fmt;

/// A mean with its 95% interval.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Interval {
    /// The mean of the rounds.
    pub mean: f64,
    /// The interval's lower end.
    pub low: f64,
    /// The interval's upper end.
    pub high: f64,
    /// How many rounds.
    pub rounds: usize,
}

impl Interval {
    /// The mean of `values` and its 95% t interval. With one value the interval is infinite: one round says
    /// nothing of the spread.
    pub fn of(values: &[f64]) -> Self {
        let n = values.len();
        let mean = values.iter().sum::<f64>() / n.max(1) as f64;
        if n < 2 {
            return Self {
                mean,
                low: f64::NEG_INFINITY,
                high: f64::INFINITY,
                rounds: n,
            };
        }
        let variance = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        let half = t_975(n - 1) * (variance / n as f64).sqrt();
        Self {
            mean,
            low: mean - half,
            high: mean + half,
            rounds: n,
        }
    }

    /// The interval of `a[i] / b[i]`, round by round.
    pub fn of_ratios(a: &[f64], b: &[f64]) -> Self {
        let ratios: Vec<f64> = a.iter().zip(b).map(|(a, b)| a / b).collect();
        Self::of(&ratios)
    }

    /// The interval of `a[i] − b[i]`, round by round.
    pub fn of_differences(a: &[f64], b: &[f64]) -> Self {
        let differences: Vec<f64> = a.iter().zip(b).map(|(a, b)| a - b).collect();
        Self::of(&differences)
    }

    /// Whether the value is at most `limit`.
    pub fn at_most(&self, limit: f64) -> Verdict {
        if self.high <= limit {
            Verdict::Met
        } else if self.low > limit {
            Verdict::Missed
        } else {
            Verdict::Unclear
        }
    }

    /// Whether the value is at least `limit`.
    pub fn at_least(&self, limit: f64) -> Verdict {
        if self.low >= limit {
            Verdict::Met
        } else if self.high < limit {
            Verdict::Missed
        } else {
            Verdict::Unclear
        }
    }

    /// The mean and the interval with `decimals` decimals: `0.912 [0.901, 0.923]`.
    pub fn show(&self, decimals: usize) -> String {
        format!(
            "{:.d$} [{:.d$}, {:.d$}]",
            self.mean,
            self.low,
            self.high,
            d = decimals
        )
    }
}

/// Whether a target is met by an interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The whole interval is on the right side of the target.
    Met,
    /// The whole interval is on the wrong side.
    Missed,
    /// The interval straddles the target: not met, not shown missed.
    Unclear,
}

impl Verdict {
    /// Met only if every one is met; missed if any is missed; unclear otherwise.
    pub fn all(verdicts: impl IntoIterator<Item = Verdict>) -> Verdict {
        verdicts
            .into_iter()
            .fold(Verdict::Met, |all, one| match (all, one) {
                (Verdict::Missed, _) | (_, Verdict::Missed) => Verdict::Missed,
                (Verdict::Unclear, _) | (_, Verdict::Unclear) => Verdict::Unclear,
                _ => Verdict::Met,
            })
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verdict::Met => "met",
            Verdict::Missed => "**missed**",
            Verdict::Unclear => "**not met** (the interval straddles the target)",
        })
    }
}

/// Student's t for a two-sided 95% interval with `df` degrees of freedom.
fn t_975(df: usize) -> f64 {
    const TABLE: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042,
    ];
    match df {
        0 => f64::INFINITY,
        1..=30 => TABLE[df - 1],
        31..=60 => 2.000,
        _ => 1.960,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interval_of_known_values() {
        // mean 2, s = 1, n = 3: half-width 4.303 / sqrt(3).
        let interval = Interval::of(&[1.0, 2.0, 3.0]);
        assert_eq!(interval.mean, 2.0);
        let half = 4.303 / 3f64.sqrt();
        assert!((interval.high - (2.0 + half)).abs() < 1e-9);
        assert!((interval.low - (2.0 - half)).abs() < 1e-9);
    }

    #[test]
    fn a_target_is_met_only_when_the_interval_clears_it() {
        let interval = Interval::of(&[0.94, 0.96, 0.95, 0.97]);
        assert_eq!(interval.at_least(0.95), Verdict::Unclear);
        assert_eq!(interval.at_least(0.90), Verdict::Met);
        assert_eq!(interval.at_least(0.99), Verdict::Missed);
        assert_eq!(interval.at_most(1.0), Verdict::Met);
        assert_eq!(Interval::of(&[1.0]).at_most(100.0), Verdict::Unclear);
        assert_eq!(
            Verdict::all([Verdict::Met, Verdict::Unclear]),
            Verdict::Unclear
        );
        assert_eq!(
            Verdict::all([Verdict::Unclear, Verdict::Missed]),
            Verdict::Missed
        );
    }
}
