//! An rmcp handler behind our MCP Streamable HTTP front end, over real HTTP: a session's DELETE and a stateless
//! request's hang-up reach the handler as rmcp's cancel (`ct` fires), and a session's rmcp server ends with it.

mod support;

use std::{net::SocketAddr, time::Duration};

use axum::{routing::any_service, Router};
use serde_json::{json, Value};
use support::{Fate, Probe};
use tower::ServiceBuilder;
use tower_cancel::CancelStack;
use tower_cancel_http::McpHttp;
use tower_cancel_rmcp::{BridgeSizes, RmcpService};

async fn serve() -> (SocketAddr, Probe, RmcpService<Probe>, impl Fn() -> usize) {
    let probe = Probe::default();
    let rmcp = RmcpService::new(probe.clone());
    let stack = ServiceBuilder::new()
        .layer(CancelStack::mcp())
        .service(rmcp.clone());
    let ended = rmcp.clone();
    let mcp = McpHttp::new(stack).on_session_end(move |id| ended.end_session(id));
    let in_flight = {
        let mcp = mcp.clone();
        move || mcp.in_flight()
    };
    let app = Router::new().route("/mcp", any_service(mcp));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { tower_cancel_http::serve(listener, app).await });
    (addr, probe, rmcp, in_flight)
}

fn post(addr: SocketAddr, headers: &[(&str, &str)], body: Value) -> reqwest::RequestBuilder {
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
async fn eventually(what: &str, done: impl Fn() -> bool) {
    for _ in 0..500 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never: {what}");
}

#[tokio::test]
async fn a_delete_of_the_session_fires_ct_and_ends_its_rmcp_server() {
    let (addr, probe, rmcp, in_flight) = serve().await;
    let init = post(addr, &[], json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": { "name": "t", "version": "0" }}}))
    .send()
    .await
    .unwrap();
    let session = init.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(rmcp.sizes().sessions, 1, "one rmcp server for the session");

    let call = tokio::spawn(
        post(
            addr,
            &[("mcp-session-id", &session)],
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": { "name": "work", "arguments": { "tag": 1 } }}),
        )
        .send(),
    );
    probe.until(1, Fate::Running).await;
    let deleted = reqwest::Client::new()
        .delete(format!("http://{addr}/mcp"))
        .header("mcp-session-id", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 200);
    probe.until(1, Fate::Stopped).await;
    let body = call.await.unwrap().unwrap().text().await.unwrap();
    assert!(
        !body.contains("result") && !body.contains("error"),
        "no reply: {body:?}"
    );

    eventually("the session's rmcp server ended", || {
        rmcp.sizes().sessions == 0
    })
    .await;
    assert_eq!(rmcp.sizes(), BridgeSizes::default());
    assert_eq!(in_flight(), 0);
}

#[tokio::test]
async fn a_stateless_hang_up_fires_ct() {
    let (addr, probe, rmcp, in_flight) = serve().await;
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": { "name": "t", "version": "0" },
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    let headers = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "work"),
    ];
    let call = tokio::spawn(
        post(
            addr,
            &headers,
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": { "name": "work", "arguments": { "tag": 2 }, "_meta": meta }}),
        )
        .send(),
    );
    probe.until(2, Fate::Running).await;
    // The client goes: its connection closes with the request unanswered.
    call.abort();
    probe.until(2, Fate::Stopped).await;
    eventually("nothing in flight", || in_flight() == 0).await;
    assert_eq!(rmcp.sizes(), BridgeSizes::default());

    // The shared stateless server goes on serving.
    let headers = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "work"),
    ];
    let reply = post(
        addr,
        &headers,
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": { "name": "work", "arguments": { "ms": 1, "tag": 3 }, "_meta": meta }}),
    )
    .send()
    .await
    .unwrap()
    .text()
    .await
    .unwrap();
    let reply: Value = serde_json::from_str(&reply).unwrap();
    assert_eq!(reply["result"]["content"][0]["text"], "done 3", "{reply}");
}
