//! The tools of the MCP examples written as an rmcp 3.11 [`ServerHandler`], for `mcp_server_rmcp` (stdio) and
//! `mcp_http_server_rmcp` (Streamable HTTP): `sleep {"ms"}`, `progress {"steps", "intervalMs"}`,
//! `confirm {"action"}` and `stats`, and `subscriptions/listen`, with the same answers as [`crate::mcp`]'s. An
//! ordinary rmcp handler: it watches `context.ct`, the token rmcp cancels on `notifications/cancelled`, reports
//! progress with `context.peer.notify_progress` and asks the client with `context.peer.create_elicitation`;
//! [`RmcpServer`] adds `subscriptions/listen` in every revision, as an `rmcp::Service` (see there why not rmcp's
//! own `listen`). `tower-cancel-rmcp` serves it under the stack, which is what cancels it on every other cause
//! too, cancels its elicitation on the wire with the tool call, and ends a subscription the server ends with
//! `notifications/cancelled` naming it.

use std::time::Duration;

use rmcp::{
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ClientNotification, ClientRequest,
        CustomRequest, CustomResult, DiscoverResult, ElicitRequestParams, ElicitationAction,
        ElicitationSchema, ErrorCode, Implementation, InitializeRequestParams, InitializeResult,
        ListToolsResult, NotificationMetaObject, PaginatedRequestParams, ProgressNotificationParam,
        ProtocolVersion, ServerCapabilities, ServerConfig, ServerNotification, ServerResult,
        SubscriptionFilter, SubscriptionsAcknowledgedNotification,
        SubscriptionsAcknowledgedNotificationParams, SubscriptionsListenRequestParams,
        SubscriptionsListenResult,
    },
    service::{NotificationContext, RequestContext, RoleServer, ServiceError},
    ErrorData, ServerHandler,
};
use serde_json::{json, Value};
use tower_cancel::Connection;

use crate::{mcp::Versions, InFlight, SleepStats};

const SERVER_INFO_META: &str = "io.modelcontextprotocol/serverInfo";

/// The handler; cheap to clone (every clone shares the counters).
#[derive(Clone, Debug)]
pub struct RmcpTools {
    stats: SleepStats,
    in_flight: InFlight,
    versions: Versions,
    // When the server ends each subscription by itself (`--subscription-ms`); never if `None`.
    subscription_end: Option<Duration>,
}

#[derive(serde::Deserialize)]
struct ConfirmArgs {
    action: String,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ProgressArgs {
    steps: u32,
    interval_ms: u64,
}

impl RmcpTools {
    /// Tools whose `initialize` answers from `versions`; `inFlight` counted on the request's connection until
    /// [`InFlight::set_endpoint`] is called on [`RmcpTools::in_flight`].
    pub fn new(versions: Versions) -> Self {
        Self {
            stats: SleepStats::default(),
            in_flight: InFlight::default(),
            versions,
            subscription_end: None,
        }
    }

    /// End every `subscriptions/listen` stream `after` it opened (the `--subscription-ms` flag, served by
    /// [`RmcpServer`]): the stack ends it with `notifications/cancelled` naming the listen.
    pub fn end_subscriptions_after(mut self, after: Option<Duration>) -> Self {
        self.subscription_end = after;
        self
    }

    /// Where `stats` takes `inFlight` from.
    pub fn in_flight(&self) -> &InFlight {
        &self.in_flight
    }

    async fn sleep(
        &self,
        args: Value,
        context: &RequestContext<RoleServer>,
    ) -> Result<Value, ErrorData> {
        let params: crate::SleepParams = serde_json::from_value(args).map_err(invalid_params)?;
        // rmcp never drops a handler: it only fires `ct`, so the work races it. Dropping the sleep counts it
        // cancelled.
        tokio::select! {
            slept = crate::sleep(&self.stats, params) => Ok(json!({
                "content": [{ "type": "text", "text": format!("slept {} ms", slept["slept"]) }],
                "structuredContent": slept,
            })),
            () = context.ct.cancelled() => Err(ErrorData::internal_error("cancelled", None)),
        }
    }

    async fn progress(
        &self,
        args: Value,
        context: &RequestContext<RoleServer>,
    ) -> Result<Value, ErrorData> {
        let args: ProgressArgs = serde_json::from_value(args).map_err(invalid_params)?;
        let run = self.stats.start();
        let token = context.meta.get_progress_token();
        let work = async {
            for step in 1..=args.steps {
                tokio::time::sleep(Duration::from_millis(args.interval_ms)).await;
                if let Some(token) = &token {
                    let update = ProgressNotificationParam::new(token.clone(), f64::from(step))
                        .with_total(f64::from(args.steps))
                        .with_message(format!("step {step} of {}", args.steps));
                    let _ = context.peer.notify_progress(update).await;
                }
            }
        };
        tokio::select! {
            () = work => {}
            () = context.ct.cancelled() => return Err(ErrorData::internal_error("cancelled", None)),
        }
        run.finish();
        Ok(json!({
            "content": [{ "type": "text", "text": format!("did {} steps", args.steps) }],
            "structuredContent": { "steps": args.steps },
        }))
    }

    /// Ask the client to allow `action` (`elicitation/create`, through rmcp's peer: the bridge sends it through
    /// the tool call's peer, so cancelling the call cancels it on the wire), and answer what it said. Counted like
    /// `sleep`: a call cancelled while the client is asked counts as cancelled.
    async fn confirm(
        &self,
        args: Value,
        context: &RequestContext<RoleServer>,
    ) -> Result<Value, ErrorData> {
        let args: ConfirmArgs = serde_json::from_value(args).map_err(invalid_params)?;
        let run = self.stats.start();
        let params = ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: format!("Allow {}?", args.action),
            // An empty object: a yes or a no, nothing to fill in.
            requested_schema: ElicitationSchema::new(Default::default()),
        };
        let asked = tokio::select! {
            // `ct` first: when the call is cancelled, the bridge also hands rmcp an error for the elicitation it
            // cancelled; that is the cancel, not an answer.
            biased;
            () = context.ct.cancelled() => return Err(ErrorData::internal_error("cancelled", None)),
            asked = context.peer.create_elicitation(params) => asked,
        };
        run.finish();
        let answer = match asked {
            Ok(result) if result.action == ElicitationAction::Accept => "confirmed",
            Ok(_) => "declined",
            // rmcp refuses to send it in the stateless revision: a tool error (the call itself was fine).
            Err(ServiceError::McpError(_)) if stateless(context) => {
                return Ok(json!({
                    "content": [{ "type": "text", "text": "confirm needs elicitation, and a server of the \
                        stateless revision (2026-07-28) sends the client no requests" }],
                    "isError": true,
                }))
            }
            Err(ServiceError::McpError(error)) => return Err(error),
            Err(other) => {
                return Err(ErrorData::internal_error(
                    format!("the client was not asked: {other}"),
                    None,
                ))
            }
        };
        Ok(json!({ "content": [{ "type": "text", "text": answer }] }))
    }

    /// The counters; `inFlight` the requests in the stack's registry (the endpoint's, over HTTP), less this one.
    fn stats(&self, context: &RequestContext<RoleServer>) -> Value {
        let in_flight = match self.in_flight.endpoint_count() {
            Some(count) => count,
            None => context
                .extensions
                .get::<Connection>()
                .map_or(0, |connection| connection.registry().len()),
        };
        let counters = self.stats.to_json_with(in_flight.saturating_sub(1));
        json!({
            "content": [{ "type": "text", "text": counters.to_string() }],
            "structuredContent": counters,
        })
    }
}

impl ServerHandler for RmcpTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(server_info())
    }

    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        ProtocolVersion::KNOWN_VERSIONS.into()
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        // The client's version if it is one this server speaks, else its default (as `crate::mcp` answers).
        let asked = request.protocol_version.as_str();
        let version = match self.versions.known.iter().find(|known| **known == asked) {
            Some(known) => *known,
            None => self.versions.default,
        };
        context.peer.set_peer_info(request);
        let version: ProtocolVersion = serde_json::from_value(json!(version))
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        Ok(self.get_info().with_protocol_version(version))
    }

    async fn discover(
        &self,
        _context: RequestContext<RoleServer>,
    ) -> Result<DiscoverResult, ErrorData> {
        Ok(DiscoverResult::from_server_info(
            vec![ProtocolVersion::V_2026_07_28],
            self.get_info(),
        ))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let mut result = crate::mcp::tools();
        if stateless(&context) {
            complete(&mut result);
        }
        serde_json::from_value(result).map_err(|e| ErrorData::internal_error(e.to_string(), None))
    }

    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        // -32601 worded as the stack words it.
        let tower_cancel::ErrorObject { message, .. } =
            tower_cancel::ErrorObject::method_not_found(&request.method);
        Err(ErrorData::new(ErrorCode::METHOD_NOT_FOUND, message, None))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.map_or(Value::Null, Value::Object);
        let mut result = match request.name.as_ref() {
            "sleep" => self.sleep(args, &context).await?,
            "progress" => self.progress(args, &context).await?,
            "confirm" => self.confirm(args, &context).await?,
            "stats" => self.stats(&context),
            other => return Err(invalid_params(format!("unknown tool {other:?}"))),
        };
        if stateless(&context) {
            complete(&mut result);
        }
        // Built from JSON: exactly the fields above (`CallToolResult::success` would add `"isError": false`).
        let result: CallToolResult = serde_json::from_value(result)
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        Ok(result.into())
    }
}

/// [`RmcpTools`] as the example servers serve it: its [`ServerHandler`] for every request but `subscriptions/listen`,
/// which it serves itself in every revision, as [`crate::mcp`] does. rmcp 3.11's own `ServerHandler::listen`
/// cannot keep that contract: rmcp answers a `subscriptions/listen` only in the stateless revision (`2026-07-28`,
/// whose method it is; in a session opened by `initialize` it answers -32601 before any handler runs), and
/// acknowledges only the lists that `get_info` says change (these tools never do, and `initialize` says so).
#[derive(Clone, Debug)]
pub struct RmcpServer {
    tools: RmcpTools,
}

impl RmcpServer {
    /// Serve `tools`.
    pub fn new(tools: RmcpTools) -> Self {
        Self { tools }
    }

    /// A subscription, rmcp's types on rmcp's peer: acknowledged (honouring `toolsListChanged`, the one list of
    /// this server), then open until the client cancels it (`ct`) or the server ends it (`--subscription-ms`).
    /// The bridge sends the acknowledgment on the listen's own stream under the client's id; when the server ends
    /// it, the stack's `notifications/cancelled` naming it is its end, in place of the result returned here.
    async fn listen(
        &self,
        params: SubscriptionsListenRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ServerResult, ErrorData> {
        let honoured = match params.notifications.tools_list_changed {
            Some(true) => SubscriptionFilter::builder().tools_list_changed().build(),
            _ => SubscriptionFilter::new(),
        };
        let mut meta = NotificationMetaObject::new();
        meta.set_subscription_id(context.id.clone());
        let acknowledged = SubscriptionsAcknowledgedNotification::new(
            SubscriptionsAcknowledgedNotificationParams::new(honoured).with_meta(meta),
        );
        context
            .peer
            .send_notification(ServerNotification::SubscriptionsAcknowledgedNotification(
                acknowledged,
            ))
            .await
            .map_err(|e| ErrorData::internal_error(format!("not acknowledged: {e}"), None))?;
        let ended = async {
            match self.tools.subscription_end {
                Some(after) => tokio::time::sleep(after).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = context.ct.cancelled() => {}
            () = ended => {}
        }
        let mut result = SubscriptionsListenResult::complete(context.id.clone());
        if stateless(&context) {
            result.meta.set_server_info(server_info());
        }
        Ok(ServerResult::SubscriptionsListenResult(result))
    }
}

impl rmcp::Service<RoleServer> for RmcpServer {
    async fn handle_request(
        &self,
        request: ClientRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<ServerResult, ErrorData> {
        match request {
            ClientRequest::SubscriptionsListenRequest(listen) => {
                self.listen(listen.params, context).await
            }
            other => rmcp::Service::handle_request(&self.tools, other, context).await,
        }
    }

    async fn handle_notification(
        &self,
        notification: ClientNotification,
        context: NotificationContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        rmcp::Service::handle_notification(&self.tools, notification, context).await
    }

    fn get_info(&self) -> ServerConfig {
        ServerHandler::get_info(&self.tools)
    }

    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        ServerHandler::supported_protocol_versions(&self.tools)
    }
}

/// Whether the request speaks the stateless revision (its `_meta` names `2026-07-28` or later).
fn stateless(context: &RequestContext<RoleServer>) -> bool {
    context
        .meta
        .protocol_version()
        .is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str())
}

/// A stateless result as the revision wants it: `resultType`, and the server information in `_meta` (rmcp adds
/// the cache hints of `tools/list`).
fn complete(result: &mut Value) {
    result["resultType"] = json!("complete");
    result["_meta"] = json!({ SERVER_INFO_META: server_info() });
}

fn server_info() -> Implementation {
    Implementation::new(crate::mcp::SERVER_NAME, env!("CARGO_PKG_VERSION"))
}

/// -32602 worded as the stack words it (`crate::mcp`'s answers).
fn invalid_params(detail: impl std::fmt::Display) -> ErrorData {
    let tower_cancel::ErrorObject { message, .. } =
        tower_cancel::ErrorObject::invalid_params(detail);
    ErrorData::invalid_params(message, None)
}
