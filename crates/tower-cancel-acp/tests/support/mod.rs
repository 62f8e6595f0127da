//! What the tests share: an agent written with the ACP SDK that records what happens to each of its calls, and a
//! client over a real NDJSON connection to the stack serving it.

#![allow(dead_code, unreachable_pub)]

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use agent_client_protocol::{
    on_receive_notification, on_receive_request,
    schema::ProtocolVersion,
    v1::{
        schema::{
            CancelNotification, InitializeRequest, InitializeResponse, PermissionOption,
            PermissionOptionKind, PromptRequest, PromptResponse, RequestPermissionRequest,
            StopReason, ToolCallUpdate, ToolCallUpdateFields,
        },
        ConnectionTo, Responder,
    },
    Agent, Client, ConnectTo, DynConnectTo, Error, JsonRpcRequest, JsonRpcResponse,
};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines, ReadHalf, WriteHalf},
    sync::Notify,
    task::JoinHandle,
};
use tokio_util_free::CancellationSwitch;
use tower_cancel::{CancelStack, Registry, TimeoutLayer};
use tower_cancel_acp::{AcpService, BridgeSizes};
use tower_cancel_io::{Framing, Server, ShutdownHandle};

/// What became of one call of the [`Probe`], by its `tag`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Its handler is running.
    Running,
    /// Its handler answered.
    Finished,
    /// Its `RequestCancellation` fired (or `session/cancel` ended its prompt) before it finished.
    Stopped,
}

/// `_test/work {"tag", "ms"}`: sleeps `ms` (absent: forever), watching its `RequestCancellation`.
/// `_test/stubborn {"tag", "ms"}`: sleeps `ms` and answers its tag, deaf to cancellation.
/// `_test/panic {"tag"}`: panics. `_test/ping`: answers `{}` at once.
#[derive(Debug, Clone, Serialize, Deserialize, JsonRpcRequest)]
#[request(method = "_test/work", response = Answer)]
pub struct Work {
    tag: u64,
    #[serde(default)]
    ms: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonRpcRequest)]
#[request(method = "_test/stubborn", response = Answer)]
pub struct Stubborn {
    tag: u64,
    ms: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonRpcRequest)]
#[request(method = "_test/panic", response = Answer)]
pub struct Panic {
    tag: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonRpcRequest)]
#[request(method = "_test/ping", response = Answer)]
pub struct Ping {}

#[derive(Debug, Clone, Serialize, Deserialize, JsonRpcResponse)]
#[serde(transparent)]
pub struct Answer(Value);

/// The agent's record of its calls, shared by every agent its service builds.
#[derive(Clone, Debug, Default)]
pub struct Probe {
    fates: Arc<Mutex<HashMap<u64, Fate>>>,
    changed: Arc<Notify>,
    /// The `session/cancel` switch of each session's running prompt.
    prompts: Arc<Mutex<HashMap<String, CancellationSwitch>>>,
}

impl Probe {
    pub fn fate(&self, tag: u64) -> Option<Fate> {
        self.fates.lock().unwrap().get(&tag).copied()
    }

    pub fn fates(&self) -> HashMap<u64, Fate> {
        self.fates.lock().unwrap().clone()
    }

    fn set(&self, tag: u64, fate: Fate) {
        self.fates.lock().unwrap().insert(tag, fate);
        self.changed.notify_waiters();
    }

    /// Waits until call `tag` has `fate`.
    pub async fn until(&self, tag: u64, fate: Fate) {
        loop {
            let changed = self.changed.notified();
            if self.fate(tag) == Some(fate) {
                return;
            }
            changed.await;
        }
    }

    /// The agent, as an SDK user writes one. A prompt's tag is the number its session id ends with (`s7`: 7).
    pub fn agent(&self) -> impl ConnectTo<Client> {
        let (work, stubborn, prompt, cancel) =
            (self.clone(), self.clone(), self.clone(), self.clone());
        Agent
            .v1()
            .name("probe")
            .on_receive_request(
                async |request: InitializeRequest,
                       responder: Responder<InitializeResponse>,
                       _: ConnectionTo<Client>| {
                    responder.respond(InitializeResponse::new(request.protocol_version))
                },
                on_receive_request!(),
            )
            .on_receive_request(
                async |_: Ping, responder: Responder<Answer>, _: ConnectionTo<Client>| {
                    responder.respond(Answer(json!({})))
                },
                on_receive_request!(),
            )
            .on_receive_request(
                async move |request: Work,
                            responder: Responder<Answer>,
                            cx: ConnectionTo<Client>| {
                    let probe = work.clone();
                    let cancellation = responder.cancellation();
                    cx.spawn(async move {
                        probe.set(request.tag, Fate::Running);
                        tokio::select! {
                            () = sleep(request.ms) => {
                                probe.set(request.tag, Fate::Finished);
                                responder.respond(Answer(json!({ "done": request.tag })))
                            }
                            () = cancellation.cancelled() => {
                                probe.set(request.tag, Fate::Stopped);
                                responder.respond_with_error(Error::request_cancelled())
                            }
                        }
                    })
                },
                on_receive_request!(),
            )
            .on_receive_request(
                async move |request: Stubborn,
                            responder: Responder<Answer>,
                            cx: ConnectionTo<Client>| {
                    let probe = stubborn.clone();
                    cx.spawn(async move {
                        probe.set(request.tag, Fate::Running);
                        sleep(Some(request.ms)).await;
                        probe.set(request.tag, Fate::Finished);
                        responder.respond(Answer(json!({ "done": request.tag })))
                    })
                },
                on_receive_request!(),
            )
            .on_receive_request(
                async |request: Panic, _: Responder<Answer>, cx: ConnectionTo<Client>| {
                    cx.spawn(async move { panic!("the handler of call {} panicked", request.tag) })
                },
                on_receive_request!(),
            )
            .on_receive_request(
                async move |request: PromptRequest,
                            responder: Responder<PromptResponse>,
                            cx: ConnectionTo<Client>| {
                    let probe = prompt.clone();
                    let cancellation = responder.cancellation();
                    cx.clone().spawn(async move {
                        let answer = probe.prompt(request, cx, cancellation).await;
                        responder.respond_with_result(answer)
                    })
                },
                on_receive_request!(),
            )
            .on_receive_notification(
                async move |notification: CancelNotification, _: ConnectionTo<Client>| {
                    if let Some(switch) = cancel
                        .prompts
                        .lock()
                        .unwrap()
                        .get(&notification.session_id.to_string())
                    {
                        switch.fire();
                    }
                    Ok(())
                },
                on_receive_notification!(),
            )
    }

    /// A prompt: asks the client's permission, then answers `end_turn`; `session/cancel` ends it `cancelled`, its
    /// `RequestCancellation` with -32800. Either drops the permission request (the SDK withdraws it).
    async fn prompt(
        &self,
        request: PromptRequest,
        cx: ConnectionTo<Client>,
        cancellation: agent_client_protocol::RequestCancellation,
    ) -> Result<PromptResponse, Error> {
        let session = request.session_id.to_string();
        let tag: u64 = session.trim_start_matches('s').parse().unwrap_or_default();
        let switch = CancellationSwitch::default();
        self.prompts
            .lock()
            .unwrap()
            .insert(session.clone(), switch.clone());
        self.set(tag, Fate::Running);
        let ask = cx.send_request(RequestPermissionRequest::new(
            session.clone(),
            ToolCallUpdate::new("t", ToolCallUpdateFields::default()),
            vec![PermissionOption::new(
                "allow",
                "Allow",
                PermissionOptionKind::AllowOnce,
            )],
        ));
        // Cancellation first: when the prompt is cancelled, the bridge also answers the permission request
        // cancelled (as the client would), and both can be ready at once.
        let answer = tokio::select! {
            biased;
            () = cancellation.cancelled() => {
                self.set(tag, Fate::Stopped);
                Err(Error::request_cancelled())
            }
            () = switch.fired() => {
                self.set(tag, Fate::Stopped);
                Ok(PromptResponse::new(StopReason::Cancelled))
            }
            answer = ask.block_task() => {
                self.set(tag, Fate::Finished);
                answer.map(|_| PromptResponse::new(StopReason::EndTurn))
            }
        };
        self.prompts.lock().unwrap().remove(&session);
        answer
    }
}

async fn sleep(ms: Option<u64>) {
    match ms {
        Some(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
        None => std::future::pending().await,
    }
}

/// A one-shot switch (a tokio `Notify` that remembers), so the tests need no tokio-util.
mod tokio_util_free {
    use std::sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    };

    use tokio::sync::Notify;

    #[derive(Clone, Debug, Default)]
    pub struct CancellationSwitch {
        fired: Arc<AtomicBool>,
        notify: Arc<Notify>,
    }

    impl CancellationSwitch {
        pub fn fire(&self) {
            self.fired.store(true, Ordering::SeqCst);
            self.notify.notify_waiters();
        }

        pub async fn fired(&self) {
            loop {
                let notified = self.notify.notified();
                if self.fired.load(Ordering::SeqCst) {
                    return;
                }
                notified.await;
            }
        }
    }
}

/// The service's agent function, named.
pub type Agents = Box<dyn Fn() -> DynConnectTo<Client> + Send + Sync>;

/// A client over a real NDJSON connection to `Server::with_stack(CancelStack::acp(), AcpService::new(..))`.
pub struct TestClient {
    pub probe: Probe,
    pub acp: AcpService<Agents>,
    pub registry: Registry,
    pub shutdown: ShutdownHandle,
    lines: Lines<BufReader<ReadHalf<DuplexStream>>>,
    write: WriteHalf<DuplexStream>,
    pub served: JoinHandle<std::io::Result<()>>,
}

impl TestClient {
    /// A connection, without a server timeout, initialized.
    pub async fn connect() -> Self {
        Self::connect_with(TimeoutLayer::none()).await
    }

    /// A connection whose stack times requests out with `timeouts`, initialized.
    pub async fn connect_with(timeouts: TimeoutLayer) -> Self {
        let probe = Probe::default();
        let agents: Agents = Box::new({
            let probe = probe.clone();
            move || DynConnectTo::new(probe.agent())
        });
        let acp = AcpService::new(agents);
        let (client, server) = tokio::io::duplex(1 << 20);
        let (server_read, server_write) = tokio::io::split(server);
        let stack = CancelStack::acp().timeouts(timeouts);
        let server = Server::with_stack(stack, acp.clone());
        let registry = server.registry().clone();
        let shutdown = server.shutdown_handle();
        let served = tokio::spawn(server.serve(server_read, server_write, Framing::Ndjson));
        let (read, write) = tokio::io::split(client);
        let mut client = Self {
            probe,
            acp,
            registry,
            shutdown,
            lines: BufReader::new(read).lines(),
            write,
            served,
        };
        client
            .send(
                json!({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {
                    "protocolVersion": ProtocolVersion::V1, "clientCapabilities": {},
                }}),
            )
            .await;
        let init = client.next().await.expect("an initialize reply");
        assert_eq!(init["id"], "init", "{init}");
        assert!(init.get("result").is_some(), "{init}");
        client
    }

    pub async fn send(&mut self, message: Value) {
        let mut line = message.to_string();
        line.push('\n');
        self.write.write_all(line.as_bytes()).await.unwrap();
    }

    /// A request of `method` with `params`, under `id`.
    pub async fn call(&mut self, id: Value, method: &str, params: Value) {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
    }

    /// `session/prompt` for session `s<tag>`, under `id`.
    pub async fn prompt(&mut self, id: Value, tag: u64) {
        self.call(
            id,
            "session/prompt",
            json!({ "sessionId": format!("s{tag}"), "prompt": [] }),
        )
        .await;
    }

    pub async fn cancel(&mut self, id: Value) {
        self.send(
            json!({"jsonrpc": "2.0", "method": "$/cancel_request", "params": { "requestId": id }}),
        )
        .await;
    }

    /// The next message from the server, `None` at the end of the connection.
    pub async fn next(&mut self) -> Option<Value> {
        let line = self.lines.next_line().await.unwrap()?;
        Some(serde_json::from_str(&line).unwrap())
    }

    /// Pings under `id` and returns every message that came before the pong: since the server answers in order of
    /// completion, a reply not among them was not sent before the ping was handled.
    pub async fn before_pong(&mut self, id: &str) -> Vec<Value> {
        self.call(json!(id), "_test/ping", json!({})).await;
        let mut before = Vec::new();
        loop {
            let message = self.next().await.expect("a pong");
            if message["id"] == id && message.get("result").is_some() {
                return before;
            }
            before.push(message);
        }
    }

    /// Closes the client's side and returns what the server still sent, once it is done.
    pub async fn close(self) -> (Vec<Value>, Probe, AcpService<Agents>, Registry) {
        let Self {
            probe,
            acp,
            registry,
            shutdown: _,
            mut lines,
            mut write,
            served,
        } = self;
        write.shutdown().await.unwrap();
        drop(write);
        let mut rest = Vec::new();
        while let Some(line) = lines.next_line().await.unwrap() {
            rest.push(serde_json::from_str(&line).unwrap());
        }
        served.await.unwrap().unwrap();
        (rest, probe, acp, registry)
    }
}

/// The reply ACP gives a cancelled request `id`.
pub fn cancelled(id: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32800, "message": "Request cancelled"}})
}

/// The bridge's tables and the stack's registry are empty.
pub fn assert_empty(acp: &AcpService<Agents>, registry: &Registry) {
    assert_eq!(acp.sizes(), BridgeSizes::default(), "the bridge's tables");
    assert!(
        registry.is_empty(),
        "the stack's registry: {} left",
        registry.len()
    );
}
