//! What the tests share: an rmcp handler that records what happens to each of its calls, and a client over a real
//! NDJSON connection to the stack serving it.

// Roots are deprecated by the newest revision, but still what a 2025 client is asked; the test needs any request.
#![allow(dead_code, unreachable_pub, deprecated)]

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use rmcp::{
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ElicitRequestParams,
        ElicitationSchema, ListRootsResult, ServerCapabilities, ServerConfig, SubscriptionFilter,
    },
    service::{RequestContext, RoleServer, ServiceError, SubscriptionContext},
    ErrorData, ServerHandler,
};
use serde_json::{json, Value};
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines, ReadHalf, WriteHalf},
    sync::Notify,
    task::JoinHandle,
};
use tower_cancel::{CancelStack, Registry, TimeoutLayer};
use tower_cancel_io::{Framing, Server};
use tower_cancel_rmcp::{BridgeSizes, RmcpService};

pub mod http;

/// What became of one call of the [`Probe`], by its `tag`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Its handler is running.
    Running,
    /// Its handler answered.
    Finished,
    /// Its `ct` fired before it finished.
    Stopped,
}

/// The tag under which the [`Probe`] records its subscriptions (`subscriptions/listen`).
pub const LISTEN: u64 = u64::MAX;

/// An rmcp handler with the tools `work {"ms", "tag"}` (sleeps `ms`, watching `ct`; `ms` absent: forever),
/// `stubborn {"ms", "tag"}` (sleeps `ms` and answers its tag, ignoring `ct`), `roots {"tag"}` (asks the
/// client for its roots through rmcp's peer, watching `ct`) and `ask {"tag"}` (asks the client `Allow <tag>?`
/// with `elicitation/create` through rmcp's peer, watching `ct`, and answers the client's action); and
/// subscriptions (`tools/list_changed` accepted), open until `ct` fires or the server ends them
/// ([`Probe::ending_subscriptions_after`]).
#[derive(Clone, Debug, Default)]
pub struct Probe {
    fates: Arc<Mutex<HashMap<u64, Fate>>>,
    changed: Arc<Notify>,
    subscription_end: Option<Duration>,
}

impl Probe {
    /// A probe that ends each subscription itself, `after` it opened.
    pub fn ending_subscriptions_after(after: Duration) -> Self {
        Self {
            subscription_end: Some(after),
            ..Self::default()
        }
    }

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
}

#[derive(serde::Deserialize)]
struct Args {
    #[serde(default)]
    ms: Option<u64>,
    tag: u64,
}

fn text(text: String) -> CallToolResponse {
    CallToolResult::success(vec![ContentBlock::text(text)]).into()
}

impl ServerHandler for Probe {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
    }

    fn accepted_subscription_filter(
        &self,
        _requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(SubscriptionFilter::builder().tools_list_changed().build())
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        self.set(LISTEN, Fate::Running);
        let ended = async {
            match self.subscription_end {
                Some(after) => tokio::time::sleep(after).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = ended => self.set(LISTEN, Fate::Finished),
            () = context.cancelled() => self.set(LISTEN, Fate::Stopped),
        }
        Ok(())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = Value::Object(request.arguments.unwrap_or_default());
        let args: Args = serde_json::from_value(args)
            .map_err(|e| ErrorData::invalid_params(e.to_string(), None))?;
        self.set(args.tag, Fate::Running);
        let sleep = async {
            match args.ms {
                Some(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
                None => std::future::pending().await,
            }
        };
        match request.name.as_ref() {
            "work" => tokio::select! {
                () = sleep => {
                    self.set(args.tag, Fate::Finished);
                    Ok(text(format!("done {}", args.tag)))
                }
                () = context.ct.cancelled() => {
                    self.set(args.tag, Fate::Stopped);
                    Err(ErrorData::internal_error("cancelled", None))
                }
            },
            "stubborn" => {
                sleep.await;
                self.set(args.tag, Fate::Finished);
                Ok(text(format!("done {}", args.tag)))
            }
            "roots" => tokio::select! {
                // `ct` first: a cancelled call's request to the client is also answered to rmcp, as cancelled.
                biased;
                () = context.ct.cancelled() => {
                    self.set(args.tag, Fate::Stopped);
                    Err(ErrorData::internal_error("cancelled", None))
                }
                roots = context.peer.list_roots() => {
                    self.set(args.tag, Fate::Finished);
                    let roots: ListRootsResult = roots.map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
                    Ok(text(format!("{} roots", roots.roots.len())))
                }
            },
            "ask" => {
                let params = ElicitRequestParams::FormElicitationParams {
                    meta: None,
                    message: format!("Allow {}?", args.tag),
                    requested_schema: ElicitationSchema::new(Default::default()),
                };
                tokio::select! {
                    // `ct` first: a cancelled call's elicitation is also answered to rmcp, as cancelled.
                    biased;
                    () = context.ct.cancelled() => {
                        self.set(args.tag, Fate::Stopped);
                        Err(ErrorData::internal_error("cancelled", None))
                    }
                    asked = context.peer.create_elicitation(params) => {
                        self.set(args.tag, Fate::Finished);
                        match asked {
                            Ok(result) => {
                                let action = serde_json::to_value(result.action).unwrap();
                                Ok(text(action.as_str().unwrap().to_owned()))
                            }
                            Err(ServiceError::McpError(error)) => Err(error),
                            Err(other) => Err(ErrorData::internal_error(other.to_string(), None)),
                        }
                    }
                }
            }
            "panic" => panic!("the handler of call {} panicked", args.tag),
            other => Err(ErrorData::invalid_params(format!("no tool {other}"), None)),
        }
    }
}

/// A client over a real NDJSON connection to `Server::with_stack(CancelStack::mcp(), RmcpService::new(probe))`.
pub struct Client {
    pub probe: Probe,
    pub rmcp: RmcpService<Probe>,
    pub registry: Registry,
    lines: Lines<BufReader<ReadHalf<DuplexStream>>>,
    write: WriteHalf<DuplexStream>,
    pub served: JoinHandle<std::io::Result<()>>,
}

impl Client {
    /// A connection, without a server timeout.
    pub async fn connect() -> Self {
        Self::connect_with(TimeoutLayer::none()).await
    }

    /// A connection whose stack times requests out with `timeouts`.
    pub async fn connect_with(timeouts: TimeoutLayer) -> Self {
        Self::connect_to(Probe::default(), timeouts).await
    }

    /// A connection to `probe`, whose stack times requests out with `timeouts`.
    pub async fn connect_to(probe: Probe, timeouts: TimeoutLayer) -> Self {
        let rmcp = RmcpService::new(probe.clone());
        let (client, server) = tokio::io::duplex(1 << 20);
        let (server_read, server_write) = tokio::io::split(server);
        let stack = CancelStack::mcp().timeouts(timeouts);
        let server = Server::with_stack(stack, rmcp.clone());
        let registry = server.registry().clone();
        let served = tokio::spawn(server.serve(server_read, server_write, Framing::Ndjson));
        let (read, write) = tokio::io::split(client);
        let mut client = Self {
            probe,
            rmcp,
            registry,
            lines: BufReader::new(read).lines(),
            write,
            served,
        };
        client
            .send(
                json!({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": { "roots": {} },
                    "clientInfo": { "name": "test", "version": "0" },
                }}),
            )
            .await;
        let init = client.next().await.expect("an initialize reply");
        assert_eq!(init["id"], "init", "{init}");
        client
            .send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        client
    }

    pub async fn send(&mut self, message: Value) {
        let mut line = message.to_string();
        line.push('\n');
        self.write.write_all(line.as_bytes()).await.unwrap();
    }

    /// A `tools/call` of `tool` with `args`, under `id`.
    pub async fn call(&mut self, id: Value, tool: &str, args: Value) {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": { "name": tool, "arguments": args }}))
            .await;
    }

    pub async fn cancel(&mut self, id: Value) {
        self.send(
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": { "requestId": id, "reason": "test" }}),
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
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": "ping"}))
            .await;
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
    pub async fn close(self) -> (Vec<Value>, Probe, RmcpService<Probe>, Registry) {
        let Self {
            probe,
            rmcp,
            registry,
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
        (rest, probe, rmcp, registry)
    }
}

/// The bridge's tables and the stack's registry are empty.
pub fn assert_empty(rmcp: &RmcpService<Probe>, registry: &Registry) {
    assert_eq!(rmcp.sizes(), BridgeSizes::default(), "the bridge's tables");
    assert!(
        registry.is_empty(),
        "the stack's registry: {} left",
        registry.len()
    );
}
