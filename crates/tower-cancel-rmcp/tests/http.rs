//! An rmcp handler behind our MCP Streamable HTTP front end, over real HTTP: a session's DELETE and a stateless
//! request's hang-up, a shutdown and a cancel POSTed to another replica reach the handler as rmcp's cancel (`ct`
//! fires), and a session's rmcp server ends with it.

mod support;

use std::net::SocketAddr;

use serde_json::{json, Value};
use support::{
    http::{eventually, open_session, post, stateless_meta, Served},
    Fate,
};
use tower_cancel_redis::{testing::RedisServer, Config, RedisBus};
use tower_cancel_rmcp::BridgeSizes;

/// `tools/call` of `work` with `tag`, forever unless cancelled, in `session`: the response, once it ends.
fn call_work(
    addr: SocketAddr,
    session: &str,
    id: u64,
    tag: u64,
) -> tokio::task::JoinHandle<reqwest::Result<reqwest::Response>> {
    tokio::spawn(
        post(
            addr,
            &[("mcp-session-id", session)],
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": { "name": "work", "arguments": { "tag": tag } }}),
        )
        .send(),
    )
}

#[tokio::test]
async fn a_delete_of_the_session_fires_ct_and_ends_its_rmcp_server() {
    let Served {
        addr,
        probe,
        rmcp,
        mcp,
    } = Served::start(None).await;
    let session = open_session(addr).await;
    assert_eq!(rmcp.sizes().sessions, 1, "one rmcp server for the session");

    let call = call_work(addr, &session, 1, 1);
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
    assert_eq!(mcp.in_flight(), 0);
}

#[tokio::test]
async fn a_stateless_hang_up_fires_ct() {
    let Served {
        addr,
        probe,
        rmcp,
        mcp,
    } = Served::start(None).await;
    let meta = stateless_meta();
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
    eventually("nothing in flight", || mcp.in_flight() == 0).await;
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

#[tokio::test]
async fn a_shutdown_fires_ct_answers_32603_and_ends_every_rmcp_server() {
    let server = Served::start(None).await;
    let session = open_session(server.addr).await;
    let call = call_work(server.addr, &session, 1, 4);
    server.probe.until(4, Fate::Running).await;

    assert_eq!(server.mcp.shutdown(), 1, "one request cancelled");
    server.probe.until(4, Fate::Stopped).await;
    let response = call.await.unwrap().unwrap();
    assert_eq!(response.status(), 200);
    let reply: Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
    assert_eq!(
        reply,
        json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32603,
            "message": "Internal error: request cancelled (server shutting down)"}})
    );

    server.mcp.drained().await;
    eventually("every rmcp server ended", || {
        server.rmcp.sizes() == BridgeSizes::default()
    })
    .await;
    assert_eq!((server.mcp.in_flight(), server.mcp.sessions()), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_posted_to_another_replica_fires_ct_on_the_replica_running_the_call() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let url = redis.url();
    let start = |id| RedisBus::start(&url, id, Config::new().stream("rmcp"));
    let (bus_a, bus_b) = (start("a").await.unwrap(), start("b").await.unwrap());
    let a = Served::start(Some(bus_a.replica().clone())).await;
    let b = Served::start(Some(bus_b.replica().clone())).await;

    let session = open_session(a.addr).await;
    let call = call_work(a.addr, &session, 7, 5);
    a.probe.until(5, Fate::Running).await;
    // The load balancer sends the cancel to B, which does not hold the session.
    let cancel = post(
        b.addr,
        &[("mcp-session-id", &session)],
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": { "requestId": 7, "reason": "user stopped it" }}),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(cancel.status(), 202);

    a.probe.until(5, Fate::Stopped).await;
    let body = call.await.unwrap().unwrap().text().await.unwrap();
    assert!(
        !body.contains("result") && !body.contains("error"),
        "MCP answers no cancelled request: {body:?}"
    );
    eventually("A's request gone", || a.mcp.in_flight() == 0).await;
    assert_eq!(bus_a.replica().stats().applied, 1);
    assert!(b.probe.fates().is_empty(), "B ran nothing");
    assert_eq!(b.rmcp.sizes(), BridgeSizes::default());

    // The session on A goes on: the next call is answered.
    let reply = post(
        a.addr,
        &[("mcp-session-id", &session)],
        json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call",
        "params": { "name": "work", "arguments": { "ms": 1, "tag": 6 } }}),
    )
    .send()
    .await
    .unwrap()
    .text()
    .await
    .unwrap();
    assert!(reply.contains("done 6"), "{reply}");
}
