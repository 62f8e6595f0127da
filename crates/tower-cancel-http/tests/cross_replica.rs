//! Two replicas of a server sharing one real Redis (a private `redis-server`): the request runs on A, its cancel
//! is POSTed to B. RAP (the runtime POSTs its cancel to a base URL), MCP's session revision (a session's
//! requests go to the replica that holds it; its cancel may land anywhere), and a JSON-RPC principal's scope.

mod support;

use std::net::SocketAddr;

use axum::{
    routing::{any_service, post_service},
    Router,
};
use serde_json::{json, Value};
use support::{eventually, mcp_handle, rap::Harness, serve, Probe};
use tower::{service_fn, util::MapRequestLayer, ServiceBuilder};
use tower_cancel::{bus::Replica, CancelStack};
use tower_cancel_http::{rap::Rap, JsonRpc, McpHttp, RpcService};
use tower_cancel_redis::{testing::RedisServer, Config, RedisBus};

/// Replicas `a` and `b` of one deployment on `redis`.
async fn buses(redis: &RedisServer, stream: &str) -> (RedisBus, RedisBus) {
    let url = redis.url();
    let start = |id| RedisBus::start(&url, id, Config::new().stream(stream));
    (start("a").await.unwrap(), start("b").await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rap_a_cancel_posted_to_another_replica_stops_the_call_and_no_result_is_sent() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let (bus_a, bus_b) = buses(&redis, "rap").await;
    let attach = |replica: &Replica| {
        let replica = replica.clone();
        move |server: tower_cancel_http::rap::ToolServer<support::rap::Stack>| {
            server.replica(replica)
        }
    };
    let a = Harness::with(CancelStack::new(Rap), attach(bus_a.replica()), vec![]).await;
    let b = Harness::with(CancelStack::new(Rap), attach(bus_b.replica()), vec![]).await;

    a.invoke("T", "c1", 60_000).await;
    a.probe.started(1).await;
    // The runtime's cancel lands on B, which never saw the call.
    b.cancel("T", "c1").await;
    assert_eq!(
        a.probe.ended(1).await,
        [("\"c1\"".to_owned(), "peer".to_owned())],
        "stopped on A as by a cancel POSTed to A"
    );
    eventually("A's call gone", || a.server.in_flight() == 0).await;
    assert_eq!(bus_a.replica().stats().applied, 1);
    assert!(!a.alive("T", "c1").await);

    // A call on A that completes still delivers its result: only the cancelled one is silent.
    a.invoke("T", "c2", 5).await;
    let results = a.callback.results(1).await;
    assert_eq!(results.len(), 1);
    assert_eq!(results[0]["id"], "c2");
    assert!(b.callback.received().is_empty());
    // The delivery's task ends just after the callback has its result.
    eventually("nothing left running", || {
        a.server.in_flight() == 0 && b.server.in_flight() == 0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rap_a_cancel_that_overtakes_its_invocation_across_replicas_keeps_the_call_from_running() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let (bus_a, bus_b) = buses(&redis, "rap-early").await;
    let a = Harness::with(
        CancelStack::new(Rap),
        |server| server.replica(bus_a.replica().clone()),
        vec![],
    )
    .await;
    let b = Harness::with(
        CancelStack::new(Rap),
        |server| server.replica(bus_b.replica().clone()),
        vec![],
    )
    .await;
    b.cancel("T", "c1").await;
    eventually("A heard of it", || bus_a.replica().stats().received == 1).await;
    a.invoke("T", "c1", 60_000).await;
    eventually("the call refused to run", || a.server.in_flight() == 0).await;
    assert!(a.probe.ends().is_empty(), "the handler never started");
    assert!(
        a.callback.received().is_empty(),
        "no result for a cancelled call"
    );
}

fn mcp_server(probe: &Probe, replica: &Replica) -> McpHttp<impl RpcService> {
    let probe = probe.clone();
    let stack = ServiceBuilder::new()
        .layer(CancelStack::mcp())
        .service(service_fn(move |req| mcp_handle(probe.clone(), req)));
    McpHttp::new(stack).replica(replica.clone())
}

const ACCEPT: (&str, &str) = ("accept", "application/json, text/event-stream");

async fn post(addr: SocketAddr, headers: &[(&str, &str)], body: Value) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .post(format!("http://{addr}/mcp"))
        .header("content-type", "application/json")
        .body(body.to_string());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_a_sessions_cancel_posted_to_another_replica_stops_its_request_there() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let (bus_a, bus_b) = buses(&redis, "mcp").await;
    let (probe_a, probe_b) = (Probe::default(), Probe::default());
    let server_a = mcp_server(&probe_a, bus_a.replica());
    let server_b = mcp_server(&probe_b, bus_b.replica());
    let a = serve(Router::new().route("/mcp", any_service(server_a.clone()))).await;
    let b = serve(Router::new().route("/mcp", any_service(server_b.clone()))).await;

    let init = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}});
    let reply = post(a, &[ACCEPT], init).await;
    let session = reply.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let in_session = [ACCEPT, ("mcp-session-id", session.as_str())];

    // The request goes to A (affinity), its cancel to B.
    let call = json!({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"sleep","arguments":{"ms":60000}}});
    let running = tokio::spawn({
        let session = session.clone();
        async move { post(a, &[ACCEPT, ("mcp-session-id", session.as_str())], call).await }
    });
    probe_a.started(1).await;
    let cancel = json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7,"reason":"user stopped it"}});
    assert_eq!(post(b, &in_session, cancel).await.status(), 202);

    assert_eq!(
        probe_a.ended(1).await,
        [("7".to_owned(), "peer".to_owned())]
    );
    // MCP: a cancelled request gets no reply; A ends its stream with nothing in it.
    let response = running.await.unwrap();
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    assert!(
        !text.contains("\"id\":7"),
        "no reply for the cancelled request: {text:?}"
    );
    eventually("A's request gone", || server_a.in_flight() == 0).await;

    // B holds no session: anything else POSTed there in it is refused, as without replicas.
    let list = json!({"jsonrpc":"2.0","id":8,"method":"tools/list"});
    assert_eq!(post(b, &in_session, list).await.status(), 404);
    assert_eq!((server_b.sessions(), server_b.in_flight()), (0, 0));
    assert!(probe_b.ends().is_empty());
}

/// The principal an auth layer would put in the request's extensions; every request here is Alice's.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
struct Principal(&'static str);

impl std::fmt::Display for Principal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

async fn jsonrpc_replica(
    probe: &Probe,
    replica: &Replica,
) -> (SocketAddr, JsonRpc<impl RpcService>) {
    let probe = probe.clone();
    let stack = ServiceBuilder::new()
        .layer(CancelStack::lsp())
        .service(service_fn(move |req| support::handle(probe.clone(), req)));
    let rpc = JsonRpc::new(stack).scope_by_principal_on::<Principal>(replica.clone());
    let as_alice = MapRequestLayer::new(|mut request: http::Request<axum::body::Body>| {
        request.extensions_mut().insert(Principal("alice"));
        request
    });
    let app = Router::new().route("/rpc", post_service(rpc.clone()).layer(as_alice));
    (serve(app).await, rpc)
}

async fn post_rpc(addr: SocketAddr, body: &str) -> (u16, String) {
    let response = reqwest::Client::new()
        .post(format!("http://{addr}/rpc"))
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jsonrpc_a_principals_cancel_posted_to_another_replica_stops_its_request_there() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let (bus_a, bus_b) = buses(&redis, "jsonrpc").await;
    let (probe_a, probe_b) = (Probe::default(), Probe::default());
    let (a, rpc_a) = jsonrpc_replica(&probe_a, bus_a.replica()).await;
    let (b, rpc_b) = jsonrpc_replica(&probe_b, bus_b.replica()).await;

    let sleep = r#"{"jsonrpc":"2.0","id":1,"method":"demo/sleep","params":{"ms":60000}}"#;
    let running = tokio::spawn(async move { post_rpc(a, sleep).await });
    probe_a.started(1).await;
    let cancel = r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":1}}"#;
    assert_eq!(post_rpc(b, cancel).await, (204, String::new()));

    let (status, body) = running.await.unwrap();
    assert_eq!(status, 200);
    let reply: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        reply,
        json!({"jsonrpc":"2.0","id":1,"error":{"code":-32800,"message":"Request cancelled"}})
    );
    assert_eq!(
        probe_a.ended(1).await,
        [("1".to_owned(), "peer".to_owned())]
    );
    assert_eq!((rpc_a.in_flight(), rpc_b.in_flight()), (0, 0));
    assert!(probe_b.ends().is_empty());
}
