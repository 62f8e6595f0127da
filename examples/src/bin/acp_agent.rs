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
//! Two ways end it early: the feature-level `session/cancel {sessionId}` (the application's business: the prompt
//! answers `{"stopReason":"cancelled"}`) and the protocol-level request cancel (the stack's business: -32800, and
//! the client is sent `$/cancel_request` for the pending permission request). `_demo/sleep` and `_demo/stats` as
//! in the LSP example.

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use examples::SleepStats;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;
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
    // The `session/cancel` switch of each session's running prompt.
    prompts: Arc<Mutex<HashMap<String, CancellationToken>>>,
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
            "session/cancel" => {
                let SessionParams { session_id } = req.params_as()?;
                if let Some(token) = self.prompts.lock().unwrap().get(&session_id) {
                    token.cancel();
                }
                Ok(Value::Null)
            }
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
        let token = CancellationToken::new();
        self.prompts
            .lock()
            .unwrap()
            .insert(session_id.clone(), token.clone());
        // Removed on every path, the request being cancelled (this future dropped) included.
        let entry = PromptEntry {
            prompts: self.prompts.clone(),
            session_id,
        };
        let run = self.stats.start();
        let client = req.peer();
        let work = async {
            if let Some(client) = client {
                ask_permission(&client, &entry.session_id).await;
            }
            tokio::time::sleep(Duration::from_millis(self.prompt_ms)).await;
        };
        let stop_reason = tokio::select! {
            () = work => "end_turn",
            () = token.cancelled() => "cancelled",
        };
        run.finish();
        Ok(json!({ "stopReason": stop_reason }))
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

struct PromptEntry {
    prompts: Arc<Mutex<HashMap<String, CancellationToken>>>,
    session_id: String,
}

impl Drop for PromptEntry {
    fn drop(&mut self) {
        self.prompts.lock().unwrap().remove(&self.session_id);
    }
}

async fn serve<D: Dialect + Clone>(dialect: D, agent: Agent) -> std::io::Result<()> {
    let stack = CancelStack::new(dialect).timeouts(examples::timeouts_from_args());
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
