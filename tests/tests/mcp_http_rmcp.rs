//! rmcp's streamable HTTP client against our MCP endpoint, in every revision rmcp speaks.
//!
//! The server is built in process as a user builds it: an axum `Router` with [`McpHttp`] over
//! `CancelStack::mcp()` and a plain handler (`initialize` for `2025-11-25`, `server/discover` for `2026-07-28`,
//! `tools/list`, and the tools `sleep {ms}` and `progress {steps, intervalMs}`), on a free port of 127.0.0.1. The
//! client is rmcp 3.11's own (`StreamableHttpClientTransport` over reqwest): `ClientLifecycleMode::Initialize`
//! for the session revision, `ClientLifecycleMode::Discover` for the stateless one.
//!
//! rmcp cancels a call three ways, and each must stop our handler (its future dropped, seen through a guard
//! that records the reason its [`RequestContext`] gives):
//!
//! | rmcp | `2025-11-25` (sessions) | `2026-07-28` (stateless) |
//! |---|---|---|
//! | the `call_tool` future dropped | POSTs `notifications/cancelled`: reason `Peer` | closes the request's stream: `Disconnect` |
//! | `RequestHandle::cancel(reason)` | the same, with its reason | closes the stream |
//! | `PeerRequestOptions::with_timeout` | the same, reason `"request timeout"` | closes the stream |
//!
//! Every test ends with [`McpHttp::in_flight`] at zero. Nothing asserts a duration: waits are on conditions,
//! each bounded by [`PATIENCE`] so that a failure is reported rather than hung.

use std::{net::SocketAddr, time::Duration};

use axum::{routing::any_service, Router};
use rmcp::{
    model::{
        CallToolRequest, CallToolRequestParams, CallToolResult, ClientConfig, ClientRequest,
        ProgressNotificationParam, ProtocolVersion,
    },
    service::{NotificationContext, PeerRequestOptions, RunningService, ServiceError},
    transport::StreamableHttpClientTransport,
    ClientHandler, ClientLifecycleMode, ClientServiceExt, RoleClient,
};
use serde_json::{json, Value};
use tokio::{net::TcpListener, sync::watch};
use tower::{service_fn, ServiceBuilder};
use tower_cancel::{
    progress::ProgressUpdate, BoxError, CancelReason, CancelStack, ErrorObject, Request,
    RequestContext,
};
use tower_cancel_http::mcp::{McpHttp, Revision};

/// How long any one condition may take before the test fails.
const PATIENCE: Duration = Duration::from_secs(10);

/// A `sleep` that only a cancel ends.
const FOREVER_MS: u64 = 3_600_000;

/// The revisions rmcp 3.11 speaks over streamable HTTP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Speaks {
    /// `2025-11-25`: `initialize`, then every POST in the `Mcp-Session-Id` session.
    Sessions,
    /// `2026-07-28`: `server/discover`, then each request on its own, its version in `_meta`.
    Stateless,
}

// ---------------------------------------------------------------------------------------------------------------
// The server

/// What the handler saw: how many tool calls started, and how each ended.
#[derive(Clone)]
struct Probe {
    started: watch::Sender<usize>,
    ends: watch::Sender<Vec<String>>,
}

impl Probe {
    fn new() -> Self {
        Self {
            started: watch::Sender::new(0),
            ends: watch::Sender::new(Vec::new()),
        }
    }

    /// Wait until `n` tool calls have started.
    async fn started(&self, n: usize) {
        let mut started = self.started.subscribe();
        tokio::time::timeout(PATIENCE, started.wait_for(|count| *count >= n))
            .await
            .unwrap_or_else(|_| panic!("{n} tool calls never started"))
            .expect("the probe lives");
    }

    /// Wait until `n` tool calls have ended, and give how each ended.
    async fn ended(&self, n: usize) -> Vec<String> {
        let mut ends = self.ends.subscribe();
        let ends = tokio::time::timeout(PATIENCE, ends.wait_for(|ends| ends.len() >= n))
            .await
            .unwrap_or_else(|_| panic!("{n} tool calls never ended: {:?}", self.ends.borrow()))
            .expect("the probe lives");
        ends.clone()
    }
}

/// Held by a tool call while it runs: when its future goes, records `"completed"`, or the cancel reason its
/// context gives (`"dropped"` if it was stopped without one).
struct EndGuard {
    probe: Probe,
    context: Option<RequestContext>,
    completed: bool,
}

impl Drop for EndGuard {
    fn drop(&mut self) {
        let end = if self.completed {
            "completed".to_owned()
        } else {
            match self.context.as_ref().and_then(RequestContext::reason) {
                Some(CancelReason::Peer { reason }) => {
                    format!("peer: {}", reason.as_deref().unwrap_or("-"))
                }
                Some(CancelReason::Disconnect) => "disconnect".to_owned(),
                Some(other) => format!("{other:?}"),
                None => "dropped".to_owned(),
            }
        };
        self.probe.ends.send_modify(|ends| ends.push(end));
    }
}

/// The stateless revision's results carry `resultType`; a list also says how long it may be cached.
fn complete(stateless: bool, mut result: Value, cacheable: bool) -> Value {
    if stateless {
        result["resultType"] = json!("complete");
        if cacheable {
            result["ttlMs"] = json!(0);
            result["cacheScope"] = json!("private");
        }
    }
    result
}

/// The MCP handler, written as a user of tower-cancel writes one: no cancellation code in the tools.
async fn handle(probe: Probe, req: Request) -> Result<Value, BoxError> {
    let stateless = matches!(
        req.extensions().get::<Revision>(),
        Some(Revision::Stateless { .. })
    );
    let server_info = json!({ "name": "tower-cancel-tests", "version": "0.0.0" });
    match req.method() {
        "initialize" => Ok(json!({
            "protocolVersion": "2025-11-25",
            "capabilities": { "tools": {} },
            "serverInfo": server_info,
        })),
        "server/discover" => Ok(json!({
            "resultType": "complete",
            "supportedVersions": ["2026-07-28"],
            "capabilities": { "tools": {} },
            "ttlMs": 0,
            "cacheScope": "private",
            "_meta": { "io.modelcontextprotocol/serverInfo": server_info },
        })),
        "tools/list" => Ok(complete(
            stateless,
            json!({ "tools": [
                {
                    "name": "sleep",
                    "description": "Sleeps `ms` milliseconds, then answers \"done\".",
                    "inputSchema": {
                        "type": "object",
                        "properties": { "ms": { "type": "integer" } },
                        "required": ["ms"],
                    },
                },
                {
                    "name": "progress",
                    "description": "Reports progress `steps` times, `intervalMs` apart, then answers \"done\".",
                    "inputSchema": {
                        "type": "object",
                        "properties": {
                            "steps": { "type": "integer" },
                            "intervalMs": { "type": "integer" },
                        },
                        "required": ["steps", "intervalMs"],
                    },
                },
            ]}),
            true,
        )),
        "tools/call" => {
            let params: Value = req.params_as()?;
            let arguments = &params["arguments"];
            let mut guard = EndGuard {
                probe: probe.clone(),
                context: req.context().cloned(),
                completed: false,
            };
            probe.started.send_modify(|count| *count += 1);
            match params["name"].as_str() {
                Some("sleep") => {
                    let ms = arguments["ms"].as_u64().unwrap_or(0);
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                }
                Some("progress") => {
                    let steps = arguments["steps"].as_u64().unwrap_or(1);
                    let interval = arguments["intervalMs"].as_u64().unwrap_or(0);
                    let progress = req.progress();
                    for step in 1..=steps {
                        tokio::time::sleep(Duration::from_millis(interval)).await;
                        if let Some(progress) = &progress {
                            progress.report(
                                ProgressUpdate::new(step as f64)
                                    .total(steps as f64)
                                    .message(format!("step {step}")),
                            );
                        }
                    }
                }
                other => {
                    guard.completed = true;
                    return Err(Box::new(ErrorObject::invalid_params(format!(
                        "no tool {other:?}"
                    ))));
                }
            }
            guard.completed = true;
            Ok(complete(
                stateless,
                json!({ "content": [{ "type": "text", "text": "done" }] }),
                false,
            ))
        }
        // `notifications/initialized`, and any other notification: nothing to answer.
        _ if req.is_notification() => Ok(Value::Null),
        method => Err(Box::new(ErrorObject::method_not_found(method))),
    }
}

/// Our endpoint on a free loopback port.
struct Server {
    url: String,
    probe: Probe,
    in_flight: Box<dyn Fn() -> usize + Send + Sync>,
    sessions: Box<dyn Fn() -> usize + Send + Sync>,
}

impl Server {
    async fn start() -> Self {
        let probe = Probe::new();
        let stack = ServiceBuilder::new()
            .layer(CancelStack::mcp())
            .service(service_fn({
                let probe = probe.clone();
                move |req| handle(probe.clone(), req)
            }));
        let endpoint = McpHttp::new(stack);
        let app = Router::new().route("/mcp", any_service(endpoint.clone()));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr: SocketAddr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        let (counted, sessions) = (endpoint.clone(), endpoint);
        Self {
            url: format!("http://{addr}/mcp"),
            probe,
            in_flight: Box::new(move || counted.in_flight()),
            sessions: Box::new(move || sessions.sessions()),
        }
    }

    /// Wait until no request of the endpoint is running.
    async fn settled(&self) {
        tokio::time::timeout(PATIENCE, async {
            while (self.in_flight)() != 0 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("{} requests still in flight", (self.in_flight)()));
    }
}

// ---------------------------------------------------------------------------------------------------------------
// The client

/// rmcp's client handler: its identity, and the progress it is sent.
#[derive(Clone)]
struct Client {
    info: ClientConfig,
    progress: watch::Sender<Vec<ProgressNotificationParam>>,
}

impl ClientHandler for Client {
    fn get_info(&self) -> ClientConfig {
        self.info.clone()
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress.send_modify(|seen| seen.push(params));
    }
}

type Connected = RunningService<RoleClient, Client>;

/// rmcp connected to `server` in revision `speaks`, and what its handler receives.
async fn connect(
    server: &Server,
    speaks: Speaks,
) -> (Connected, watch::Receiver<Vec<ProgressNotificationParam>>) {
    let (info, lifecycle) = match speaks {
        Speaks::Sessions => (
            ClientConfig::default().with_protocol_version(ProtocolVersion::V_2025_11_25),
            ClientLifecycleMode::Initialize,
        ),
        Speaks::Stateless => (
            ClientConfig::default().with_protocol_version(ProtocolVersion::V_2026_07_28),
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        ),
    };
    let (progress, seen) = watch::channel(Vec::new());
    let transport = StreamableHttpClientTransport::from_uri(server.url.as_str());
    let client = tokio::time::timeout(
        PATIENCE,
        Client { info, progress }.serve_with_lifecycle(transport, lifecycle),
    )
    .await
    .expect("rmcp connects in time")
    .unwrap_or_else(|error| panic!("rmcp connects ({speaks:?}): {error}"));
    let negotiated = client
        .peer()
        .peer_info()
        .map(|info| info.protocol_version.to_string());
    let expected = match speaks {
        Speaks::Sessions => "2025-11-25",
        Speaks::Stateless => "2026-07-28",
    };
    assert_eq!(negotiated.as_deref(), Some(expected));
    (client, seen)
}

fn call(tool: &str, arguments: Value) -> CallToolRequestParams {
    let Value::Object(arguments) = arguments else {
        unreachable!("arguments are an object")
    };
    CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments)
}

fn text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|content| content.as_text().map(|text| text.text.clone()))
        .collect()
}

/// The reason the handler sees when rmcp cancels with `reason` text.
fn cancelled(speaks: Speaks, reason: &str) -> String {
    match speaks {
        Speaks::Sessions => format!("peer: {reason}"),
        Speaks::Stateless => "disconnect".to_owned(),
    }
}

/// Close the client; then nothing runs, and (sessions) rmcp's DELETE has ended its session.
async fn finish(server: &Server, client: Connected) {
    tokio::time::timeout(PATIENCE, client.cancel())
        .await
        .expect("rmcp closes in time")
        .expect("rmcp closes");
    server.settled().await;
    assert_eq!((server.in_flight)(), 0);
}

// ---------------------------------------------------------------------------------------------------------------
// The scenarios, each run in both revisions

async fn connects_lists_and_calls(speaks: Speaks) {
    let server = Server::start().await;
    let (client, _) = connect(&server, speaks).await;

    let tools = client.list_all_tools().await.expect("tools/list");
    let names: Vec<&str> = tools.iter().map(|tool| tool.name.as_ref()).collect();
    assert_eq!(names, ["sleep", "progress"]);

    let result = client
        .call_tool(call("sleep", json!({ "ms": 0 })))
        .await
        .expect("tools/call sleep");
    assert_eq!(text(&result), "done");
    assert_ne!(result.is_error, Some(true));
    assert_eq!(server.probe.ended(1).await, ["completed"]);
    finish(&server, client).await;
}

async fn a_dropped_call_stops_the_handler(speaks: Speaks) {
    let server = Server::start().await;
    let (client, _) = connect(&server, speaks).await;

    let mut sleeping = Box::pin(client.call_tool(call("sleep", json!({ "ms": FOREVER_MS }))));
    tokio::select! {
        answer = &mut sleeping => panic!("a sleep that never ends answered: {answer:?}"),
        () = server.probe.started(1) => {}
    }
    drop(sleeping);
    assert_eq!(
        server.probe.ended(1).await,
        [cancelled(speaks, "request abandoned by the caller")]
    );
    server.settled().await;

    // The client goes on: the next call is answered.
    let result = client
        .call_tool(call("sleep", json!({ "ms": 0 })))
        .await
        .expect("tools/call after the cancel");
    assert_eq!(text(&result), "done");
    finish(&server, client).await;
}

async fn a_cancelled_handle_stops_the_handler(speaks: Speaks) {
    let server = Server::start().await;
    let (client, _) = connect(&server, speaks).await;

    let request = ClientRequest::CallToolRequest(CallToolRequest::new(call(
        "sleep",
        json!({ "ms": FOREVER_MS }),
    )));
    let handle = client
        .send_cancellable_request(request, PeerRequestOptions::no_options())
        .await
        .expect("the request is sent");
    server.probe.started(1).await;
    handle
        .cancel(Some("changed my mind".to_owned()))
        .await
        .expect("the cancel is sent");
    assert_eq!(
        server.probe.ended(1).await,
        [cancelled(speaks, "changed my mind")]
    );
    finish(&server, client).await;
}

async fn a_client_timeout_stops_the_handler(speaks: Speaks) {
    let server = Server::start().await;
    let (client, _) = connect(&server, speaks).await;

    // rmcp's own per-request timeout; what is checked is only that its expiry stops our handler.
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(call(
        "sleep",
        json!({ "ms": FOREVER_MS }),
    )));
    let handle = client
        .send_cancellable_request(
            request,
            PeerRequestOptions::with_timeout(Duration::from_millis(300)),
        )
        .await
        .expect("the request is sent");
    let answer = tokio::time::timeout(PATIENCE, handle.await_response())
        .await
        .expect("rmcp's timeout fires");
    assert!(
        matches!(answer, Err(ServiceError::Timeout { .. })),
        "{answer:?}"
    );
    assert_eq!(
        server.probe.ended(1).await,
        [cancelled(speaks, "request timeout")]
    );
    finish(&server, client).await;
}

async fn progress_reaches_rmcp(speaks: Speaks) {
    let server = Server::start().await;
    let (client, mut seen) = connect(&server, speaks).await;

    let result = client
        .call_tool(call("progress", json!({ "steps": 3, "intervalMs": 5 })))
        .await
        .expect("tools/call progress");
    assert_eq!(text(&result), "done");
    // rmcp hands notifications to the handler on a task of its own: they may land after the result.
    let seen = tokio::time::timeout(PATIENCE, seen.wait_for(|seen| seen.len() >= 3))
        .await
        .expect("three progress reports reach rmcp")
        .expect("the client lives")
        .clone();
    let reports: Vec<(f64, Option<f64>, Option<String>)> = seen
        .iter()
        .map(|p| (p.progress, p.total, p.message.clone()))
        .collect();
    assert_eq!(
        reports,
        [1, 2, 3].map(|step| (f64::from(step), Some(3.0), Some(format!("step {step}"))))
    );
    // One token, the one rmcp put in the call's `_meta`.
    assert!(seen
        .iter()
        .all(|p| p.progress_token == seen[0].progress_token));
    assert_eq!(server.probe.ended(1).await, ["completed"]);
    finish(&server, client).await;
}

// ---------------------------------------------------------------------------------------------------------------
// 2025-11-25

#[tokio::test]
async fn sessions_connect_list_and_call() {
    connects_lists_and_calls(Speaks::Sessions).await;
}

#[tokio::test]
async fn sessions_a_dropped_call_is_cancelled() {
    a_dropped_call_stops_the_handler(Speaks::Sessions).await;
}

#[tokio::test]
async fn sessions_a_cancelled_handle_is_cancelled() {
    a_cancelled_handle_stops_the_handler(Speaks::Sessions).await;
}

#[tokio::test]
async fn sessions_a_client_timeout_is_cancelled() {
    a_client_timeout_stops_the_handler(Speaks::Sessions).await;
}

#[tokio::test]
async fn sessions_progress_reaches_rmcp() {
    progress_reaches_rmcp(Speaks::Sessions).await;
}

#[tokio::test]
async fn sessions_end_with_the_client() {
    let server = Server::start().await;
    let (client, _) = connect(&server, Speaks::Sessions).await;
    assert_eq!((server.sessions)(), 1);
    finish(&server, client).await;
    // rmcp DELETEs its session as it closes.
    tokio::time::timeout(PATIENCE, async {
        while (server.sessions)() != 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .expect("the session is ended");
}

// ---------------------------------------------------------------------------------------------------------------
// 2026-07-28

#[tokio::test]
async fn stateless_connect_list_and_call() {
    connects_lists_and_calls(Speaks::Stateless).await;
}

#[tokio::test]
async fn stateless_a_dropped_call_is_cancelled() {
    a_dropped_call_stops_the_handler(Speaks::Stateless).await;
}

#[tokio::test]
async fn stateless_a_cancelled_handle_is_cancelled() {
    a_cancelled_handle_stops_the_handler(Speaks::Stateless).await;
}

#[tokio::test]
async fn stateless_a_client_timeout_is_cancelled() {
    a_client_timeout_stops_the_handler(Speaks::Stateless).await;
}

#[tokio::test]
async fn stateless_progress_reaches_rmcp() {
    progress_reaches_rmcp(Speaks::Stateless).await;
}

#[tokio::test]
async fn stateless_opens_no_session() {
    let server = Server::start().await;
    let (client, _) = connect(&server, Speaks::Stateless).await;
    let result = client
        .call_tool(call("sleep", json!({ "ms": 0 })))
        .await
        .expect("tools/call sleep");
    assert_eq!(text(&result), "done");
    assert_eq!((server.sessions)(), 0);
    finish(&server, client).await;
}
