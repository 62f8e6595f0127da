//! What the HTTP tests share: a server (an rmcp handler under the MCP stack behind our Streamable HTTP front end,
//! on a free loopback port), a session, POSTs, and an SSE response read as it comes.

use std::{net::SocketAddr, time::Duration};

use axum::{routing::any_service, Router};
use serde_json::{json, Value};
use tower::ServiceBuilder;
use tower_cancel::{bus::Replica, CancelStack};
use tower_cancel_http::{McpHttp, RpcService};
use tower_cancel_rmcp::RmcpService;

use super::Probe;

/// The stateless revision's `_meta`, every key it requires.
pub fn stateless_meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": { "name": "t", "version": "0" },
        "io.modelcontextprotocol/clientCapabilities": {},
    })
}

/// One server: an rmcp handler under the MCP stack, behind our MCP Streamable HTTP front end.
pub struct Served<S> {
    pub addr: SocketAddr,
    pub probe: Probe,
    pub rmcp: RmcpService<Probe>,
    pub mcp: McpHttp<S>,
}

impl Served<()> {
    /// Serves a fresh [`Probe`] on a free loopback port, as a replica on `replica`'s bus when there is one.
    pub async fn start(replica: Option<Replica>) -> Served<impl RpcService> {
        Self::start_with(Probe::default(), replica).await
    }

    /// Serves `probe` on a free loopback port, as a replica on `replica`'s bus when there is one.
    pub async fn start_with(probe: Probe, replica: Option<Replica>) -> Served<impl RpcService> {
        let rmcp = RmcpService::new(probe.clone());
        let stack = ServiceBuilder::new()
            .layer(CancelStack::mcp())
            .service(rmcp.clone());
        let ended = rmcp.clone();
        let mut mcp = McpHttp::new(stack).on_session_end(move |id| ended.end_session(id));
        if let Some(replica) = replica {
            mcp = mcp.replica(replica);
        }
        let app = Router::new().route("/mcp", any_service(mcp.clone()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { tower_cancel_http::serve(listener, app).await });
        Served {
            addr,
            probe,
            rmcp,
            mcp,
        }
    }
}

/// Opens a `2025-11-25` session (the client can be asked for elicitation); its id.
pub async fn open_session(addr: SocketAddr) -> String {
    let init = post(
        addr,
        &[],
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": { "elicitation": {} },
        "clientInfo": { "name": "t", "version": "0" }}}),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(init.status(), 200);
    init.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned()
}

pub fn post(addr: SocketAddr, headers: &[(&str, &str)], body: Value) -> reqwest::RequestBuilder {
    let mut request = reqwest::Client::new()
        .post(format!("http://{addr}/mcp"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.to_string());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request
}

/// Polls `done` until it holds (a few seconds at most: the server is on this machine).
pub async fn eventually(what: &str, done: impl Fn() -> bool) {
    for _ in 0..500 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never: {what}");
}

/// A response read as it comes: the messages of its SSE stream (or its one JSON body).
pub struct Stream {
    response: reqwest::Response,
    seen: String,
    ended: bool,
}

impl Stream {
    /// POSTs `body` and waits for the response's head.
    pub async fn post(addr: SocketAddr, headers: &[(&str, &str)], body: Value) -> Self {
        let response = post(addr, headers, body).send().await.unwrap();
        assert_eq!(response.status(), 200);
        Self {
            response,
            seen: String::new(),
            ended: false,
        }
    }

    fn messages(&self) -> Vec<Value> {
        if !self.seen.trim_start().starts_with('{') {
            return self
                .seen
                .lines()
                .filter_map(|line| line.strip_prefix("data: ").or(line.strip_prefix("data:")))
                .map(|data| serde_json::from_str(data).unwrap())
                .collect();
        }
        match (self.ended, serde_json::from_str(&self.seen)) {
            (true, Ok(message)) => vec![message],
            _ => Vec::new(),
        }
    }

    async fn read(&mut self) {
        let chunk = tokio::time::timeout(Duration::from_secs(10), self.response.chunk())
            .await
            .expect("hang guard: the server sent nothing for 10 s")
            .unwrap();
        match chunk {
            Some(bytes) => self.seen.push_str(std::str::from_utf8(&bytes).unwrap()),
            None => self.ended = true,
        }
    }

    /// Reads until the response holds `n` messages.
    pub async fn until(&mut self, n: usize) -> Vec<Value> {
        while self.messages().len() < n {
            assert!(!self.ended, "ended with only {:?}", self.messages());
            self.read().await;
        }
        self.messages()
    }

    /// Reads until the server ends the response; every message it held.
    pub async fn until_the_end(mut self) -> Vec<Value> {
        while !self.ended {
            self.read().await;
        }
        self.messages()
    }
}
