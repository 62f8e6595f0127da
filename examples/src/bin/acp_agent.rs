//! An ACP agent over stdio (one JSON object per line) whose requests the client can cancel.
//!
//! ```text
//! cargo run -p examples --bin acp_agent              # current ACP: $/cancel_request {requestId}
//! cargo run -p examples --bin acp_agent -- --draft   # first draft: $/cancelRequest {id} + capability
//! cargo run -p examples --bin acp_agent -- --timeout-ms 5000   # requests time out after 5 s (-32800)
//! ```
//!
//! `session/prompt` first asks the client `session/request_permission` (through the request's child peer, so the
//! permission request is cancelled with the prompt), then works for `--prompt-ms` milliseconds (default 3000).
//! Two ways end it early, both the stack's business: the turn cancel `session/cancel {sessionId}` (the stack groups
//! requests by their `sessionId`: the prompt answers `{"stopReason":"cancelled"}`, the session's `_demo/sleep`
//! calls -32800) and the request cancel (-32800). Either way the client is sent `$/cancel_request` for the pending
//! permission request. `_demo/sleep {"ms", "sessionId"?}` and `_demo/stats` as in the LSP example.

use std::{
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

use examples::SleepStats;
use serde_json::{json, Value};
use tower::service_fn;
use tower_cancel::{
    dialect::{Acp, AcpDraft, Dialect},
    CancelStack, ErrorObject, Peer, Request,
};
use tower_cancel_io::{Framing, Server};

#[derive(Clone, Default)]
struct Agent {
    stats: SleepStats,
    draft: bool,
    prompt_ms: u64,
    next_session: Arc<AtomicU64>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct SessionParams {
    session_id: String,
}

impl Agent {
    async fn handle(self, req: Request) -> Result<Value, ErrorObject> {
        match req.method() {
            "initialize" => {
                let mut capabilities = json!({
                    "loadSession": false,
                    "promptCapabilities": { "image": false, "audio": false, "embeddedContext": false },
                });
                if self.draft {
                    capabilities["cancellation"] = json!({ "request": true });
                }
                Ok(json!({
                    "protocolVersion": 1,
                    "agentCapabilities": capabilities,
                    "authMethods": [],
                }))
            }
            "session/new" => {
                let n = self.next_session.fetch_add(1, Ordering::SeqCst) + 1;
                Ok(json!({ "sessionId": format!("sess-{n}") }))
            }
            "session/prompt" => self.prompt(&req, req.params_as()?).await,
            // The stack cancelled the session's requests already (it groups them by `sessionId`).
            "session/cancel" => Ok(Value::Null),
            "_demo/sleep" => Ok(examples::sleep(&self.stats, req.params_as()?).await),
            "_demo/stats" => Ok(self.stats.to_json(&req)),
            _ if req.is_notification() => Ok(Value::Null),
            other => Err(ErrorObject::method_not_found(other)),
        }
    }

    async fn prompt(
        &self,
        req: &Request,
        SessionParams { session_id }: SessionParams,
    ) -> Result<Value, ErrorObject> {
        // A `session/cancel` of this session drops this future (and the permission request with it); the stack
        // answers the prompt `{"stopReason":"cancelled"}`.
        let run = self.stats.start();
        if let Some(client) = req.peer() {
            ask_permission(&client, &session_id).await;
        }
        tokio::time::sleep(Duration::from_millis(self.prompt_ms)).await;
        run.finish();
        Ok(json!({ "stopReason": "end_turn" }))
    }
}

/// Ask the client whether the agent may go on. If the prompt is cancelled meanwhile, this future is dropped and the
/// client is sent `$/cancel_request` for the permission request.
async fn ask_permission(client: &Peer, session_id: &str) {
    let params = json!({
        "sessionId": session_id,
        "toolCall": {
            "toolCallId": "think-1",
            "title": "Think for a while",
            "kind": "think",
            "status": "pending",
        },
        "options": [
            { "optionId": "allow", "name": "Allow", "kind": "allow_once" },
            { "optionId": "reject", "name": "Reject", "kind": "reject_once" },
        ],
    });
    match client.request("session/request_permission", params).await {
        Ok(answer) => tracing::info!(outcome = %answer["outcome"], "permission answered"),
        Err(error) => tracing::info!(%error, "permission request failed; working on"),
    }
}

async fn serve<D: Dialect + Clone>(dialect: D, agent: Agent) -> std::io::Result<()> {
    // Requests are grouped by their `sessionId`, so that `session/cancel` ends the session's turn.
    let stack = CancelStack::new(dialect)
        .timeouts(examples::timeouts_from_args())
        .group_by_param("sessionId");
    // The agent calls its client too (session/request_permission): `with_stack` gives the connection a peer that
    // speaks the stack's dialect.
    let handler = service_fn(move |req| agent.clone().handle(req));
    Server::with_stack(stack, handler)
        .serve_stdio(Framing::Ndjson)
        .await
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    examples::init_tracing();
    let agent = Agent {
        draft: examples::flag("--draft"),
        prompt_ms: examples::number_arg("--prompt-ms", 3000),
        ..Agent::default()
    };
    if agent.draft {
        serve(AcpDraft::new(), agent).await
    } else {
        serve(Acp, agent).await
    }
}
