//! An ACP agent over stdio (one JSON object per line) whose requests the client can cancel.
//!
//! ```text
//! cargo run -p examples --bin acp_agent              # current ACP: $/cancel_request {requestId}
//! cargo run -p examples --bin acp_agent -- --draft   # first draft: $/cancelRequest {id} + capability
//! cargo run -p examples --bin acp_agent -- --timeout-ms 5000   # requests time out after 5 s (-32800)
//! ```
//!
//! `session/prompt` works for `--prompt-ms` milliseconds (default 3000). Two ways end it early: the feature-level
//! `session/cancel {sessionId}` (the application's business: the prompt answers `{"stopReason":"cancelled"}`) and
//! the protocol-level request cancel (the stack's business: -32800). `_demo/sleep` and `_demo/stats` as in the
//! LSP example.

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
use tower::{service_fn, ServiceBuilder};
use tower_cancel::{dialect::Dialect, CancelStack, ErrorObject, Request};
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
            "session/prompt" => self.prompt(req.params_as()?).await,
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
        SessionParams { session_id }: SessionParams,
    ) -> Result<Value, ErrorObject> {
        let token = CancellationToken::new();
        self.prompts
            .lock()
            .unwrap()
            .insert(session_id.clone(), token.clone());
        // Removed on every path, the request being cancelled (this future dropped) included.
        let _entry = PromptEntry {
            prompts: self.prompts.clone(),
            session_id,
        };
        let run = self.stats.start();
        let stop_reason = tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(self.prompt_ms)) => "end_turn",
            () = token.cancelled() => "cancelled",
        };
        run.finish();
        Ok(json!({ "stopReason": stop_reason }))
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

async fn serve<D: Dialect>(stack: CancelStack<D>, agent: Agent) -> std::io::Result<()> {
    let service = ServiceBuilder::new()
        .layer(stack.timeouts(examples::timeouts_from_args()))
        .service(service_fn(move |req| agent.clone().handle(req)));
    Server::new(service).serve_stdio(Framing::Ndjson).await
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
        serve(CancelStack::acp_draft(), agent).await
    } else {
        serve(CancelStack::acp(), agent).await
    }
}
