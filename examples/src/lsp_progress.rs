//! `demo/progress {"steps", "intervalMs"}` of the LSP examples: what each of them reports, so that the three
//! servers (`lsp_server`, `lsp_server_tower_lsp`, `lsp_server_async_lsp`) put the same progress on the wire.
//!
//! The server asks the client to create a token (`window/workDoneProgress/create`), then reports under it:
//! `begin` (titled [`TITLE`], cancellable, at 0 %), one `report` per step after each step's interval ("step i of
//! N", i * 100 / N %), and `end`. The client's `window/workDoneProgress/cancel` of the token stops the request
//! (-32800). A client that refuses the token gets no progress: the steps run all the same.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tower_cancel::{progress::ProgressUpdate, Request};

use crate::SleepStats;

/// The title of the progress (its `begin`).
pub const TITLE: &str = "demo/progress";

/// The params of `demo/progress`.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProgressParams {
    /// How many steps to work.
    pub steps: u32,
    /// How long each step takes, in milliseconds.
    pub interval_ms: u64,
}

impl ProgressParams {
    /// How long each step takes.
    pub fn interval(&self) -> Duration {
        Duration::from_millis(self.interval_ms)
    }

    /// The message of the report after step `step`.
    pub fn message(&self, step: u32) -> String {
        format!("step {step} of {}", self.steps)
    }

    /// The percentage of the report after step `step`.
    pub fn percentage(&self, step: u32) -> u32 {
        step.saturating_mul(100) / self.steps.max(1)
    }

    /// The answer once every step is done.
    pub fn answer(&self) -> Value {
        json!({ "steps": self.steps })
    }
}

/// `lsp_server`'s `demo/progress`, on tower-cancel's own progress API: counted in `stats` like a sleep (a
/// cancelled run drops this future, which ends its progress before the -32800).
pub async fn run(stats: &SleepStats, req: &Request, params: ProgressParams) -> Value {
    let run = stats.start();
    let progress = match req.create_progress().await {
        Ok(progress) => Some(progress),
        Err(error) => {
            // LSP: no progress under a token the client refused.
            tracing::info!(%error, "the client refused the progress token: working without progress");
            None
        }
    };
    let total = f64::from(params.steps.max(1));
    if let Some(progress) = &progress {
        progress.report(ProgressUpdate::new(0.0).total(total).message(TITLE));
    }
    for step in 1..=params.steps {
        tokio::time::sleep(params.interval()).await;
        if let Some(progress) = &progress {
            let update = ProgressUpdate::new(f64::from(step))
                .total(total)
                .message(params.message(step));
            progress.report(update);
        }
    }
    // `end`, before the answer.
    drop(progress);
    run.finish();
    params.answer()
}
