//! rmcp's MCP endpoint over Streamable HTTP, for figure 8: its `StreamableHttpService` (a tower service) mounted
//! at `/mcp` of an axum `Router`, in its default configuration (both revisions: sessions through its
//! `LocalSessionManager` for `2025-11-25`, each `2026-07-28` request on its own).
//!
//! # How a hang-up reaches the handler
//!
//! As over stdio (see [`super::rmcp`]), rmcp never drops a running handler: it fires the request's `ct`. In the
//! stateless revision it does so when the client closes the request's stream; in the session revision a hang-up
//! fires nothing (that revision says a disconnect is not a cancel), so the handler runs to its end. The tool
//! therefore races its work against `ct`, and its [`Work`](crate::probe::Work) guard is dropped when `ct` fires.

use std::{future::Future, io, pin::Pin, sync::Arc};

use rmcp::{
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
        PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    },
    service::{RequestContext, RoleServer},
    transport::streamable_http_server::{
        session::local::LocalSessionManager, StreamableHttpServerConfig, StreamableHttpService,
    },
    ErrorData, ServerHandler,
};

use crate::http::{self, Running, SleepArgs};

/// Start rmcp's endpoint on a free loopback port.
pub fn start() -> Pin<Box<dyn Future<Output = io::Result<Running>> + Send>> {
    Box::pin(async {
        let service: StreamableHttpService<Bench, LocalSessionManager> = StreamableHttpService::new(
            // Called once per session, and once per stateless request.
            || Ok(Bench),
            Arc::new(LocalSessionManager::default()),
            StreamableHttpServerConfig::default(),
        );
        let app = axum::Router::new().nest_service("/mcp", service);
        let addr = http::serve(app).await?;
        Ok(Running {
            addr,
            in_flight: None,
        })
    })
}

/// The handler: one tool, `sleep`, written by hand (no macros, its schema a literal).
#[derive(Clone, Copy, Debug)]
struct Bench;

fn sleep_tool() -> Tool {
    let serde_json::Value::Object(schema) = serde_json::json!({
        "type": "object",
        "properties": { "ms": { "type": "integer" }, "tag": { "type": "integer" } },
    }) else {
        unreachable!("a JSON object literal")
    };
    Tool::new(
        "sleep",
        "Sleeps `ms` milliseconds, then answers \"done\".",
        Arc::new(schema),
    )
}

impl ServerHandler for Bench {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(vec![sleep_tool()]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if request.name != "sleep" {
            return Err(ErrorData::invalid_params(
                format!("no tool {}", request.name),
                None,
            ));
        }
        let arguments = serde_json::Value::Object(request.arguments.unwrap_or_default());
        let args: SleepArgs = serde_json::from_value(arguments)
            .map_err(|e| ErrorData::invalid_params(e.to_string(), None))?;
        // rmcp does not drop this future on cancel; it only fires `ct`, so watch it.
        tokio::select! {
            () = http::sleep(args.ms, args.tag) => {
                Ok(CallToolResult::success(vec![ContentBlock::text("done")]).into())
            }
            // rmcp drops whatever a cancelled request answers; this error never reaches the wire.
            () = context.ct.cancelled() => Err(ErrorData::internal_error("cancelled", None)),
        }
    }
}
