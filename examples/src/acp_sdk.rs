//! `acp_agent` written with the ACP Rust SDK (`agent-client-protocol` 5.2): an `Agent.v1()` builder with a handler
//! per method, the way an SDK agent is written, served under the stack by `tower-cancel-acp`
//! (`acp_agent_sdk`). The same wire as `acp_agent` (CONTRACT.md).
//!
//! Each long handler moves its work onto the connection (`cx.spawn`) and watches its request's
//! `RequestCancellation` (`run_until_cancelled`), as the SDK asks: the SDK reads a cancel only between handlers.
//! `session/cancel` is the stack's (`acp_agent_sdk` groups requests by `sessionId`): it answers the session's
//! prompt `{"stopReason":"cancelled"}` and its sleeps -32800, and the bridge fires their `RequestCancellation`.

use std::{
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

use agent_client_protocol::{
    on_receive_notification, on_receive_request,
    v1::{
        schema::{
            CancelNotification, NewSessionRequest, NewSessionResponse, PermissionOption,
            PermissionOptionKind, PromptRequest, PromptResponse, RequestPermissionRequest,
            StopReason, ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields, ToolKind,
        },
        ConnectionTo, Responder,
    },
    Agent, Client, ConnectTo, Error, JsonRpcRequest, JsonRpcResponse,
};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::{InFlight, SleepStats};

/// `initialize`, answered as CONTRACT.md spells it (the SDK's typed answer adds capabilities `acp_agent` does not
/// declare).
#[derive(Debug, Clone, Serialize, Deserialize, JsonRpcRequest)]
#[request(method = "initialize", response = Answer)]
#[serde(transparent)]
pub struct Initialize(Value);

/// `_demo/sleep {"ms", "sessionId"?}` (the stack reads the session; the handler needs only `ms`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonRpcRequest)]
#[request(method = "_demo/sleep", response = Answer)]
pub struct DemoSleep {
    ms: u64,
}

/// `_demo/stats`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonRpcRequest)]
#[request(method = "_demo/stats", response = Answer)]
pub struct DemoStats {}

/// An answer as JSON.
#[derive(Debug, Clone, Serialize, Deserialize, JsonRpcResponse)]
#[serde(transparent)]
pub struct Answer(Value);

/// The agent's state, shared by its handlers (and by every agent a restart builds).
#[derive(Clone, Debug, Default)]
pub struct SdkAgent {
    stats: SleepStats,
    in_flight: InFlight,
    prompt_ms: u64,
    next_session: Arc<AtomicU64>,
}

impl SdkAgent {
    /// An agent whose prompts work `prompt_ms` after the permission answer.
    pub fn new(prompt_ms: u64) -> Self {
        Self {
            prompt_ms,
            ..Self::default()
        }
    }

    /// Where `_demo/stats` finds `inFlight`: the connection's registry, given once the server exists.
    pub fn in_flight(&self) -> &InFlight {
        &self.in_flight
    }

    /// The agent: the SDK's builder with a handler for each method.
    pub fn build(&self) -> impl ConnectTo<Client> {
        let (prompt, sleep, stats) = (self.clone(), self.clone(), self.clone());
        let sessions = self.next_session.clone();
        Agent
            .v1()
            .name("tower-cancel-acp-example")
            .on_receive_request(
                async |_: Initialize, responder: Responder<Answer>, _: ConnectionTo<Client>| {
                    responder.respond(Answer(json!({
                        "protocolVersion": 1,
                        "agentCapabilities": {
                            "loadSession": false,
                            "promptCapabilities": { "image": false, "audio": false, "embeddedContext": false },
                        },
                        "authMethods": [],
                    })))
                },
                on_receive_request!(),
            )
            .on_receive_request(
                async move |_: NewSessionRequest,
                            responder: Responder<NewSessionResponse>,
                            _: ConnectionTo<Client>| {
                    let n = sessions.fetch_add(1, Ordering::SeqCst) + 1;
                    responder.respond(NewSessionResponse::new(format!("sess-{n}")))
                },
                on_receive_request!(),
            )
            .on_receive_request(
                async move |request: PromptRequest,
                            responder: Responder<PromptResponse>,
                            cx: ConnectionTo<Client>| {
                    let agent = prompt.clone();
                    let cancellation = responder.cancellation();
                    cx.clone().spawn(async move {
                        let result = cancellation.run_until_cancelled(agent.prompt(request, cx)).await;
                        responder.respond_with_result(result)
                    })
                },
                on_receive_request!(),
            )
            .on_receive_notification(
                // The stack ended the session's turn already (it groups requests by `sessionId`), and the
                // bridge fired the cancelled handlers' `RequestCancellation`.
                async move |_: CancelNotification, _: ConnectionTo<Client>| Ok(()),
                on_receive_notification!(),
            )
            .on_receive_request(
                async move |request: DemoSleep, responder: Responder<Answer>, cx: ConnectionTo<Client>| {
                    let stats = sleep.stats.clone();
                    let cancellation = responder.cancellation();
                    cx.spawn(async move {
                        let work = async {
                            let answer = crate::sleep(&stats, crate::SleepParams { ms: request.ms }).await;
                            Ok(Answer(answer))
                        };
                        responder.respond_with_result(cancellation.run_until_cancelled(work).await)
                    })
                },
                on_receive_request!(),
            )
            .on_receive_request(
                async move |_: DemoStats, responder: Responder<Answer>, _: ConnectionTo<Client>| {
                    // The connection's registry counts this request too: it is running.
                    let in_flight = stats.in_flight.endpoint_count().unwrap_or(1).saturating_sub(1);
                    responder.respond(Answer(stats.stats.to_json_with(in_flight)))
                },
                on_receive_request!(),
            )
    }

    /// A prompt turn: ask the client's permission, then work. A cancel of the request or of its session (the
    /// stack's: it answers the client, then fires the `RequestCancellation`) drops this future, and with it the
    /// permission request (the SDK sends its `$/cancel_request`).
    async fn prompt(
        &self,
        request: PromptRequest,
        cx: ConnectionTo<Client>,
    ) -> Result<PromptResponse, Error> {
        let session_id = request.session_id.to_string();
        let run = self.stats.start();
        let permission = cx.send_request(permission_request(&session_id));
        match permission.block_task().await {
            Ok(answer) => tracing::info!(outcome = ?answer.outcome, "permission answered"),
            Err(error) => tracing::info!(%error, "permission request failed; working on"),
        }
        tokio::time::sleep(Duration::from_millis(self.prompt_ms)).await;
        run.finish();
        Ok(PromptResponse::new(StopReason::EndTurn))
    }
}

/// The permission request of CONTRACT.md.
fn permission_request(session_id: &str) -> RequestPermissionRequest {
    let mut fields = ToolCallUpdateFields::default();
    fields.title = Some("Think for a while".into());
    fields.kind = Some(ToolKind::Think);
    fields.status = Some(ToolCallStatus::Pending);
    RequestPermissionRequest::new(
        session_id.to_owned(),
        ToolCallUpdate::new("think-1", fields),
        vec![
            PermissionOption::new("allow", "Allow", PermissionOptionKind::AllowOnce),
            PermissionOption::new("reject", "Reject", PermissionOptionKind::RejectOnce),
        ],
    )
}
