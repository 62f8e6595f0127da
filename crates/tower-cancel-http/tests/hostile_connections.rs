//! Hostile clients against `tower_cancel_http::serve`, over real sockets: slowloris heads and bodies, connections
//! that never finish their head beyond the connection limit, idle keep-alive connections, and every connection
//! busy. Each bound is set short here; what is asserted of time beyond that is only the issue's "a normal request
//! is still answered within a second".

mod support;

use std::{
    future::{Future, IntoFuture},
    net::SocketAddr,
    time::Duration,
};

use axum::{
    routing::{any_service, post_service},
    Router,
};
use serde_json::{json, Value};
use support::{handle, mcp_handle, Probe};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    task::JoinSet,
    time::{sleep, timeout, Instant},
};
use tower::{service_fn, ServiceBuilder};
use tower_cancel::{CancelStack, Request};
use tower_cancel_http::{
    abp::{wire::AppInfo, AbpApp},
    auth::require_bearer,
    rap::{Rap, ToolServer},
    serve::{ConnectionStats, Connections, Serve},
    JsonRpc, McpHttp,
};

/// The issue's bound on a normal request while the server is under attack.
const ANSWERED_WITHIN: Duration = Duration::from_secs(1);
/// A generous bound on what the server does on its own (close a connection), far above the timeouts set here.
const EVENTUALLY: Duration = Duration::from_secs(20);

/// One front end in a router, and a normal request to it with the start of the answer it gets.
struct FrontEnd {
    name: &'static str,
    router: Router,
    /// The head of a request this front end reads, for slowloris to drip.
    head: &'static str,
    normal: fn(SocketAddr) -> String,
    answer: &'static str,
}

fn jsonrpc() -> FrontEnd {
    let probe = Probe::default();
    let stack = ServiceBuilder::new()
        .layer(CancelStack::lsp())
        .service(service_fn(move |req| handle(probe.clone(), req)));
    FrontEnd {
        name: "JsonRpc",
        router: Router::new().route("/rpc", post_service(JsonRpc::new(stack))),
        head: "POST /rpc HTTP/1.1\r\n",
        normal: |addr| {
            post(
                "/rpc",
                addr,
                &[],
                r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
            )
        },
        answer: "HTTP/1.1 200",
    }
}

fn mcp() -> FrontEnd {
    let probe = Probe::default();
    let stack = ServiceBuilder::new()
        .layer(CancelStack::mcp())
        .service(service_fn(move |req| mcp_handle(probe.clone(), req)));
    FrontEnd {
        name: "McpHttp",
        router: Router::new().route("/mcp", any_service(McpHttp::new(stack))),
        head: "POST /mcp HTTP/1.1\r\n",
        normal: |addr| {
            let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "t", "version": "0"}}});
            post(
                "/mcp",
                addr,
                &[("accept", "application/json, text/event-stream")],
                &initialize.to_string(),
            )
        },
        answer: "HTTP/1.1 200",
    }
}

fn rap() -> FrontEnd {
    let tools = support::rap::tools(&Probe::default());
    let toolset = tools.toolset("tools", "http://127.0.0.1:1/invoke");
    let stack = ServiceBuilder::new()
        .layer(CancelStack::new(Rap))
        .service(tools);
    FrontEnd {
        name: "ToolServer",
        router: ToolServer::new(toolset, stack).router_with(require_bearer(support::rap::TOKEN)),
        head: "GET /.well-known/rap-toolset HTTP/1.1\r\n",
        normal: |addr| format!("GET /.well-known/rap-toolset HTTP/1.1\r\nHost: {addr}\r\n\r\n"),
        answer: "HTTP/1.1 200",
    }
}

fn abp() -> FrontEnd {
    let stack = ServiceBuilder::new()
        .layer(CancelStack::abp())
        .service(service_fn(|req: Request| async move {
            Ok::<_, tower_cancel::BoxError>(req.params_as::<Value>().unwrap_or_default())
        }));
    let app = AbpApp::new(stack)
        .app(AppInfo {
            id: "test".into(),
            name: "Test".into(),
            version: "1.0.0".into(),
        })
        .capabilities(["echo"]);
    FrontEnd {
        name: "AbpApp",
        router: app.router(),
        head: "GET /abp HTTP/1.1\r\n",
        normal: websocket_handshake,
        answer: "HTTP/1.1 101",
    }
}

fn post(path: &str, addr: SocketAddr, headers: &[(&str, &str)], body: &str) -> String {
    let mut request = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request + "\r\n" + body
}

fn websocket_handshake(addr: SocketAddr) -> String {
    format!(
        "GET /abp HTTP/1.1\r\nHost: {addr}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
    )
}

/// Serve `router` on a loopback port with `configure`'s bounds.
async fn served(
    router: Router,
    configure: impl FnOnce(Serve<TcpListener, Router>) -> Serve<TcpListener, Router>,
) -> (SocketAddr, Connections) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = configure(tower_cancel_http::serve(listener, router));
    let connections = server.connections();
    tokio::spawn(server.into_future());
    (addr, connections)
}

/// Send `request` on a new connection and give the first bytes of the answer, within `ANSWERED_WITHIN`.
async fn answered(addr: SocketAddr, request: &str) -> Result<String, String> {
    let started = Instant::now();
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut buf = vec![0; 1024];
        let n = stream.read(&mut buf).await.map_err(|e| e.to_string())?;
        Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
    };
    timeout(ANSWERED_WITHIN, exchange)
        .await
        .map_err(|_| format!("no answer within {:?}", started.elapsed()))?
}

/// Resolves once the server closes `stream` (EOF or reset), ignoring whatever it writes first.
async fn closed_by_server(stream: &mut TcpStream) {
    let mut buf = [0; 1024];
    while let Ok(n) = stream.read(&mut buf).await {
        if n == 0 {
            return;
        }
    }
}

/// A connection that writes `head`, then drips one more header byte every `interval` until the server closes it.
async fn slowloris(addr: SocketAddr, head: &'static str, interval: Duration) -> bool {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut read, mut write) = stream.into_split();
    let drip = async move {
        if write.write_all(head.as_bytes()).await.is_err() {
            return;
        }
        for byte in b"X-Slow: ".iter().cycle() {
            sleep(interval).await;
            if write.write_all(&[*byte]).await.is_err() {
                return;
            }
        }
    };
    let closed = async move {
        let mut buf = [0; 256];
        while let Ok(n) = read.read(&mut buf).await {
            if n == 0 {
                return;
            }
        }
    };
    tokio::select! {
        () = drip => false,
        () = closed => true,
    }
}

/// Run `n` of `connection` at once; each yields whether the server closed it.
fn spawn_many<F>(n: usize, connection: impl Fn() -> F) -> JoinSet<bool>
where
    F: Future<Output = bool> + Send + 'static,
{
    let mut set = JoinSet::new();
    for _ in 0..n {
        set.spawn(connection());
    }
    set
}

/// How many of `set` the server closed within `EVENTUALLY`.
async fn closed_count(mut set: JoinSet<bool>) -> usize {
    let mut closed = 0;
    let _ = timeout(EVENTUALLY, async {
        while let Some(joined) = set.join_next().await {
            closed += usize::from(joined.unwrap());
        }
    })
    .await;
    closed
}

async fn stats_until(
    connections: &Connections,
    what: &str,
    check: impl Fn(&ConnectionStats) -> bool,
) {
    timeout(EVENTUALLY, async {
        while !check(&connections.stats()) {
            sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("never {what}: {:?}", connections.stats()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowloris_heads_are_closed_at_the_header_timeout_while_normal_requests_are_answered() {
    for front in [jsonrpc(), mcp(), rap(), abp()] {
        let (addr, connections) = served(front.router, |serve| {
            serve.header_read_timeout(Duration::from_millis(500))
        })
        .await;
        let head = front.head;
        let dripping = spawn_many(200, || slowloris(addr, head, Duration::from_millis(100)));
        stats_until(&connections, "200 connections open", |stats| {
            stats.accepted >= 200
        })
        .await;
        let answer = answered(addr, &(front.normal)(addr)).await;
        assert!(
            answer.as_deref().is_ok_and(|a| a.starts_with(front.answer)),
            "{}: a normal request while 200 connections drip: {answer:?}",
            front.name
        );
        assert_eq!(
            closed_count(dripping).await,
            200,
            "{}: dripping connections closed",
            front.name
        );
        assert!(
            connections.stats().head_timeouts >= 200,
            "{}: {:?}",
            front.name,
            connections.stats()
        );
    }
}

#[tokio::test]
async fn a_connection_that_sends_nothing_is_closed_at_the_header_timeout() {
    let (addr, connections) = served(jsonrpc().router, |serve| {
        serve.header_read_timeout(Duration::from_millis(300))
    })
    .await;
    let mut silent = TcpStream::connect(addr).await.unwrap();
    timeout(EVENTUALLY, closed_by_server(&mut silent))
        .await
        .expect("the silent connection is closed");
    assert_eq!(connections.stats().head_timeouts, 1);
}

#[tokio::test]
async fn a_dripped_body_is_answered_408_and_its_connection_closed() {
    let body_timeout = Duration::from_millis(500);
    let probe = Probe::default();
    let rpc_stack = ServiceBuilder::new()
        .layer(CancelStack::lsp())
        .service(service_fn(move |req| handle(probe.clone(), req)));
    let mcp_stack = ServiceBuilder::new()
        .layer(CancelStack::mcp())
        .service(service_fn(|req| mcp_handle(Probe::default(), req)));
    let tools = support::rap::tools(&Probe::default());
    let toolset = tools.toolset("tools", "http://127.0.0.1:1/invoke");
    let rap_stack = ServiceBuilder::new()
        .layer(CancelStack::new(Rap))
        .service(tools);
    let no_headers: &[(&str, &str)] = &[];
    let cases = [
        (
            "/rpc",
            Router::new().route(
                "/rpc",
                post_service(JsonRpc::new(rpc_stack).body_timeout(body_timeout)),
            ),
            no_headers,
        ),
        (
            "/mcp",
            Router::new().route(
                "/mcp",
                any_service(McpHttp::new(mcp_stack).body_timeout(body_timeout)),
            ),
            &[("accept", "application/json, text/event-stream")],
        ),
        (
            "/invoke",
            ToolServer::new(toolset, rap_stack)
                .body_timeout(body_timeout)
                .router_with(require_bearer(support::rap::TOKEN)),
            &[("authorization", "Bearer s3cret")],
        ),
    ];
    for (path, router, headers) in cases {
        let (addr, _) = served(router, |serve| serve).await;
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let mut head = format!(
            "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n"
        );
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        stream.write_all((head + "\r\n{").as_bytes()).await.unwrap();
        let (mut read, mut write) = stream.into_split();
        let drip = tokio::spawn(async move {
            loop {
                sleep(Duration::from_millis(100)).await;
                if write.write_all(b" ").await.is_err() {
                    return;
                }
            }
        });
        let mut answer = Vec::new();
        timeout(EVENTUALLY, read.read_to_end(&mut answer))
            .await
            .unwrap_or_else(|_| {
                panic!("{path}: the dripped body was never answered, nor its connection closed")
            })
            .ok();
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 408"), "{path}: {answer}");
        drip.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_limit_evict_the_longest_idle_and_a_normal_request_is_answered() {
    for front in [jsonrpc(), abp()] {
        let (addr, connections) = served(front.router, |serve| serve.max_connections(64)).await;
        let head = front.head;
        let half_headers = spawn_many(300, || async move {
            let mut stream = TcpStream::connect(addr).await.unwrap();
            if stream.write_all(head.as_bytes()).await.is_err() {
                return true;
            }
            // Held open (its head never finished) until the server closes it.
            timeout(EVENTUALLY, closed_by_server(&mut stream))
                .await
                .is_ok()
        });
        stats_until(&connections, "300 connections taken", |stats| {
            stats.accepted >= 300
        })
        .await;
        let answer = answered(addr, &(front.normal)(addr)).await;
        assert!(
            answer.as_deref().is_ok_and(|a| a.starts_with(front.answer)),
            "{}: a normal request beyond the limit: {answer:?}",
            front.name
        );
        // Every half-header connection past the limit was closed by the server (the rest at its head timeout,
        // 30 s by default, beyond what is waited for here).
        let mut set = half_headers;
        let mut closed = 0;
        while closed < 300 - 64 {
            match timeout(EVENTUALLY, set.join_next()).await {
                Ok(Some(joined)) => closed += usize::from(joined.unwrap()),
                _ => break,
            }
        }
        assert!(
            closed >= 300 - 64,
            "{}: {closed} closed: {:?}",
            front.name,
            connections.stats()
        );
        set.abort_all();
        let stats = connections.stats();
        assert!(stats.peak_open <= 64, "{}: {stats:?}", front.name);
        assert!(stats.evicted >= 300 - 64, "{}: {stats:?}", front.name);
    }
}

#[tokio::test]
async fn when_every_connection_is_busy_a_newcomer_gets_503_with_retry_after() {
    let probe = Probe::default();
    let front = jsonrpc_with(&probe);
    let (addr, connections) = served(front, |serve| serve.max_connections(2)).await;
    let sleep_request = |id: u32| {
        post(
            "/rpc",
            addr,
            &[],
            &json!({"jsonrpc": "2.0", "id": id, "method": "demo/sleep", "params": {"ms": 10_000}})
                .to_string(),
        )
    };
    let mut busy = Vec::new();
    for id in 1..=2 {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(sleep_request(id).as_bytes())
            .await
            .unwrap();
        busy.push(stream);
    }
    probe.started(2).await;
    let answer = answered(addr, &sleep_request(3)).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("retry-after: 1\r\n"),
        "{answer}"
    );
    let stats = connections.stats();
    assert_eq!(
        (stats.open, stats.refused, stats.evicted),
        (2, 1, 0),
        "{stats:?}"
    );
}

fn jsonrpc_with(probe: &Probe) -> Router {
    let probe = probe.clone();
    let stack = ServiceBuilder::new()
        .layer(CancelStack::lsp())
        .service(service_fn(move |req| handle(probe.clone(), req)));
    Router::new().route("/rpc", post_service(JsonRpc::new(stack)))
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_after_the_idle_timeout() {
    let (addr, connections) = served(jsonrpc().router, |serve| {
        serve.idle_timeout(Duration::from_millis(300))
    })
    .await;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let request = post(
        "/rpc",
        addr,
        &[],
        r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut buf = vec![0; 1024];
    let n = stream.read(&mut buf).await.unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    // Kept alive after its answer, then closed once idle.
    timeout(EVENTUALLY, closed_by_server(&mut stream))
        .await
        .expect("the idle connection is closed");
    let stats = connections.stats();
    assert_eq!((stats.idle_closed, stats.open), (1, 0), "{stats:?}");
}

#[tokio::test]
async fn an_idle_http2_connection_is_closed_after_the_idle_timeout() {
    let (addr, connections) = served(jsonrpc().router, |serve| {
        serve.idle_timeout(Duration::from_millis(300))
    })
    .await;
    let client = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let response = client
        .post(format!("http://{addr}/rpc"))
        .header("content-type", "application/json")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.version(), http::Version::HTTP_2);
    assert_eq!(response.status(), 200);
    stats_until(&connections, "the idle HTTP/2 connection closed", |stats| {
        stats.idle_closed == 1 && stats.open == 0
    })
    .await;
}

#[tokio::test]
async fn a_websocket_is_neither_idle_closed_nor_evicted() {
    let (addr, connections) = served(abp().router, |serve| {
        serve
            .idle_timeout(Duration::from_millis(100))
            .header_read_timeout(Duration::from_millis(100))
            .max_connections(1)
    })
    .await;
    let mut websocket = TcpStream::connect(addr).await.unwrap();
    websocket
        .write_all(websocket_handshake(addr).as_bytes())
        .await
        .unwrap();
    let mut buf = vec![0; 1024];
    let n = websocket.read(&mut buf).await.unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 101"));
    sleep(Duration::from_millis(500)).await;
    // The one connection allowed is the WebSocket's: a newcomer is refused, and the WebSocket stays open.
    let answer = answered(addr, &websocket_handshake(addr)).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(
        timeout(Duration::from_millis(300), websocket.read(&mut buf))
            .await
            .is_err(),
        "the WebSocket was closed"
    );
    let stats = connections.stats();
    assert_eq!(
        (stats.open, stats.idle_closed, stats.evicted),
        (1, 0, 0),
        "{stats:?}"
    );
    drop(websocket);
    stats_until(&connections, "the WebSocket's slot freed", |stats| {
        stats.open == 0
    })
    .await;
}

#[tokio::test]
async fn a_graceful_shutdown_answers_what_is_in_flight_and_ends() {
    let probe = Probe::default();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server =
        tower_cancel_http::serve(listener, jsonrpc_with(&probe)).with_graceful_shutdown(async {
            let _ = stopped.await;
        });
    let connections = server.connections();
    let server = tokio::spawn(server.into_future());
    let mut idle = TcpStream::connect(addr).await.unwrap();
    let mut busy = TcpStream::connect(addr).await.unwrap();
    let request = json!({"jsonrpc": "2.0", "id": 1, "method": "demo/sleep", "params": {"ms": 300}});
    busy.write_all(post("/rpc", addr, &[], &request.to_string()).as_bytes())
        .await
        .unwrap();
    probe.started(1).await;
    stop.send(()).unwrap();
    let mut answer = Vec::new();
    timeout(EVENTUALLY, busy.read_to_end(&mut answer))
        .await
        .unwrap()
        .unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.starts_with("HTTP/1.1 200") && answer.contains(r#""slept":300"#),
        "{answer}"
    );
    timeout(EVENTUALLY, closed_by_server(&mut idle))
        .await
        .unwrap();
    timeout(EVENTUALLY, server).await.unwrap().unwrap().unwrap();
    assert_eq!(connections.stats().open, 0);
}
