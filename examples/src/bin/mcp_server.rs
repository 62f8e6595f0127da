//! An MCP server over stdio (one JSON object per line) whose tool calls the client can cancel with
//! `notifications/cancelled`. A cancelled call gets no reply at all, as MCP says.
//!
//! ```text
//! cargo run -p examples --bin mcp_server
//! cargo run -p examples --bin mcp_server -- --timeout-ms 5000   # idle timeout 5 s, reset by progress; -32001
//! ```
//!
//! Tools: `sleep {"ms"}`, `progress {"steps", "intervalMs"}` (reports `notifications/progress` after each step when
//! the call carried a progress token) and `stats` (the counters of the sleep and progress handlers).

use std::time::Duration;

use examples::SleepStats;
use serde_json::{json, Value};
use tower::{service_fn, ServiceBuilder};
use tower_cancel::{progress::ProgressUpdate, CancelStack, ErrorObject, Request};
use tower_cancel_io::{Framing, Server};

/// Protocol revisions this server can speak; it answers with the client's if it is one of them.
const KNOWN_VERSIONS: &[&str] = &["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];
const DEFAULT_VERSION: &str = "2025-06-18";

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ProgressArgs {
    steps: u32,
    interval_ms: u64,
}

/// Works `steps` steps of `interval_ms` each, reporting progress after each one.
async fn progress(stats: &SleepStats, req: &Request, args: ProgressArgs) -> Value {
    let run = stats.start();
    let progress = req.progress();
    for step in 1..=args.steps {
        tokio::time::sleep(Duration::from_millis(args.interval_ms)).await;
        if let Some(progress) = &progress {
            let update = ProgressUpdate::new(f64::from(step))
                .total(f64::from(args.steps))
                .message(format!("step {step} of {}", args.steps));
            progress.report(update);
        }
    }
    run.finish();
    json!({
        "content": [{ "type": "text", "text": format!("did {} steps", args.steps) }],
        "structuredContent": { "steps": args.steps },
    })
}

#[derive(serde::Deserialize)]
struct CallParams {
    name: String,
    #[serde(default)]
    arguments: Option<Value>,
}

async fn handle(stats: SleepStats, req: Request) -> Result<Value, ErrorObject> {
    match req.method() {
        "initialize" => {
            let asked: Value = req.params_as()?;
            let version = asked["protocolVersion"]
                .as_str()
                .filter(|v| KNOWN_VERSIONS.contains(v))
                .unwrap_or(DEFAULT_VERSION);
            Ok(json!({
                "protocolVersion": version,
                "capabilities": { "tools": {} },
                "serverInfo": { "name": "tower-cancel-mcp-example", "version": env!("CARGO_PKG_VERSION") },
            }))
        }
        "ping" => Ok(json!({})),
        "tools/list" => Ok(json!({ "tools": [
            {
                "name": "sleep",
                "description": "Waits the given number of milliseconds.",
                "inputSchema": {
                    "type": "object",
                    "properties": { "ms": { "type": "integer", "minimum": 0 } },
                    "required": ["ms"],
                },
            },
            {
                "name": "progress",
                "description": "Works `steps` steps of `intervalMs` each, reporting progress after each step.",
                "inputSchema": {
                    "type": "object",
                    "properties": {
                        "steps": { "type": "integer", "minimum": 0 },
                        "intervalMs": { "type": "integer", "minimum": 0 },
                    },
                    "required": ["steps", "intervalMs"],
                },
            },
            {
                "name": "stats",
                "description": "Counters of the sleep and progress tools: started, completed, cancelled, inFlight.",
                "inputSchema": { "type": "object", "properties": {} },
            },
        ]})),
        "tools/call" => {
            let call: CallParams = req.params_as()?;
            match call.name.as_str() {
                "sleep" => {
                    let args = call.arguments.unwrap_or(Value::Null);
                    let params =
                        serde_json::from_value(args).map_err(ErrorObject::invalid_params)?;
                    let slept = examples::sleep(&stats, params).await;
                    Ok(json!({
                        "content": [{ "type": "text", "text": format!("slept {} ms", slept["slept"]) }],
                        "structuredContent": slept,
                    }))
                }
                "progress" => {
                    let args = call.arguments.unwrap_or(Value::Null);
                    let args = serde_json::from_value(args).map_err(ErrorObject::invalid_params)?;
                    Ok(progress(&stats, &req, args).await)
                }
                "stats" => {
                    let counters = stats.to_json(&req);
                    Ok(json!({
                        "content": [{ "type": "text", "text": counters.to_string() }],
                        "structuredContent": counters,
                    }))
                }
                other => Err(ErrorObject::invalid_params(format!(
                    "unknown tool {other:?}"
                ))),
            }
        }
        _ if req.is_notification() => Ok(Value::Null),
        other => Err(ErrorObject::method_not_found(other)),
    }
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    examples::init_tracing();
    let stats = SleepStats::default();
    let service = ServiceBuilder::new()
        .layer(CancelStack::mcp().timeouts(examples::timeouts_from_args()))
        .service(service_fn(move |req| handle(stats.clone(), req)));
    Server::new(service).serve_stdio(Framing::Ndjson).await
}
