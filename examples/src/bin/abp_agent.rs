//! An ABP agent against `abp_app`: connects, cancels a call while it runs, lets another one time out, reads the
//! app's stats, and shuts the session down, printing one line per step.
//!
//! ```text
//! cargo run -p examples --bin abp_app -- --addr 127.0.0.1:8080
//! cargo run -p examples --bin abp_agent -- --url ws://127.0.0.1:8080/abp
//! ```
//!
//! 1. `initialize`: prints the session id, the app and its capabilities.
//! 2. `sleep {"ms": 60000}`, cancelled through its `CancellationToken` after 100 ms: prints the app's
//!    acknowledgment (`{callId, cancelled: true}`) and the call's result (`{success: false, cancelled: true,
//!    error: {code: "CANCELLED"}}`), as JSON.
//! 3. `sleep {"ms": 60000}` with a timeout of 200 ms: the app stops it and answers `cancelled: true`, code
//!    `TIMEOUT`.
//! 4. `stats`: the app's counters.
//! 5. `shutdown`.
//!
//! Exits with 0 when every answer was the expected one, with 1 (and a message on stderr) when the app cannot be
//! reached or answers otherwise, with 2 without `--url`.

use std::{process::ExitCode, time::Duration};

use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;
use tower_cancel::dialect::abp;
use tower_cancel_http::abp::{
    wire::{AgentInfo, CallResult},
    Agent, AgentError, CallOutcome,
};

#[tokio::main]
async fn main() -> ExitCode {
    examples::init_tracing();
    let Some(url) = examples::string_arg("--url") else {
        eprintln!("abp_agent: --url ws://ADDR/abp is required");
        return ExitCode::from(2);
    };
    match run(&url).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(why) => {
            eprintln!("abp_agent: {why}");
            ExitCode::FAILURE
        }
    }
}

async fn run(url: &str) -> Result<(), String> {
    let info = AgentInfo {
        name: "tower-cancel-abp-agent".into(),
        version: env!("CARGO_PKG_VERSION").into(),
    };
    let (agent, session) = Agent::connect(url, info)
        .await
        .map_err(|e| format!("{url}: {e}"))?;
    let capabilities: Vec<&str> = session
        .capabilities
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    println!(
        "connected: session {} with {} {} (protocol {}), capabilities {}",
        session.session_id,
        session.app.id,
        session.app.version,
        session.protocol_version,
        capabilities.join(", "),
    );

    // The user gives up after 100 ms: the token sends capabilities/cancel and the call waits for both answers.
    let stop = CancellationToken::new();
    tokio::spawn({
        let stop = stop.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            stop.cancel();
        }
    });
    let cancelled = agent
        .call("sleep", json!({ "ms": 60_000 }))
        .cancel_on(stop)
        .reason("the user stopped it")
        .await
        .map_err(failed("the cancelled sleep"))?;
    let ack = cancelled
        .cancel
        .as_ref()
        .ok_or("the cancelled sleep sent no cancel")?;
    println!(
        "cancelled sleep {}: acknowledgment {}",
        cancelled.call_id,
        to_json(ack)
    );
    println!(
        "cancelled sleep {}: result {}",
        cancelled.call_id,
        to_json(&cancelled.result)
    );
    if !ack.cancelled {
        return Err(format!("the cancel was not acknowledged: {}", to_json(ack)));
    }
    expect_cancelled(&cancelled, abp::CANCELLED)?;

    // The app enforces the call's timeout itself: cancelled, with code TIMEOUT.
    let timed_out = agent
        .call("sleep", json!({ "ms": 60_000 }))
        .timeout(Duration::from_millis(200))
        .await
        .map_err(failed("the timed-out sleep"))?;
    println!(
        "timed-out sleep {}: result {}",
        timed_out.call_id,
        to_json(&timed_out.result)
    );
    expect_cancelled(&timed_out, abp::TIMEOUT)?;

    let stats = agent
        .call("stats", Value::Null)
        .await
        .map_err(failed("stats"))?;
    let counters = stats
        .result
        .data
        .as_ref()
        .filter(|_| stats.result.success)
        .ok_or_else(|| format!("stats failed: {}", to_json(&stats.result)))?;
    println!("stats: {counters}");

    agent.shutdown().await.map_err(failed("shutdown"))?;
    println!("shut down");
    Ok(())
}

/// Check that a call ended cancelled with `code`.
fn expect_cancelled(outcome: &CallOutcome, code: &str) -> Result<(), String> {
    let CallResult { success, error, .. } = &outcome.result;
    let got = error.as_ref().map(|error| error.code.as_str());
    if *success || !outcome.result.is_cancelled() || got != Some(code) {
        return Err(format!(
            "expected cancelled: true with code {code}, got {}",
            to_json(&outcome.result)
        ));
    }
    Ok(())
}

fn failed(what: &'static str) -> impl Fn(AgentError) -> String {
    move |error| format!("{what}: {error}")
}

fn to_json(value: &impl serde::Serialize) -> String {
    serde_json::to_string(value).unwrap_or_default()
}
