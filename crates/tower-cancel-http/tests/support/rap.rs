//! A RAP tool server on a real socket, a runtime's callback endpoint that records what reaches it, and a client
//! that speaks to the server as a runtime does.

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
};

use axum::{extract::State, routing::post, Router};
use http::StatusCode;
use serde_json::{json, Value};
use tower::{service_fn, ServiceBuilder};
use tower_cancel::{BoxError, CancelStack, Request};
use tower_cancel_http::{
    auth::require_bearer,
    rap::{Rap, ToolCall, ToolDef, ToolServer, ToolServerStats, Tools},
};

use super::{eventually, serve, Probe};

pub const TOKEN: &str = "s3cret";

/// The runtime's callback endpoint: keeps every body POSTed to it, answering with the statuses it is given in turn
/// (then 200).
#[derive(Clone, Default)]
pub struct Callback {
    received: Arc<Mutex<Vec<Value>>>,
    statuses: Arc<Mutex<Vec<StatusCode>>>,
}

impl Callback {
    pub async fn start(statuses: Vec<StatusCode>) -> (Self, String) {
        let callback = Callback {
            received: Arc::default(),
            statuses: Arc::new(Mutex::new(statuses)),
        };
        let router = Router::new()
            .route(
                "/callback",
                post(
                    |State(callback): State<Callback>, body: axum::body::Bytes| async move {
                        let value: Value = serde_json::from_slice(&body).unwrap();
                        callback.received.lock().unwrap().push(value);
                        let mut statuses = callback.statuses.lock().unwrap();
                        let status = if statuses.is_empty() {
                            StatusCode::OK
                        } else {
                            statuses.remove(0)
                        };
                        // A redirection points back here: a client that follows it POSTs again.
                        (status, [(http::header::LOCATION, "/callback")])
                    },
                ),
            )
            .with_state(callback.clone());
        let addr = serve(router).await;
        (callback, format!("http://{addr}/callback"))
    }

    pub fn received(&self) -> Vec<Value> {
        self.received.lock().unwrap().clone()
    }

    pub async fn results(&self, n: usize) -> Vec<Value> {
        eventually(&format!("{n} results"), || self.received().len() >= n).await;
        self.received()
    }
}

pub struct Harness {
    pub addr: SocketAddr,
    pub server: ToolServer<Stack>,
    pub probe: Probe,
    pub callback: Callback,
    pub callback_url: String,
    pub http: reqwest::Client,
}

pub type Stack = tower_cancel::stack::Stacked<Tools, Rap>;

pub fn tools(probe: &Probe) -> Tools {
    let sleep_probe = probe.clone();
    Tools::new()
        .tool(
            ToolDef::new(
                "sleep",
                "Sleeps for ms milliseconds",
                json!({"type": "object", "properties": {"ms": {"type": "integer"}}, "required": ["ms"]}),
            ),
            service_fn(move |req: Request| super::sleep(sleep_probe.clone(), req)),
        )
        .tool(
            ToolDef::new("whoami", "Tells the call it serves", json!({"type": "object"})),
            service_fn(|req: Request| async move {
                let call = req.extensions().get::<ToolCall>().cloned().unwrap();
                Ok::<_, BoxError>(json!({
                    "thread": call.thread_id, "call": call.tool_call_id, "user": call.user_id,
                    "ancestors": call.thread_ancestors,
                }))
            }),
        )
}

impl Harness {
    pub async fn start() -> Self {
        Self::with(CancelStack::new(Rap), |server| server, vec![]).await
    }

    pub async fn with(
        stack: CancelStack<Rap>,
        configure: impl FnOnce(ToolServer<Stack>) -> ToolServer<Stack>,
        callback_statuses: Vec<StatusCode>,
    ) -> Self {
        let probe = Probe::default();
        let tools = tools(&probe);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let toolset = tools.toolset("probe-tools", format!("http://{addr}/invoke"));
        let service = ServiceBuilder::new().layer(stack).service(tools);
        let server = configure(ToolServer::new(toolset, service));
        let router = server.clone().router_with(require_bearer(TOKEN));
        // `serve` gives each request the peer's address, as a real deployment is served: the rate limits key on it.
        tokio::spawn(async move { tower_cancel_http::serve(listener, router).await.unwrap() });
        let (callback, callback_url) = Callback::start(callback_statuses).await;
        Self {
            addr,
            server,
            probe,
            callback,
            callback_url,
            http: reqwest::Client::new(),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub async fn post(&self, path: &str, body: Value) -> (StatusCode, String) {
        self.post_raw(path, Some(TOKEN), "application/json", body.to_string())
            .await
    }

    pub async fn post_raw(
        &self,
        path: &str,
        token: Option<&str>,
        content_type: &str,
        body: String,
    ) -> (StatusCode, String) {
        self.post_with(&self.http, path, token, content_type, body)
            .await
    }

    /// [`post_raw`](Self::post_raw) with another client (one bound to another address, say).
    pub async fn post_with(
        &self,
        http: &reqwest::Client,
        path: &str,
        token: Option<&str>,
        content_type: &str,
        body: String,
    ) -> (StatusCode, String) {
        let mut request = http
            .post(self.url(path))
            .header("content-type", content_type)
            .body(body);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        (status, response.text().await.unwrap())
    }

    pub fn invocation(&self, thread: &str, call: &str, operation: &str, arguments: Value) -> Value {
        json!({
            "operation": operation, "arguments": arguments, "id": call, "call_id": format!("p-{call}"),
            "callback_url": self.callback_url, "group_id": thread,
        })
    }

    pub async fn invoke(&self, thread: &str, call: &str, ms: u64) {
        let body = self.invocation(thread, call, "sleep", json!({ "ms": ms }));
        assert_eq!(
            self.post("/invoke", body).await,
            (StatusCode::OK, String::new())
        );
    }

    pub async fn cancel(&self, thread: &str, call: &str) {
        let body = json!({"thread_id": thread, "tool_call_id": call});
        assert_eq!(
            self.post("/cancel_tool_call", body).await,
            (StatusCode::OK, String::new()),
            "a cancel is answered 200, empty, whatever happened"
        );
    }

    pub async fn alive(&self, thread: &str, call: &str) -> bool {
        let body = json!({"thread_id": thread, "tool_call_id": call});
        let (status, text) = self.post("/tool_call_status", body).await;
        assert_eq!(status, StatusCode::OK);
        serde_json::from_str::<Value>(&text).unwrap()["alive"]
            .as_bool()
            .unwrap()
    }

    /// Every call over: no handler running, no result on its way.
    pub async fn idle(&self) {
        eventually("every call over", || self.server.in_flight() == 0).await;
    }

    pub fn stats(&self) -> ToolServerStats {
        self.server.stats()
    }
}

/// A client whose connections come from `ip` (any of 127.0.0.0/8 on Linux's loopback): another host, as the
/// server sees it.
pub fn client_from(ip: [u8; 4]) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(std::net::IpAddr::from(ip))
        .build()
        .unwrap()
}

pub fn result(thread: &str, call: &str, text: &str) -> Value {
    json!({"type": "tool_result", "group_id": thread, "id": call, "call_id": format!("p-{call}"), "text": text})
}

pub fn ends(probe: &Probe) -> Vec<(String, String)> {
    let mut ends = probe.ends();
    ends.sort();
    ends
}

pub fn end(call: &str, how: &str) -> (String, String) {
    (format!("{call:?}"), how.to_string())
}
