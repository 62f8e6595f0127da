//! Figures into text: percentiles and Markdown tables.

use std::{fmt::Write, time::Duration};

/// The `p`-th percentile (0 to 100) of `samples`, by the nearest rank; zero for no samples.
pub fn percentile(samples: &[Duration], p: f64) -> Duration {
    if samples.is_empty() {
        return Duration::ZERO;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The median of `values`; zero for none.
pub fn median(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[sorted.len() / 2]
}

/// Microseconds, as the tables show them.
pub fn micros(duration: Duration) -> String {
    format!("{:.1}", duration.as_secs_f64() * 1e6)
}

/// A Markdown table built row by row.
#[derive(Debug)]
pub struct Table {
    text: String,
}

impl Table {
    /// A table with these column headers.
    pub fn new(headers: &[&str]) -> Self {
        let mut text = format!("| {} |\n|", headers.join(" | "));
        for _ in headers {
            text.push_str(" --- |");
        }
        text.push('\n');
        Self { text }
    }

    /// Add a row.
    pub fn row(&mut self, cells: &[String]) {
        let _ = writeln!(self.text, "| {} |", cells.join(" | "));
    }

    /// The table as Markdown.
    pub fn finish(self) -> String {
        self.text
    }
}
