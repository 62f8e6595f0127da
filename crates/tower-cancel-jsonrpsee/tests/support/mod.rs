//! A jsonrpsee server under the adapter whose handlers report what they saw: their `RequestContext`, and why
//! they stopped. A principal is read from the `x-user` header by an HTTP middleware, as an auth layer would.

#![allow(dead_code, unreachable_pub)]

use std::{
    future::Future,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use futures_util::{SinkExt, StreamExt};
use jsonrpsee::{
    server::{middleware::rpc::RpcServiceBuilder, RpcModule, Server, ServerHandle},
    types::ErrorObjectOwned,
};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_tungstenite::{tungstenite::Message, MaybeTlsStream, WebSocketStream};
use tower::{util::MapRequestLayer, ServiceBuilder};
use tower_cancel::{CancelReason, RequestContext};
use tower_cancel_jsonrpsee::CancelRpcLayer;

pub type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// A hang guard, never the thing tested.
pub const GUARD: Duration = Duration::from_secs(20);

/// A sleep no test waits for: only a cancel ends it.
pub const LONG_MS: u64 = 600_000;

/// The principal an HTTP middleware reads from `x-user`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct User(pub String);

impl std::fmt::Display for User {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A handler dropped before it finished: its call's id, and the reason its context gave.
pub type Stopped = (String, Option<CancelReason>);

/// What the handlers saw.
#[derive(Clone, Debug, Default)]
pub struct Probe {
    started: Arc<Mutex<Vec<String>>>,
    stopped: Arc<Mutex<Vec<Stopped>>>,
}

impl Probe {
    pub fn started(&self) -> usize {
        self.started.lock().unwrap().len()
    }

    pub fn stopped(&self) -> Vec<Stopped> {
        self.stopped.lock().unwrap().clone()
    }
}

/// Records why its handler stopped, if it did not finish.
struct Running {
    probe: Probe,
    context: RequestContext,
    finished: bool,
}

impl Drop for Running {
    fn drop(&mut self) {
        if !self.finished {
            let entry = (self.context.id().to_string(), self.context.reason());
            self.probe.stopped.lock().unwrap().push(entry);
        }
    }
}

pub struct TestServer {
    pub addr: SocketAddr,
    pub handle: ServerHandle,
    pub probe: Probe,
    pub layer: CancelRpcLayer,
}

fn module(probe: Probe) -> RpcModule<Probe> {
    let mut module = RpcModule::new(probe);
    module
        .register_async_method("probe/sleep", |params, probe, extensions| async move {
            #[derive(serde::Deserialize)]
            struct Sleep {
                ms: u64,
            }
            let Sleep { ms } = params.parse()?;
            let context = extensions
                .get::<RequestContext>()
                .cloned()
                .expect("the adapter gives each call its context");
            probe.started.lock().unwrap().push(context.id().to_string());
            let mut running = Running {
                probe: (*probe).clone(),
                context,
                finished: false,
            };
            tokio::time::sleep(Duration::from_millis(ms)).await;
            running.finished = true;
            Ok::<Value, ErrorObjectOwned>(json!({ "slept": ms }))
        })
        .unwrap();
    module
        .register_subscription(
            "probe/subscribe",
            "probe/item",
            "probe/unsubscribe",
            |_, pending, _, _| async move {
                let sink = pending.accept().await?;
                for item in 0..3 {
                    let item = serde_json::value::to_raw_value(&item).expect("a number");
                    sink.send(jsonrpsee::SubscriptionMessage::from(item))
                        .await?;
                }
                Ok(())
            },
        )
        .unwrap();
    module
        .register_async_method("probe/panic", |_, _, _| async move {
            if true {
                panic!("the handler's own bug");
            }
            json!(null)
        })
        .unwrap();
    module
}

/// The server under `layer`, the principal read from `x-user`.
pub async fn start(layer: CancelRpcLayer) -> TestServer {
    let probe = Probe::default();
    let http = ServiceBuilder::new().layer(MapRequestLayer::new(
        |mut request: http::Request<jsonrpsee::server::HttpBody>| {
            let user = request
                .headers()
                .get("x-user")
                .and_then(|value| value.to_str().ok())
                .map(|name| User(name.to_owned()));
            if let Some(user) = user {
                request.extensions_mut().insert(user);
            }
            request
        },
    ));
    let server = Server::builder()
        .set_http_middleware(http)
        .set_rpc_middleware(RpcServiceBuilder::new().layer(layer.clone()))
        .build("127.0.0.1:0")
        .await
        .expect("bound");
    let addr = server.local_addr().unwrap();
    TestServer {
        addr,
        handle: server.start(module(probe.clone())),
        probe,
        layer,
    }
}

pub async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let waited = tokio::time::timeout(GUARD, async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await;
    assert!(waited.is_ok(), "never happened: {what}");
}

pub async fn guarded<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(GUARD, future)
        .await
        .unwrap_or_else(|_| panic!("never happened: {what}"))
}

/// A raw WebSocket to `addr`, as `user` if given.
pub async fn ws(addr: SocketAddr, user: Option<&str>) -> Ws {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let mut request = format!("ws://{addr}").into_client_request().unwrap();
    if let Some(user) = user {
        request
            .headers_mut()
            .insert("x-user", user.parse().unwrap());
    }
    tokio_tungstenite::connect_async(request)
        .await
        .expect("connected")
        .0
}

pub async fn send(ws: &mut Ws, message: Value) {
    ws.send(Message::text(message.to_string()))
        .await
        .expect("sent");
}

pub async fn next(ws: &mut Ws) -> Value {
    loop {
        let frame = guarded("a reply", ws.next())
            .await
            .expect("open")
            .expect("read");
        if let Message::Text(text) = frame {
            return serde_json::from_str(&text).expect("JSON");
        }
    }
}

pub fn sleep_call(id: Value, ms: u64) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "method": "probe/sleep", "params": { "ms": ms } })
}

pub fn cancel(id: Value) -> Value {
    json!({ "jsonrpc": "2.0", "method": "$/cancelRequest", "params": { "id": id } })
}

pub fn cancelled_reply(id: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "error": { "code": -32800, "message": "Request cancelled" } })
}

/// POST `body` (as `user` if given) and give the status and the body.
pub async fn post(addr: SocketAddr, user: Option<&str>, body: Value) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let body = body.to_string();
    let user = user
        .map(|user| format!("x-user: {user}\r\n"))
        .unwrap_or_default();
    let head = format!(
        "POST / HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n{user}content-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    tcp.write_all(body.as_bytes()).await.unwrap();
    let mut answer = String::new();
    guarded("the answer", tcp.read_to_string(&mut answer))
        .await
        .unwrap();
    let status = answer[9..12].parse().unwrap();
    let body = answer
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_owned();
    (status, body)
}
