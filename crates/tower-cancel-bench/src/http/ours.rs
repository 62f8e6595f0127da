//! Our MCP endpoint: `McpHttp` over `CancelStack::mcp()` and a plain handler, as a user writes one.

use std::{future::Future, io, pin::Pin};

use axum::{routing::any_service, Router};
use serde_json::{json, Value};
use tower::{service_fn, ServiceBuilder};
use tower_cancel::{BoxError, CancelStack, ErrorObject, Request};
use tower_cancel_http::mcp::{McpHttp, Revision};

use super::{sleep, Running, SleepArgs};

/// Start our endpoint on a free loopback port: both revisions, a hang-up a cancel in sessions too.
pub fn start() -> Pin<Box<dyn Future<Output = io::Result<Running>> + Send>> {
    Box::pin(async {
        let stack = ServiceBuilder::new()
            .layer(CancelStack::mcp())
            .service(service_fn(handle));
        let endpoint = McpHttp::new(stack).cancel_on_disconnect_in_sessions(true);
        let app = Router::new().route("/mcp", any_service(endpoint.clone()));
        let addr = super::serve(app).await?;
        Ok(Running {
            addr,
            in_flight: Some(Box::new(move || endpoint.in_flight())),
        })
    })
}

/// The handler: `initialize`, `server/discover`, `tools/call` of `sleep`. No cancellation code: a cancel drops
/// its future.
async fn handle(req: Request) -> Result<Value, BoxError> {
    match req.method() {
        "initialize" => Ok(json!({
            "protocolVersion": "2025-11-25",
            "capabilities": { "tools": {} },
            "serverInfo": { "name": "tower-cancel-bench", "version": "0" },
        })),
        "server/discover" => Ok(json!({
            "resultType": "complete",
            "supportedVersions": ["2026-07-28"],
            "capabilities": { "tools": {} },
            "ttlMs": 0,
            "cacheScope": "private",
        })),
        "tools/call" => {
            #[derive(serde::Deserialize)]
            struct Call {
                name: String,
                #[serde(default)]
                arguments: Option<SleepArgs>,
            }
            let stateless = matches!(
                req.extensions().get::<Revision>(),
                Some(Revision::Stateless { .. })
            );
            let call: Call = req.params_as()?;
            drop(req);
            let (Some(args), "sleep") = (call.arguments, call.name.as_str()) else {
                return Err(Box::new(ErrorObject::invalid_params("no such tool")));
            };
            sleep(args.ms, args.tag).await;
            let mut result = json!({ "content": [{ "type": "text", "text": "done" }] });
            if stateless {
                result["resultType"] = json!("complete");
            }
            Ok(result)
        }
        _ if req.is_notification() => Ok(Value::Null),
        method => Err(Box::new(ErrorObject::method_not_found(method))),
    }
}
