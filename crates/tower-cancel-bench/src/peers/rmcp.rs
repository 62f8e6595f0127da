//! The MCP peer: [rmcp](https://docs.rs/rmcp) 3.11 serving the MCP workload over newline-delimited JSON.
//!
//! # What rmcp does on `notifications/cancelled`
//!
//! Read from rmcp 3.9.0 `src/service.rs` (`serve_inner`), unchanged in 3.11.0: every request runs in its own
//! `tokio::spawn`ed task, with a `RequestContext` whose `ct` is a child of a per-request token kept in the serve
//! loop's `local_ct_pool`. On `notifications/cancelled {"requestId": n}` the loop removes `n`'s token from that
//! pool and cancels it; that is all. The handler task is **not** aborted and its future is **not** dropped: a handler that never looks at
//! `context.ct` runs to its end. When the cancelled handler eventually answers, the loop finds no token for `n` and
//! drops the answer ("dropping response for cancelled request"), so **nothing is sent on the wire for a cancelled
//! request**, as the MCP spec asks. (The same `ServerHandler::on_cancelled` hook is also called, a no-op here.)
//!
//! # How the handler is written
//!
//! Since rmcp only fires the token, `call_tool` races the work against `context.ct.cancelled()` with
//! `tokio::select!`, the cancellable-tool pattern the `RequestContext::ct` doc describes ("this token will be
//! cancelled when the CancelledNotification is received"). On cancel the `work` future, and so its
//! [`Work`](crate::probe::Work) guard, is dropped, and the handler returns an error that rmcp discards.
//!
//! On end of input rmcp waits up to 5 s for in-flight handlers to answer before cancelling their tokens, so a
//! connection closed with work still running (not cancelled) returns late.

use std::sync::Arc;

use rmcp::{
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
        PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    },
    service::{RequestContext, RoleServer},
    ErrorData, ServerHandler, ServiceExt,
};

use crate::{
    probe::{work, WorkParams},
    target::{BoxRead, BoxWrite, ServeFuture},
};

/// Serves one MCP connection with rmcp until the client closes its side. rmcp has no concurrency limit (each request
/// is a task of its own), so the workload's need is not used.
pub fn serve(reader: BoxRead, writer: BoxWrite, _need: usize) -> ServeFuture {
    Box::pin(async move {
        // A handshake that fails (client gone before `initialized`) just ends the connection.
        if let Ok(running) = Bench.serve((reader, writer)).await {
            let _ = running.waiting().await;
        }
    })
}

/// The handler: one tool, `work`, written by hand (no macros, its schema a literal rather than schemars-derived).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bench;

/// The `work` tool, its input schema a plain JSON object schema.
fn work_tool() -> Tool {
    let schema = serde_json::json!({
        "type": "object",
        "properties": { "ms": { "type": "integer" }, "tag": { "type": "integer" } },
        "required": ["ms"],
    });
    let serde_json::Value::Object(schema) = schema else {
        unreachable!("a JSON object literal")
    };
    Tool::new(
        "work",
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
        Ok(ListToolsResult::with_all_items(vec![work_tool()]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if request.name != "work" {
            return Err(ErrorData::invalid_params(
                format!("no tool {}", request.name),
                None,
            ));
        }
        let arguments = serde_json::Value::Object(request.arguments.unwrap_or_default());
        let params: WorkParams = serde_json::from_value(arguments)
            .map_err(|e| ErrorData::invalid_params(e.to_string(), None))?;
        // rmcp does not drop this future on cancel; it only fires `ct`, so watch it.
        tokio::select! {
            () = work(params) => Ok(CallToolResult::success(vec![ContentBlock::text("done")]).into()),
            // rmcp drops whatever a cancelled request answers; this error never reaches the wire.
            () = context.ct.cancelled() => Err(ErrorData::internal_error("cancelled", None)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    use super::*;
    use crate::probe::wait_for_stop;

    /// Writes one newline-delimited JSON frame.
    async fn send(to: &mut (impl AsyncWriteExt + Unpin), frame: serde_json::Value) {
        let mut line = frame.to_string();
        line.push('\n');
        to.write_all(line.as_bytes()).await.unwrap();
    }

    #[tokio::test]
    async fn serves_and_cancels() {
        let (client, server) = tokio::io::duplex(1 << 16);
        let (server_read, server_write) = tokio::io::split(server);
        let served = tokio::spawn(serve(Box::pin(server_read), Box::pin(server_write), 2));
        let (client_read, mut client_write) = tokio::io::split(client);
        let mut lines = BufReader::new(client_read).lines();

        send(&mut client_write, serde_json::json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}}))
        .await;
        let init: serde_json::Value =
            serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
        assert_eq!(init["id"], 0);
        assert!(
            init["result"]["capabilities"]["tools"].is_object(),
            "{init}"
        );
        send(
            &mut client_write,
            serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        )
        .await;

        send(
            &mut client_write,
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "work", "arguments": {"ms": 0, "tag": 8}}}),
        )
        .await;
        let done: serde_json::Value =
            serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
        assert_eq!(done["id"], 1);
        assert_eq!(done["result"]["content"][0]["text"], "done", "{done}");

        send(
            &mut client_write,
            serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "work", "arguments": {"ms": 3_600_000, "tag": 9}}}),
        )
        .await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        send(
            &mut client_write,
            serde_json::json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": 2, "reason": "bench"}}),
        )
        .await;
        let stopped = wait_for_stop(9, Duration::from_secs(1)).await;
        assert!(
            stopped.is_some(),
            "the handler of tag 9 did not stop on cancel"
        );
        // rmcp drops the cancelled handler's answer: nothing at all comes back for id 2.
        let reply = tokio::time::timeout(Duration::from_millis(200), lines.next_line()).await;
        assert!(reply.is_err(), "unexpected frame after cancel: {reply:?}");

        // A split duplex half only reaches EOF on shutdown (the other half keeps the stream alive), so shut it down.
        client_write.shutdown().await.unwrap();
        drop(client_write);
        tokio::time::timeout(Duration::from_secs(5), served)
            .await
            .expect("serve returns on close")
            .unwrap();
    }
}
