//! The targets of BENCHMARKS.md, each judged by the figures of the run that measured it: the harness writes this
//! table at the top of `results.md`, and BENCHMARKS.md copies it.

use crate::report::Table;

/// The targets judged so far in a run.
#[derive(Debug, Default)]
pub struct Targets {
    rows: Vec<[String; 4]>,
}

impl Targets {
    /// Record a target: what it asks, what was measured (with its interval), from which figure, and the verdict.
    pub fn add(&mut self, target: &str, measured: String, figure: &str, verdict: impl ToString) {
        self.rows.push([
            target.to_owned(),
            measured,
            figure.to_owned(),
            verdict.to_string(),
        ]);
    }

    /// Whether nothing was judged (a run of figures that judge none).
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The table.
    pub fn finish(self) -> String {
        let mut table = Table::new(&["target", "measured (mean [95% interval])", "figure", ""]);
        for row in self.rows {
            table.row(&row);
        }
        table.finish()
    }
}
