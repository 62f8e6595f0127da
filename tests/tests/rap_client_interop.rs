//! rap-client, the RAP runtime's own client crate, against the example tool server.
//!
//! The server is `rap_tool_server`'s, built in process from [`examples::rap`] (the tools `sleep {ms}` and `stats`,
//! every endpoint but discovery behind `Authorization: Bearer` [`TOKEN`]) and served by axum on a free port of
//! 127.0.0.1. The runtime side is rap-client 0.2's:
//!
//! | what the runtime does | with |
//! |---|---|
//! | discovers the toolset | `rap_client::toolset_loader::ToolsetLoader` |
//! | invokes a tool | a `rap_protocol::RapInvocation` POSTed through a `rap_client::http::HttpClient` ([`Bearer`], ours: rap-client's `SimpleHttpClient` sends no token) |
//! | receives the results | `rap_client::callback_server::start_callback_channel` |
//! | cancels a call, closes a thread | `rap_client::notifier::RapNotifier` (over [`Bearer`]) |
//!
//! A call the runtime cancelled must be stopped (its handler's future dropped: the `sleep` counters say
//! `cancelled`, and the server's `in_flight()` comes back to zero) and must send no result: once both are seen,
//! the callback channel holds nothing for it. Nothing asserts a duration: every wait is a condition polled until
//! [`PATIENCE`] runs out.

use std::{
    collections::VecDeque,
    sync::{Arc, Mutex},
    time::Duration,
};

use async_trait::async_trait;
use examples::{
    rap::{Options, Server},
    Snapshot,
};
use rap_client::{
    callback_server::start_callback_channel,
    http::{HttpClient, InMemoryToolsetCache, SimpleHttpClient},
    notifier::RapNotifier,
    toolset_loader::ToolsetLoader,
};
use rap_protocol::{
    ProviderCallId, RapCallback, RapInvocation, RapToolResult, ThreadId, ToolCallId,
};
use serde_json::{json, Value};
use tokio::{net::TcpListener, sync::mpsc::UnboundedReceiver};

/// The tool server's shared secret.
const TOKEN: &str = "s3cret-token";

/// How long any one condition may take before the test fails.
const PATIENCE: Duration = Duration::from_secs(10);

/// A `sleep` that only a cancel ends within the test.
const FOREVER_MS: u64 = 60_000;

// ---------------------------------------------------------------------------------------------------------------
// The tool server

/// `rap_tool_server`'s server on a free loopback port.
struct ToolServer {
    /// `http://127.0.0.1:PORT`, what a runtime is configured with.
    base: String,
    server: Server,
}

impl ToolServer {
    async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        // rap-client's callback server is on this host too: private callbacks are allowed.
        let server = Server::with_options(
            &base,
            Options {
                allow_private_callbacks: true,
                ..Options::default()
            },
        );
        let app = server
            .router(TOKEN)
            .into_make_service_with_connect_info::<std::net::SocketAddr>();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { base, server }
    }

    fn in_flight(&self) -> usize {
        self.server.tool_server().in_flight()
    }

    fn sleeps(&self) -> Snapshot {
        self.server.sleeps()
    }

    /// Wait until no call runs: no handler, no result being delivered.
    async fn settled(&self) {
        until("no call in flight", || self.in_flight() == 0).await;
    }
}

/// Poll `done` until it holds; fail after [`PATIENCE`].
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let waited = tokio::time::timeout(PATIENCE, async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(waited.is_ok(), "{what}: not reached in {PATIENCE:?}");
}

// ---------------------------------------------------------------------------------------------------------------
// The runtime

/// rap-client's `HttpClient` over reqwest, with `Authorization: Bearer` when it has a token, that records the
/// status of every POST (the notifier only logs it).
#[derive(Clone)]
struct Bearer {
    client: reqwest::Client,
    token: Option<&'static str>,
    posted: Arc<Mutex<Vec<(String, u16)>>>,
}

impl Bearer {
    fn new(token: Option<&'static str>) -> Self {
        Self {
            client: reqwest::Client::new(),
            token,
            posted: Arc::default(),
        }
    }

    fn authorized(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    /// Every POST so far: (the URL's path, the status).
    fn posted(&self) -> Vec<(String, u16)> {
        self.posted.lock().unwrap().clone()
    }
}

#[async_trait]
impl HttpClient for Bearer {
    type Error = reqwest::Error;

    async fn post(&self, url: &str, body: &str) -> Result<u16, reqwest::Error> {
        let request = self
            .client
            .post(url)
            .header("content-type", "application/json")
            .body(body.to_owned());
        let status = self.authorized(request).send().await?.status().as_u16();
        let path =
            reqwest::Url::parse(url).map_or_else(|_| url.to_owned(), |url| url.path().to_owned());
        self.posted.lock().unwrap().push((path, status));
        Ok(status)
    }

    async fn get(&self, url: &str) -> Result<(u16, Vec<u8>), reqwest::Error> {
        let request = self.client.get(url).header("accept", "application/json");
        let response = self.authorized(request).send().await?;
        let status = response.status().as_u16();
        Ok((status, response.bytes().await?.to_vec()))
    }
}

/// The runtime's side: where the toolset says to invoke, the callback server's channel, and the results taken
/// from it so far and not yet looked at.
struct Runtime {
    http: Bearer,
    endpoint: String,
    callback_url: String,
    callbacks: UnboundedReceiver<RapCallback>,
    unclaimed: VecDeque<RapToolResult>,
}

impl Runtime {
    /// Discover `server`'s toolset (discovery wants no token) and start a callback server.
    async fn start(server: &ToolServer, http: Bearer) -> Self {
        let loader = ToolsetLoader::new(SimpleHttpClient::new(), InMemoryToolsetCache::new());
        let loaded = loader
            .load_toolsets(
                std::slice::from_ref(&server.base),
                ThreadId::from_ref("discovery"),
            )
            .await
            .expect("rap-client loads the toolset");
        let endpoint = loaded[0].manifest.endpoint.clone();
        let (callback_base, callbacks) = start_callback_channel()
            .await
            .expect("rap-client's callback server starts");
        Self {
            http,
            endpoint,
            callback_url: format!("{callback_base}/rap/callback"),
            callbacks,
            unclaimed: VecDeque::new(),
        }
    }

    /// POST an invocation as the runtime does; the tool server's status.
    async fn invoke(
        &self,
        thread: &str,
        id: &str,
        call_id: Option<&str>,
        operation: &str,
        arguments: Value,
    ) -> u16 {
        let invocation = RapInvocation {
            operation: operation.to_owned(),
            arguments,
            id: ToolCallId::new(id.to_owned()),
            call_id: call_id.map(|call_id| ProviderCallId::new(call_id.to_owned())),
            callback_url: self.callback_url.clone(),
            group_id: ThreadId::new(thread.to_owned()),
            user_id: None,
            thread_ancestors: None,
        };
        let body = serde_json::to_string(&invocation).unwrap();
        self.http
            .post(&self.endpoint, &body)
            .await
            .expect("the invocation is POSTed")
    }

    async fn sleep(&self, thread: &str, id: &str, ms: u64) {
        let status = self
            .invoke(thread, id, None, "sleep", json!({ "ms": ms }))
            .await;
        assert_eq!(
            status, 200,
            "sleep {ms} ms as {thread}/{id} is acknowledged"
        );
    }

    /// Wait for the result of (`thread`, `id`), keeping the others for later.
    async fn result(&mut self, thread: &str, id: &str) -> RapToolResult {
        let ours =
            |result: &RapToolResult| result.group_id.as_str() == thread && result.id.as_str() == id;
        if let Some(at) = self.unclaimed.iter().position(ours) {
            return self.unclaimed.remove(at).unwrap();
        }
        loop {
            let callback = tokio::time::timeout(PATIENCE, self.callbacks.recv())
                .await
                .unwrap_or_else(|_| {
                    panic!(
                        "no result for {thread}/{id} in {PATIENCE:?}: {:?}",
                        self.unclaimed
                    )
                })
                .expect("the callback server runs");
            let RapCallback::ToolResult(result) = callback else {
                panic!("a callback that is not a tool_result: {callback:?}");
            };
            if ours(&result) {
                return result;
            }
            self.unclaimed.push_back(result);
        }
    }

    /// Fail if a result received so far and not yet claimed matches `which`.
    fn assert_none(&mut self, which: impl Fn(&RapToolResult) -> bool) {
        while let Ok(callback) = self.callbacks.try_recv() {
            match callback {
                RapCallback::ToolResult(result) => self.unclaimed.push_back(result),
                other => panic!("a callback that is not a tool_result: {other:?}"),
            }
        }
        let found: Vec<_> = self
            .unclaimed
            .iter()
            .filter(|result| which(result))
            .collect();
        assert!(
            found.is_empty(),
            "results that must not have been sent: {found:?}"
        );
    }

    /// Call the `stats` tool (in a thread of its own) and read its JSON.
    async fn stats(&mut self, id: &str) -> Value {
        let status = self
            .invoke("stats-thread", id, None, "stats", json!({}))
            .await;
        assert_eq!(status, 200);
        let result = self.result("stats-thread", id).await;
        let text = result.text.expect("stats answers text");
        serde_json::from_str(&text)
            .unwrap_or_else(|error| panic!("stats answers JSON ({error}): {text}"))
    }
}

fn thread(id: &str) -> &ThreadId<str> {
    ThreadId::from_ref(id)
}

fn call(id: &str) -> &ToolCallId<str> {
    ToolCallId::from_ref(id)
}

/// The tool server's status answer for (`thread`, `id`), asked as a runtime would.
async fn alive(server: &ToolServer, thread: &str, id: &str) -> bool {
    let answer: Value = reqwest::Client::new()
        .post(format!("{}/tool_call_status", server.base))
        .bearer_auth(TOKEN)
        .header("content-type", "application/json")
        .body(json!({ "thread_id": thread, "tool_call_id": id }).to_string())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    answer["alive"].as_bool().expect("{\"alive\": bool}")
}

// ---------------------------------------------------------------------------------------------------------------
// The scenarios

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_and_a_completed_sleep() {
    let server = ToolServer::start().await;

    // Discovery as rap-client does it, without a token.
    let loader = ToolsetLoader::new(SimpleHttpClient::new(), InMemoryToolsetCache::new());
    let loaded = loader
        .load_toolsets(std::slice::from_ref(&server.base), thread("t1"))
        .await
        .expect("rap-client loads the toolset");
    assert_eq!(loaded.len(), 1);
    let manifest = &loaded[0].manifest;
    assert_eq!(manifest.name, examples::rap::TOOLSET_NAME);
    assert_eq!(manifest.endpoint, format!("{}/invoke", server.base));
    assert!(!manifest.needs_migration);
    let names: Vec<&str> = manifest
        .tools
        .iter()
        .map(|tool| tool.name.as_str())
        .collect();
    assert_eq!(names, ["sleep", "stats"]);
    assert_eq!(manifest.tools[0].input_schema["required"], json!(["ms"]));

    let mut runtime = Runtime::start(&server, Bearer::new(Some(TOKEN))).await;
    let status = runtime
        .invoke(
            "t1",
            "toolu_01",
            Some("call_p1"),
            "sleep",
            json!({ "ms": 20 }),
        )
        .await;
    assert_eq!(status, 200);
    let result = runtime.result("t1", "toolu_01").await;
    assert_eq!(result.group_id.as_str(), "t1");
    assert_eq!(result.id.as_str(), "toolu_01");
    assert_eq!(
        result.call_id.as_ref().map(|id| id.as_str()),
        Some("call_p1")
    );
    assert_eq!(result.text.as_deref(), Some("slept 20 ms"));
    assert!(
        result.content.is_none() && result.display_as.is_none() && result.subscription.is_none()
    );

    server.settled().await;
    assert_eq!(
        runtime.stats("s1").await,
        json!({ "started": 1, "completed": 1, "cancelled": 0, "inFlight": 0 })
    );
    let stats = server.server.tool_server().stats();
    assert_eq!((stats.accepted, stats.cancelled), (2, 0));
    server.settled().await;
    assert_eq!(server.server.tool_server().stats().delivered, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_mid_sleep_stops_the_handler_and_sends_no_result() {
    let server = ToolServer::start().await;
    let bearer = Bearer::new(Some(TOKEN));
    let mut runtime = Runtime::start(&server, bearer.clone()).await;
    let notifier = RapNotifier::new(vec![server.base.clone()], bearer.clone());

    runtime.sleep("t1", "toolu_long", FOREVER_MS).await;
    until("the sleep started", || server.sleeps().started == 1).await;
    assert!(alive(&server, "t1", "toolu_long").await);

    notifier
        .notify_tool_cancelled(thread("t1"), call("toolu_long"))
        .await;
    assert_eq!(
        bearer.posted().last(),
        Some(&("/cancel_tool_call".to_owned(), 200))
    );

    until("the sleep was stopped", || {
        server.sleeps().cancelled == 1 && server.in_flight() == 0
    })
    .await;
    assert_eq!(server.sleeps().completed, 0);
    let stats = server.server.tool_server().stats();
    assert_eq!((stats.cancels, stats.cancelled, stats.delivered), (1, 1, 0));
    assert!(!alive(&server, "t1", "toolu_long").await);
    assert_eq!(
        runtime.stats("s1").await,
        json!({ "started": 1, "completed": 0, "cancelled": 1, "inFlight": 0 })
    );
    // The stats result came after the call was over: a result of it would have come before.
    server.settled().await;
    runtime.assert_none(|result| result.id.as_str() == "toolu_long");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_early_cancel_means_the_call_never_starts() {
    let server = ToolServer::start().await;
    let bearer = Bearer::new(Some(TOKEN));
    let mut runtime = Runtime::start(&server, bearer.clone()).await;
    let notifier = RapNotifier::new(vec![server.base.clone()], bearer.clone());

    // The cancel overtakes its invocation (they travel on different connections).
    notifier
        .notify_tool_cancelled(thread("t1"), call("toolu_early"))
        .await;
    assert_eq!(bearer.posted(), [("/cancel_tool_call".to_owned(), 200)]);
    runtime.sleep("t1", "toolu_early", FOREVER_MS).await;

    until("the early-cancelled call was dropped", || {
        server.server.tool_server().stats().cancelled == 1 && server.in_flight() == 0
    })
    .await;
    assert_eq!(
        server.sleeps(),
        Snapshot {
            started: 0,
            completed: 0,
            cancelled: 0
        }
    );
    assert_eq!(server.server.tool_server().stats().accepted, 1);
    assert_eq!(
        runtime.stats("s1").await,
        json!({ "started": 0, "completed": 0, "cancelled": 0, "inFlight": 0 })
    );
    server.settled().await;
    runtime.assert_none(|result| result.id.as_str() == "toolu_early");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_thread_stops_its_calls_and_not_a_same_id_of_another_thread() {
    /// Long enough that thread B's call is still running when thread A is closed (checked below).
    const B_MS: u64 = 3_000;
    let server = ToolServer::start().await;
    let bearer = Bearer::new(Some(TOKEN));
    let mut runtime = Runtime::start(&server, bearer.clone()).await;
    let notifier = RapNotifier::new(vec![server.base.clone()], bearer.clone());

    runtime.sleep("thread_a", "call_1", FOREVER_MS).await;
    runtime.sleep("thread_a", "call_2", FOREVER_MS).await;
    runtime.sleep("thread_b", "call_1", B_MS).await;
    until("the three sleeps started", || server.sleeps().started == 3).await;

    notifier.notify_thread_closed(thread("thread_a")).await;
    assert_eq!(
        bearer.posted().last(),
        Some(&("/close_thread".to_owned(), 200))
    );
    until("thread A's calls were stopped", || {
        server.sleeps().cancelled == 2
    })
    .await;
    // The premise: thread B's `call_1` was running all along (same tool call id, another thread).
    assert_eq!(
        server.sleeps().completed,
        0,
        "thread B's call ended before thread A was closed"
    );
    assert!(alive(&server, "thread_b", "call_1").await);
    assert!(!alive(&server, "thread_a", "call_1").await);
    assert!(!alive(&server, "thread_a", "call_2").await);

    let result = runtime.result("thread_b", "call_1").await;
    assert_eq!(
        result.text.as_deref(),
        Some(format!("slept {B_MS} ms").as_str())
    );
    assert_eq!(result.group_id.as_str(), "thread_b");
    assert_eq!(result.call_id, None);

    server.settled().await;
    assert_eq!(
        server.sleeps(),
        Snapshot {
            started: 3,
            completed: 1,
            cancelled: 2
        }
    );
    let stats = server.server.tool_server().stats();
    assert_eq!((stats.closes, stats.cancelled, stats.delivered), (1, 2, 1));
    runtime.assert_none(|result| result.group_id.as_str() == "thread_a");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notifier_without_the_token_gets_401_and_stops_nothing() {
    let server = ToolServer::start().await;
    let mut runtime = Runtime::start(&server, Bearer::new(Some(TOKEN))).await;
    runtime.sleep("t1", "toolu_long", FOREVER_MS).await;
    until("the sleep started", || server.sleeps().started == 1).await;

    // A stranger: discovery is open to it, nothing else.
    let stranger = Bearer::new(None);
    let (status, _) = stranger
        .get(&format!("{}/.well-known/rap-toolset", server.base))
        .await
        .unwrap();
    assert_eq!(status, 200);
    let notifier = RapNotifier::new(vec![server.base.clone()], stranger.clone());
    notifier
        .notify_tool_cancelled(thread("t1"), call("toolu_long"))
        .await;
    notifier.notify_thread_closed(thread("t1")).await;
    let invoke = json!({
        "operation": "sleep", "arguments": { "ms": 1 }, "id": "toolu_x", "callback_url": runtime.callback_url,
        "group_id": "t1",
    });
    stranger
        .post(&runtime.endpoint, &invoke.to_string())
        .await
        .unwrap();
    assert_eq!(
        stranger.posted(),
        [
            ("/cancel_tool_call".to_owned(), 401),
            ("/close_thread".to_owned(), 401),
            ("/invoke".to_owned(), 401),
        ]
    );

    // The notices never reached the endpoints, and the call runs on.
    let stats = server.server.tool_server().stats();
    assert_eq!(
        (stats.cancels, stats.closes, stats.accepted, stats.cancelled),
        (0, 0, 1, 0)
    );
    assert!(alive(&server, "t1", "toolu_long").await);
    assert_eq!(
        server.sleeps(),
        Snapshot {
            started: 1,
            completed: 0,
            cancelled: 0
        }
    );
    assert_eq!(server.in_flight(), 1);

    // With the token, the same notice stops it.
    let bearer = Bearer::new(Some(TOKEN));
    RapNotifier::new(vec![server.base.clone()], bearer.clone())
        .notify_tool_cancelled(thread("t1"), call("toolu_long"))
        .await;
    assert_eq!(bearer.posted(), [("/cancel_tool_call".to_owned(), 200)]);
    until("the sleep was stopped", || {
        server.sleeps().cancelled == 1 && server.in_flight() == 0
    })
    .await;
    runtime.assert_none(|_| true);
}
