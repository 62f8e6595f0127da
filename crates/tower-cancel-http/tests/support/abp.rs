//! An ABP app under test, and a raw WebSocket peer that writes and reads envelopes exactly.

use std::{
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_tungstenite::{tungstenite::Message, MaybeTlsStream, WebSocketStream};
use tower::{service_fn, util::BoxCloneSyncService, ServiceBuilder};
use tower_cancel::{
    dialect::abp, progress::ProgressUpdate, BoxError, CancelStack, ErrorObject, Request, Response,
};
use tower_cancel_http::abp::{wire::AppInfo, AbpApp};

/// The sleep handlers' counters.
#[derive(Debug, Default)]
pub(crate) struct Counts {
    pub(crate) started: AtomicU64,
    pub(crate) completed: AtomicU64,
    pub(crate) stopped: AtomicU64,
}

impl Counts {
    pub(crate) fn started(&self) -> u64 {
        self.started.load(Ordering::SeqCst)
    }
    pub(crate) fn stopped(&self) -> u64 {
        self.stopped.load(Ordering::SeqCst)
    }
}

struct Stopped(Arc<Counts>, bool);

impl Drop for Stopped {
    fn drop(&mut self) {
        if !self.1 {
            self.0.stopped.fetch_add(1, Ordering::SeqCst);
        }
    }
}

pub(crate) type Stack = BoxCloneSyncService<Request, Option<Response>, std::convert::Infallible>;

/// Capabilities: `sleep {ms}` -> `{slept}`, `echo` -> its params, `report {steps}` -> progress then `{steps}`,
/// `fail` -> an INVALID_PARAMS error; anything else is unknown.
pub(crate) fn stack(counts: &Arc<Counts>, concurrency: Option<usize>) -> Stack {
    let counts = counts.clone();
    let handler = service_fn(move |req: Request| {
        let counts = counts.clone();
        async move { handle(req, counts).await }
    });
    let stack = CancelStack::abp();
    match concurrency {
        Some(limit) => BoxCloneSyncService::new(
            ServiceBuilder::new()
                .layer(stack)
                .concurrency_limit(limit)
                .service(handler),
        ),
        None => BoxCloneSyncService::new(ServiceBuilder::new().layer(stack).service(handler)),
    }
}

async fn handle(req: Request, counts: Arc<Counts>) -> Result<Value, BoxError> {
    let params: Value = req.params_as().unwrap_or(Value::Null);
    match req.method() {
        "sleep" => {
            let ms = params["ms"]
                .as_u64()
                .ok_or_else(|| abp::error(abp::INVALID_PARAMS, "ms is missing", false))?;
            counts.started.fetch_add(1, Ordering::SeqCst);
            let mut guard = Stopped(counts.clone(), false);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            guard.1 = true;
            counts.completed.fetch_add(1, Ordering::SeqCst);
            Ok(json!({ "slept": ms }))
        }
        "echo" => Ok(params),
        "report" => {
            let steps = params["steps"].as_u64().unwrap_or(1);
            let progress = req.progress();
            for step in 1..=steps {
                if let Some(progress) = &progress {
                    progress.report(
                        ProgressUpdate::new(step as f64)
                            .total(steps as f64)
                            .message("working"),
                    );
                }
            }
            Ok(json!({ "steps": steps, "reported": progress.is_some() }))
        }
        "fail" => Err(abp::error(abp::INVALID_PARAMS, "fail always fails", false).into()),
        other => Err(ErrorObject::method_not_found(other).into()),
    }
}

/// An app on a loopback port.
pub(crate) struct App {
    pub(crate) app: AbpApp<Stack>,
    pub(crate) url: String,
    pub(crate) counts: Arc<Counts>,
}

pub(crate) async fn serve(concurrency: Option<usize>) -> App {
    serve_with(concurrency, |app| app).await
}

/// [`serve`], with the app configured by `configure` first.
pub(crate) async fn serve_with(
    concurrency: Option<usize>,
    configure: impl FnOnce(AbpApp<Stack>) -> AbpApp<Stack>,
) -> App {
    let counts = Arc::new(Counts::default());
    let app = AbpApp::new(stack(&counts, concurrency))
        .app(AppInfo {
            id: "test-app".into(),
            name: "Test".into(),
            version: "1.2.3".into(),
        })
        .capabilities(["sleep", "echo"]);
    let app = configure(app);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}/abp", listener.local_addr().unwrap());
    let router = app.router();
    tokio::spawn(async move { tower_cancel_http::serve(listener, router).await });
    App { app, url, counts }
}

impl App {
    /// Wait (bounded) until nothing runs and no session is open: what every test ends with.
    pub(crate) async fn settled(&self) {
        for _ in 0..500 {
            let stats = self.app.stats();
            if stats.in_flight == 0 && stats.sessions == 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the app did not settle: {:?}", self.app.stats());
    }
}

/// A raw peer: envelopes in and out, exactly.
pub(crate) struct Wire {
    ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
    next: u64,
}

impl Wire {
    pub(crate) async fn connect(url: &str) -> Wire {
        let (ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
        Wire { ws, next: 0 }
    }

    /// Connect and initialize.
    pub(crate) async fn session(url: &str) -> Wire {
        let mut wire = Wire::connect(url).await;
        let id = wire.send("initialize", initialize_payload()).await;
        let reply = wire.recv().await;
        assert_eq!(
            (reply["type"].as_str(), reply["id"].as_str()),
            (Some("initialize-result"), Some(id.as_str()))
        );
        wire
    }

    /// Send an envelope of `kind`; its id.
    pub(crate) async fn send(&mut self, kind: &str, payload: Value) -> String {
        self.next += 1;
        let id = format!("e{}", self.next);
        let envelope = json!({ "type": kind, "id": id, "timestamp": 1_700_000_000_000u64, "payload": payload });
        self.send_raw(&envelope.to_string()).await;
        id
    }

    pub(crate) async fn send_raw(&mut self, text: &str) {
        self.ws.send(Message::Text(text.into())).await.unwrap();
    }

    pub(crate) async fn send_binary(&mut self, bytes: &[u8]) {
        self.ws
            .send(Message::Binary(bytes.to_vec().into()))
            .await
            .unwrap();
    }

    /// A call of `capability`; the call envelope's id.
    pub(crate) async fn call(&mut self, call_id: &str, capability: &str, params: Value) -> String {
        self.send(
            "capabilities/call",
            json!({ "capability": capability, "params": params, "options": { "callId": call_id } }),
        )
        .await
    }

    pub(crate) async fn cancel(&mut self, call_id: &str) -> String {
        self.send(
            "capabilities/cancel",
            json!({ "callId": call_id, "reason": "test" }),
        )
        .await
    }

    /// The next envelope (a hang guard of 10 s: never a measure).
    pub(crate) async fn recv(&mut self) -> Value {
        loop {
            let frame = tokio::time::timeout(Duration::from_secs(10), self.ws.next())
                .await
                .expect("an envelope within 10 s")
                .expect("the socket is open")
                .expect("a frame");
            match frame {
                Message::Text(text) => return serde_json::from_str(text.as_str()).unwrap(),
                Message::Ping(_) | Message::Pong(_) => continue,
                other => panic!("not a text frame: {other:?}"),
            }
        }
    }

    /// The next envelope answering `id`.
    pub(crate) async fn reply_to(&mut self, id: &str) -> Value {
        let reply = self.recv().await;
        assert_eq!(reply["id"].as_str(), Some(id), "{reply}");
        reply
    }

    /// Whether the app closed the socket (reads until the close, bounded).
    pub(crate) async fn closed(&mut self) -> bool {
        loop {
            match tokio::time::timeout(Duration::from_secs(10), self.ws.next()).await {
                Ok(Some(Ok(Message::Close(_)))) | Ok(None) | Ok(Some(Err(_))) => return true,
                Ok(Some(Ok(_))) => continue,
                Err(_) => return false,
            }
        }
    }

    pub(crate) async fn close(mut self) {
        let _ = self.ws.close(None).await;
    }
}

pub(crate) fn initialize_payload() -> Value {
    json!({
        "agent": { "name": "test-agent", "version": "0.0.1" },
        "protocolVersion": "0.1",
        "features": { "notifications": false, "progress": true, "elicitation": false }
    })
}
