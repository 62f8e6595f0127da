//! An MCP server over stdio (one JSON object per line) whose tool calls the client can cancel with
//! `notifications/cancelled`. A cancelled call gets no reply at all, as MCP says.
//!
//! ```text
//! cargo run -p examples --bin mcp_server
//! ```
//!
//! Tools: `sleep {"ms"}` and `stats` (the sleep handlers' counters).

use examples::SleepStats;
use serde_json::{json, Value};
use tower::{service_fn, ServiceBuilder};
use tower_cancel::{CancelStack, ErrorObject, Request};
use tower_cancel_io::{Framing, Server};

/// Protocol revisions this server can speak; it answers with the client's if it is one of them.
const KNOWN_VERSIONS: &[&str] = &["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];
const DEFAULT_VERSION: &str = "2025-06-18";

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
                "name": "stats",
                "description": "Counters of the sleep tool: started, completed, cancelled, inFlight.",
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
        .layer(CancelStack::mcp())
        .service(service_fn(move |req| handle(stats.clone(), req)));
    Server::new(service).serve_stdio(Framing::Ndjson).await
}
