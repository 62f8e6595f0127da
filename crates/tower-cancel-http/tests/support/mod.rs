//! What the HTTP tests share: a server on a free loopback port, a handler that reports how its requests ended,
//! and a raw HTTP/1.1 client for hanging up at an exact moment.
#![allow(dead_code, unreachable_pub)]

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::Router;
use serde_json::{json, Value};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::Notify,
};
use tower_cancel::{BoxError, CancelReason, Request};

pub mod rap;

/// Serve `router` on a free loopback port.
pub async fn serve(router: Router) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { tower_cancel_http::serve(listener, router).await.unwrap() });
    addr
}

/// How each request of the handler ended: `"completed"`, or the cancel reason it saw as it was stopped.
#[derive(Clone, Default)]
pub struct Probe {
    ends: Arc<Mutex<Vec<(String, String)>>>,
    started: Arc<Notify>,
    started_count: Arc<Mutex<usize>>,
}

impl Probe {
    pub fn ends(&self) -> Vec<(String, String)> {
        self.ends.lock().unwrap().clone()
    }

    /// Wait until `n` requests have started in all.
    pub async fn started(&self, n: usize) {
        tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                let notified = self.started.notified();
                if *self.started_count.lock().unwrap() >= n {
                    return;
                }
                notified.await;
            }
        })
        .await
        .expect("the requests started");
    }

    /// Wait until `n` requests have ended in all, and give their ends.
    pub async fn ended(&self, n: usize) -> Vec<(String, String)> {
        tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                if self.ends.lock().unwrap().len() >= n {
                    return self.ends();
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
        .await
        .expect("the requests ended")
    }
}

/// Records how a request ended when its future goes: completed, or stopped with the context's reason.
struct EndGuard {
    probe: Probe,
    id: String,
    context: Option<tower_cancel::RequestContext>,
    completed: bool,
}

impl Drop for EndGuard {
    fn drop(&mut self) {
        let end = if self.completed {
            "completed".to_string()
        } else {
            match self.context.as_ref().and_then(|c| c.reason()) {
                Some(CancelReason::Disconnect) => "disconnect".into(),
                Some(CancelReason::Peer { .. }) => "peer".into(),
                Some(CancelReason::Timeout) => "timeout".into(),
                Some(CancelReason::Shutdown) => "shutdown".into(),
                Some(other) => format!("{other:?}"),
                None => "dropped".into(),
            }
        };
        self.probe.ends.lock().unwrap().push((self.id.clone(), end));
    }
}

/// The handler: `demo/sleep {ms}` -> `{slept}`; anything else -> `{method}`.
pub async fn handle(probe: Probe, req: Request) -> Result<Value, BoxError> {
    if req.method() != "demo/sleep" {
        return Ok(json!({ "method": req.method() }));
    }
    sleep(probe, req).await
}

/// Sleep for the request's `ms` param, then answer `{slept}`; the probe records how it ended.
pub async fn sleep(probe: Probe, req: Request) -> Result<Value, BoxError> {
    let id = req.id().map(|id| id.to_string()).unwrap_or_default();
    let ms = req
        .params_as::<Value>()
        .ok()
        .and_then(|p| p["ms"].as_u64())
        .unwrap_or(0);
    let mut guard = EndGuard {
        probe: probe.clone(),
        id,
        context: req.context().cloned(),
        completed: false,
    };
    *probe.started_count.lock().unwrap() += 1;
    probe.started.notify_waiters();
    tokio::time::sleep(Duration::from_millis(ms)).await;
    guard.completed = true;
    Ok(json!({ "slept": ms }))
}

/// Write a raw HTTP/1.1 POST and return the open stream (drop it to hang up).
pub async fn raw_post(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body.as_bytes()).await.unwrap();
    stream
}

/// Read what the server wrote until it closes or `for_` passes.
pub async fn read_some(stream: &mut TcpStream, for_: Duration) -> String {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let _ = tokio::time::timeout(for_, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    String::from_utf8_lossy(&out).into_owned()
}

/// Wait until `check` holds (the server settles what a hang-up cancelled on its own tasks).
pub async fn eventually(what: &str, check: impl Fn() -> bool) {
    tokio::time::timeout(Duration::from_secs(10), async {
        while !check() {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("never: {what}"));
}

/// An MCP handler for both revisions: `initialize`, `server/discover`, `subscriptions/listen`, and the tools
/// `sleep {ms}`, `progress {steps, intervalMs}` and `ask` (through `tools/call`); other methods are not found.
pub async fn mcp_handle(probe: Probe, req: Request) -> Result<Value, BoxError> {
    let stateless = matches!(
        req.extensions().get::<tower_cancel_http::mcp::Revision>(),
        Some(tower_cancel_http::mcp::Revision::Stateless { .. })
    );
    let params = req.params_as::<Value>().unwrap_or(Value::Null);
    match req.method() {
        "initialize" => Ok(json!({
            "protocolVersion": "2025-11-25",
            "capabilities": { "tools": {} },
            "serverInfo": { "name": "test", "version": "0" }
        })),
        "server/discover" => Ok(json!({
            "resultType": "complete",
            "supportedVersions": ["2026-07-28"],
            "capabilities": { "tools": {} },
            "ttlMs": 0,
            "cacheScope": "private"
        })),
        "notifications/initialized" => Ok(Value::Null),
        "subscriptions/listen" => {
            // The revision's subscription: an acknowledgment, then notifications, all tagged with the listen
            // request's id, on its stream, until the client closes it.
            let id = req.id().cloned().expect("a request");
            let mut guard = EndGuard {
                probe: probe.clone(),
                id: id.to_string(),
                context: req.context().cloned(),
                completed: false,
            };
            let peer = req.peer().expect("a peer");
            let tag = json!({ "io.modelcontextprotocol/subscriptionId": id });
            peer.notify(
                "notifications/subscriptions/acknowledged",
                json!({ "_meta": tag, "notifications": params["notifications"] }),
            )?;
            *probe.started_count.lock().unwrap() += 1;
            probe.started.notify_waiters();
            loop {
                tokio::time::sleep(Duration::from_millis(10)).await;
                if peer
                    .notify("notifications/tools/list_changed", json!({ "_meta": tag }))
                    .is_err()
                {
                    guard.completed = true;
                    return Ok(json!({ "resultType": "complete", "_meta": tag }));
                }
            }
        }
        "tools/call" => {
            let args = &params["arguments"];
            let id = req.id().map(|id| id.to_string()).unwrap_or_default();
            let mut guard = EndGuard {
                probe: probe.clone(),
                id,
                context: req.context().cloned(),
                completed: false,
            };
            *probe.started_count.lock().unwrap() += 1;
            probe.started.notify_waiters();
            match params["name"].as_str() {
                // Asks the client (`elicitation/create` with the arguments) and answers with what it said, or
                // with why it could not ask.
                Some("ask") => {
                    let peer = req.peer().expect("a peer");
                    let text = match peer.request("elicitation/create", args.clone()).await {
                        Ok(answer) => answer["action"].as_str().unwrap_or("?").to_owned(),
                        Err(error) => format!("not asked: {error}"),
                    };
                    guard.completed = true;
                    return Ok(json!({ "content": [{ "type": "text", "text": text }] }));
                }
                Some("sleep") => {
                    let ms = args["ms"].as_u64().unwrap_or(0);
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                }
                Some("progress") => {
                    let steps = args["steps"].as_u64().unwrap_or(1);
                    let interval = args["intervalMs"].as_u64().unwrap_or(0);
                    for step in 1..=steps {
                        if let Some(progress) = req.progress() {
                            progress.report(
                                tower_cancel::progress::ProgressUpdate::new(step as f64)
                                    .total(steps as f64),
                            );
                        }
                        tokio::time::sleep(Duration::from_millis(interval)).await;
                    }
                }
                _ => {
                    guard.completed = true;
                    return Err(Box::new(tower_cancel::ErrorObject::invalid_params(
                        "unknown tool",
                    )));
                }
            }
            guard.completed = true;
            let mut result = json!({ "content": [{ "type": "text", "text": "done" }] });
            if stateless {
                result["resultType"] = json!("complete");
            }
            Ok(result)
        }
        method => Err(Box::new(tower_cancel::ErrorObject::method_not_found(
            method,
        ))),
    }
}

/// An MCP endpoint over the MCP stack and [`mcp_handle`], reporting to `probe`.
pub fn mcp_http(probe: &Probe) -> tower_cancel_http::McpHttp<impl tower_cancel_http::RpcService> {
    let probe = probe.clone();
    let stack = tower::ServiceBuilder::new()
        .layer(tower_cancel::CancelStack::mcp())
        .service(tower::service_fn(move |req| mcp_handle(probe.clone(), req)));
    tower_cancel_http::McpHttp::new(stack)
}

/// [`mcp_http`] with a timeout on every request.
pub fn mcp_http_with_timeout(
    probe: &Probe,
    timeout: Duration,
) -> tower_cancel_http::McpHttp<impl tower_cancel_http::RpcService> {
    let probe = probe.clone();
    let stack = tower::ServiceBuilder::new()
        .layer(tower_cancel::CancelStack::mcp().timeout(timeout))
        .service(tower::service_fn(move |req| mcp_handle(probe.clone(), req)));
    tower_cancel_http::McpHttp::new(stack)
}

/// Serve `mcp` at `/mcp` on a free loopback port.
pub async fn mount_mcp(
    mcp: tower_cancel_http::McpHttp<impl tower_cancel_http::RpcService>,
) -> SocketAddr {
    serve(Router::new().route("/mcp", axum::routing::any_service(mcp))).await
}
