//! The MCP tools of the example servers, over stdio (`mcp_server`) and Streamable HTTP (`mcp_http_server`):
//! `sleep {"ms"}`, `progress {"steps", "intervalMs"}`, `confirm {"action"}` and `stats`, the handshake of each
//! revision, and subscriptions (`subscriptions/listen`).
//!
//! # `confirm`: a tool that asks the client
//!
//! `confirm {"action": "<text>"}` sends the client `elicitation/create {"message": "Allow <action>?",
//! "requestedSchema": {"type": "object", "properties": {}}}` through the request's peer (over HTTP, on the SSE
//! stream of the POST that carries the tool call) and answers `confirmed` when the client accepts, `declined`
//! otherwise. Cancelling the tool call while the elicitation is pending cancels the elicitation too
//! (`notifications/cancelled` naming it, on the same stream). In the stateless revision a server sends the
//! client no requests: the tool answers a tool error (`isError`) saying so.
//!
//! # Subscriptions
//!
//! `subscriptions/listen {"notifications": {...}}` acknowledges with `notifications/subscriptions/acknowledged`
//! (honouring `toolsListChanged`, the one list this server has; its tools never change) and stays open until the
//! client cancels it, or, with [`Tools::end_subscriptions_after`] (`--subscription-ms N`), until the server ends it
//! after N ms: then the client gets `notifications/cancelled` naming the listen request (sent by the stack's
//! cancel layer), which is the subscription's end: no reply follows it.
//!
//! # Revisions
//!
//! - With sessions (`2025-11-25` and earlier, and every request over stdio): `initialize` answers the client's
//!   `protocolVersion` if it is one of [`Versions::known`], else [`Versions::default`]; `ping` answers `{}`.
//! - Stateless (`2026-07-28`, over HTTP: the request's extensions hold [`Revision::Stateless`]):
//!   `server/discover` answers the versions, capabilities and server information; there is no `initialize` or
//!   `ping`. Every result carries `"resultType": "complete"` and the server information in `_meta`, and
//!   `tools/list` also says how long it may be cached (`ttlMs`, `cacheScope`).

use std::time::Duration;

use serde_json::{json, Value};
use tower_cancel::{progress::ProgressUpdate, ErrorObject, PeerError, Request};
use tower_cancel_http::mcp::{Revision, STATELESS_VERSIONS};

use crate::{InFlight, SleepStats};

/// The name in the server information.
pub const SERVER_NAME: &str = "tower-cancel-mcp-example";

const SERVER_INFO_META: &str = "io.modelcontextprotocol/serverInfo";

const SUBSCRIPTION_ID_META: &str = "io.modelcontextprotocol/subscriptionId";

/// The protocol versions `initialize` answers with.
#[derive(Clone, Copy, Debug)]
pub struct Versions {
    /// The versions the server speaks: it answers with the client's if it is one of them.
    pub known: &'static [&'static str],
    /// The version it answers otherwise.
    pub default: &'static str,
}

/// The versions of the HTTP examples: `initialize` answers the client's version if the endpoint speaks it with
/// sessions, else the newest one.
pub const HTTP_VERSIONS: Versions = Versions {
    known: tower_cancel_http::mcp::SESSION_VERSIONS,
    default: "2025-11-25",
};

/// The tools' state, shared by every request of a server (cheap to clone).
#[derive(Clone, Debug)]
pub struct Tools {
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

#[derive(serde::Deserialize, Default)]
struct ListenParams {
    #[serde(default)]
    notifications: Option<Value>,
}

#[derive(serde::Deserialize)]
struct CallParams {
    name: String,
    #[serde(default)]
    arguments: Option<Value>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ProgressArgs {
    steps: u32,
    interval_ms: u64,
}

impl Tools {
    /// Tools whose `initialize` answers from `versions`; `inFlight` counted on the request's connection until
    /// [`InFlight::set_endpoint`] is called on [`Tools::in_flight`].
    pub fn new(versions: Versions) -> Self {
        Self {
            stats: SleepStats::default(),
            in_flight: InFlight::default(),
            versions,
            subscription_end: None,
        }
    }

    /// End every `subscriptions/listen` stream `after` it opened (the `--subscription-ms` flag): the client is
    /// told with `notifications/cancelled` naming the listen request, which ends it (the stack sends it in place of
    /// the handler's result).
    pub fn end_subscriptions_after(mut self, after: Option<Duration>) -> Self {
        self.subscription_end = after;
        self
    }

    /// Where `stats` takes `inFlight` from.
    pub fn in_flight(&self) -> &InFlight {
        &self.in_flight
    }

    /// Answer one MCP request or notification.
    pub async fn handle(self, req: Request) -> Result<Value, ErrorObject> {
        let stateless = matches!(
            req.extensions().get::<Revision>(),
            Some(Revision::Stateless { .. })
        );
        let result = match (req.method(), stateless) {
            _ if req.is_notification() => return Ok(Value::Null),
            ("initialize", false) => self.initialize(&req)?,
            ("ping", false) => json!({}),
            ("server/discover", true) => json!({
                "supportedVersions": STATELESS_VERSIONS,
                "capabilities": { "tools": {} },
            }),
            ("tools/list", _) => tools(),
            ("tools/call", _) => self.call(&req).await?,
            ("subscriptions/listen", _) => self.listen(&req).await?,
            (other, _) => return Err(ErrorObject::method_not_found(other)),
        };
        Ok(if stateless {
            complete(req.method(), result)
        } else {
            result
        })
    }

    fn initialize(&self, req: &Request) -> Result<Value, ErrorObject> {
        let asked: Value = req.params_as()?;
        let version = asked["protocolVersion"]
            .as_str()
            .filter(|v| self.versions.known.contains(v))
            .unwrap_or(self.versions.default);
        Ok(json!({
            "protocolVersion": version,
            "capabilities": { "tools": {} },
            "serverInfo": server_info(),
        }))
    }

    async fn call(&self, req: &Request) -> Result<Value, ErrorObject> {
        let call: CallParams = req.params_as()?;
        let args = call.arguments.unwrap_or(Value::Null);
        match call.name.as_str() {
            "sleep" => {
                let params = serde_json::from_value(args).map_err(ErrorObject::invalid_params)?;
                let slept = crate::sleep(&self.stats, params).await;
                Ok(json!({
                    "content": [{ "type": "text", "text": format!("slept {} ms", slept["slept"]) }],
                    "structuredContent": slept,
                }))
            }
            "progress" => {
                let args = serde_json::from_value(args).map_err(ErrorObject::invalid_params)?;
                Ok(self.progress(req, args).await)
            }
            "confirm" => {
                let args: ConfirmArgs =
                    serde_json::from_value(args).map_err(ErrorObject::invalid_params)?;
                self.confirm(req, &args.action).await
            }
            "stats" => {
                let counters = self.in_flight.stats(&self.stats, req);
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

    /// Ask the client to allow `action` (`elicitation/create`), and answer what it said. Counted like `sleep`: a
    /// tool call cancelled while the client is asked counts as cancelled (the cascade cancels the elicitation).
    async fn confirm(&self, req: &Request, action: &str) -> Result<Value, ErrorObject> {
        let peer = req
            .peer()
            .ok_or_else(|| ErrorObject::internal_error("no connection to ask the client on"))?;
        let run = self.stats.start();
        let asked = peer
            .request(
                "elicitation/create",
                json!({
                    "message": format!("Allow {action}?"),
                    "requestedSchema": { "type": "object", "properties": {} },
                }),
            )
            .await;
        let answer = match asked {
            Ok(result) if result["action"] == "accept" => "confirmed",
            Ok(_) => "declined",
            Err(PeerError::NotAllowed) => {
                // A finished run: the tool answered, with a tool error (the call itself was fine).
                run.finish();
                return Ok(json!({
                    "content": [{ "type": "text", "text": "confirm needs elicitation, and a server of the \
                        stateless revision (2026-07-28) sends the client no requests" }],
                    "isError": true,
                }));
            }
            Err(PeerError::Rejected(error)) => {
                run.finish();
                return Err(error);
            }
            Err(other) => {
                run.finish();
                return Err(ErrorObject::internal_error(format!(
                    "the client was not asked: {other}"
                )));
            }
        };
        run.finish();
        Ok(json!({ "content": [{ "type": "text", "text": answer }] }))
    }

    /// A subscription: acknowledged, then open until the client cancels it or the server ends it.
    async fn listen(&self, req: &Request) -> Result<Value, ErrorObject> {
        let params: ListenParams = req.params_as().unwrap_or_default();
        let asked = params.notifications.unwrap_or_else(|| json!({}));
        // The one list of this server (its tools, which never change): what it honours of the filter.
        let mut honoured = serde_json::Map::new();
        if asked["toolsListChanged"] == true {
            honoured.insert("toolsListChanged".into(), json!(true));
        }
        let id = req.id().cloned();
        let peer = req
            .peer()
            .ok_or_else(|| ErrorObject::internal_error("no connection to listen on"))?;
        peer.notify(
            "notifications/subscriptions/acknowledged",
            json!({ "_meta": { SUBSCRIPTION_ID_META: id }, "notifications": honoured }),
        )
        .map_err(|_| ErrorObject::internal_error("the connection closed"))?;
        match self.subscription_end {
            Some(after) => tokio::time::sleep(after).await,
            None => std::future::pending().await,
        }
        Ok(json!({ "resultType": "complete", "_meta": { SUBSCRIPTION_ID_META: id } }))
    }

    /// Works `steps` steps of `interval_ms` each, reporting progress after each one (if the request asked).
    async fn progress(&self, req: &Request, args: ProgressArgs) -> Value {
        let run = self.stats.start();
        let progress = req.progress();
        for step in 1..=args.steps {
            tokio::time::sleep(Duration::from_millis(args.interval_ms)).await;
            if let Some(progress) = &progress {
                let update = ProgressUpdate::new(f64::from(step))
                    .total(f64::from(args.steps))
                    .message(format!("step {step} of {}", args.steps));
                progress.report(update);
            }
        }
        run.finish();
        json!({
            "content": [{ "type": "text", "text": format!("did {} steps", args.steps) }],
            "structuredContent": { "steps": args.steps },
        })
    }
}

fn server_info() -> Value {
    json!({ "name": SERVER_NAME, "version": env!("CARGO_PKG_VERSION") })
}

/// A stateless result as the revision wants it: `resultType`, the server information, and for what a client may
/// cache (`tools/list`, `server/discover`) for how long and for whom (not at all, this client only: the tools'
/// answers change with every call).
fn complete(method: &str, mut result: Value) -> Value {
    let Some(fields) = result.as_object_mut() else {
        return result;
    };
    fields.insert("resultType".into(), json!("complete"));
    if matches!(method, "tools/list" | "server/discover") {
        fields.insert("ttlMs".into(), json!(0));
        fields.insert("cacheScope".into(), json!("private"));
    }
    let meta = fields.entry("_meta").or_insert_with(|| json!({}));
    if let Some(meta) = meta.as_object_mut() {
        meta.insert(SERVER_INFO_META.into(), server_info());
    }
    result
}

/// The `tools/list` result: the four tools and their input schemas.
pub fn tools() -> Value {
    json!({ "tools": [
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
            "name": "progress",
            "description": "Works `steps` steps of `intervalMs` each, reporting progress after each step.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "steps": { "type": "integer", "minimum": 0 },
                    "intervalMs": { "type": "integer", "minimum": 0 },
                },
                "required": ["steps", "intervalMs"],
            },
        },
        {
            "name": "confirm",
            "description": "Asks the client to allow the action (elicitation) and says whether it did.",
            "inputSchema": {
                "type": "object",
                "properties": { "action": { "type": "string" } },
                "required": ["action"],
            },
        },
        {
            "name": "stats",
            "description": "Counters of the sleep, progress and confirm tools: started, completed, cancelled, inFlight.",
            "inputSchema": { "type": "object", "properties": {} },
        },
    ]})
}
