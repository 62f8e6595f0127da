//! MCP over Streamable HTTP, what the server sends on its own: a handler's requests to the client in a
//! `2025-11-25` session (on the SSE stream of the POST that carries the handler's request, answered on a later
//! POST, cancelled on that stream with its parent), none in the stateless revision, and the teardown of a
//! subscription the server ends (on the listen's own stream, before it ends).

mod support;

use std::{net::SocketAddr, time::Duration};

use serde_json::{json, Value};
use support::{
    eventually, mcp_http as mcp, mcp_http_with_timeout, mount_mcp as mount, raw_post, read_some,
    Probe,
};
use tokio::net::TcpStream;

const SESSION_VERSION: &str = "2025-11-25";
const STATELESS_VERSION: &str = "2026-07-28";

/// An SSE response read as it comes, over a raw connection.
struct Stream {
    tcp: TcpStream,
    seen: String,
}

impl Stream {
    async fn post(addr: SocketAddr, headers: &[(&str, &str)], body: &str) -> Self {
        let mut all = vec![
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
        ];
        all.extend_from_slice(headers);
        Self {
            tcp: raw_post(addr, "/mcp", &all, body).await,
            seen: String::new(),
        }
    }

    /// The messages of the stream so far.
    fn events(&self) -> Vec<Value> {
        self.seen
            .lines()
            .filter_map(|line| line.strip_prefix("data: "))
            .map(|data| serde_json::from_str(data).unwrap())
            .collect()
    }

    /// Read until the stream holds `n` messages (a hang guard of 10 s).
    async fn until(&mut self, n: usize) -> Vec<Value> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while self.events().len() < n {
            assert!(
                tokio::time::Instant::now() < deadline,
                "only {:?}",
                self.events()
            );
            self.seen
                .push_str(&read_some(&mut self.tcp, Duration::from_millis(20)).await);
        }
        self.events()
    }

    /// Read until the server ends the response (the last chunk of its body), and give every message.
    async fn until_the_end(&mut self) -> Vec<Value> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !self.seen.contains("\r\n0\r\n\r\n") {
            assert!(
                tokio::time::Instant::now() < deadline,
                "never ended: {:?}",
                self.seen
            );
            self.seen
                .push_str(&read_some(&mut self.tcp, Duration::from_millis(20)).await);
        }
        self.events()
    }
}

/// A JSON POST, read whole: its status and body.
async fn post(addr: SocketAddr, headers: &[(&str, &str)], body: &str) -> (u16, String) {
    let mut request = reqwest::Client::new()
        .post(format!("http://{addr}/mcp"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.to_string());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

async fn initialize(addr: SocketAddr) -> String {
    let reply = reqwest::Client::new()
        .post(format!("http://{addr}/mcp"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"elicitation":{}},"clientInfo":{"name":"t","version":"0"}}}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 200);
    reply.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned()
}

/// The headers of a POST in `session`.
fn in_session(session: &str) -> [(&'static str, &str); 2] {
    [
        ("Mcp-Session-Id", session),
        ("MCP-Protocol-Version", SESSION_VERSION),
    ]
}

fn ask(id: u64, message: &str) -> String {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":"ask","arguments":{"message":message}}})
        .to_string()
}

fn elicitation(id: u64, message: &str) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"elicitation/create","params":{"message":message}})
}

fn answered(id: u64, text: &str) -> Value {
    json!({"jsonrpc":"2.0","id":id,"result":{"content":[{"type":"text","text":text}]}})
}

/// Two tools ask the client at once, each on its own POST's stream: their requests are numbered in the session (0
/// and 1, not 0 twice), and each answer, POSTed on a request of its own in any order, reaches the tool that asked.
#[tokio::test]
async fn a_handlers_request_goes_out_on_its_posts_stream_and_the_answer_posted_later_reaches_it() {
    let probe = Probe::default();
    let mcp = mcp(&probe);
    let addr = mount(mcp.clone()).await;
    let session = initialize(addr).await;
    let headers = in_session(&session);
    let mut first = Stream::post(addr, &headers, &ask(7, "first?")).await;
    assert_eq!(first.until(1).await, vec![elicitation(0, "first?")]);
    let mut second = Stream::post(addr, &headers, &ask(8, "second?")).await;
    assert_eq!(second.until(1).await, vec![elicitation(1, "second?")]);

    let answer = |id: u64, action: &str| {
        json!({"jsonrpc":"2.0","id":id,"result":{"action":action}}).to_string()
    };
    assert_eq!(
        post(addr, &headers, &answer(1, "decline")).await,
        (202, String::new())
    );
    assert_eq!(
        second.until_the_end().await,
        vec![elicitation(1, "second?"), answered(8, "decline")]
    );
    assert_eq!(
        post(addr, &headers, &answer(0, "accept")).await,
        (202, String::new())
    );
    assert_eq!(
        first.until_the_end().await,
        vec![elicitation(0, "first?"), answered(7, "accept")]
    );
    eventually("nothing in flight", || mcp.in_flight() == 0).await;
}

/// The client cancels the tool call while it is being asked: the question is cancelled on the tool call's own
/// stream (`notifications/cancelled` naming it, which the `2025-11-25` revision allows), and the stream ends
/// without a reply to the cancelled call. An answer that comes after is nobody's.
#[tokio::test]
async fn cancelling_the_parent_cancels_the_question_on_its_stream() {
    let probe = Probe::default();
    let mcp = mcp(&probe);
    let addr = mount(mcp.clone()).await;
    let session = initialize(addr).await;
    let headers = in_session(&session);
    let mut stream = Stream::post(addr, &headers, &ask(3, "go?")).await;
    stream.until(1).await;
    let cancel = r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3,"reason":"user"}}"#;
    assert_eq!(post(addr, &headers, cancel).await, (202, String::new()));
    assert_eq!(
        stream.until_the_end().await,
        vec![
            elicitation(0, "go?"),
            json!({"jsonrpc":"2.0","method":"notifications/cancelled",
                   "params":{"requestId":0,"reason":"parent request cancelled"}}),
        ]
    );
    assert_eq!(
        probe.ended(1).await,
        vec![("3".to_string(), "peer".to_string())]
    );
    let late = r#"{"jsonrpc":"2.0","id":0,"result":{"action":"accept"}}"#;
    assert_eq!(post(addr, &headers, late).await, (202, String::new()));
    eventually("nothing in flight", || mcp.in_flight() == 0).await;
}

/// A timeout of the tool call and a DELETE of the session cancel the question the same way.
#[tokio::test]
async fn a_timeout_or_the_sessions_end_cancels_the_question_too() {
    let probe = Probe::default();
    let timed = mcp_http_with_timeout(&probe, Duration::from_millis(200));
    let addr = mount(timed.clone()).await;
    let session = initialize(addr).await;
    let headers = in_session(&session);
    let mut stream = Stream::post(addr, &headers, &ask(4, "slow?")).await;
    let mut frames = stream.until_the_end().await;
    // The question carries the time the tool call has left (never more than its 200 ms; the clock runs), and
    // times out with it.
    let left = frames[0]["params"]
        .as_object_mut()
        .and_then(|params| params.remove("_meta"))
        .expect("the question carries its deadline");
    let left = left["timeoutMs"].as_u64().expect("milliseconds");
    assert!((1..=200).contains(&left), "{left} ms left");
    assert_eq!(
        frames,
        vec![
            elicitation(0, "slow?"),
            json!({"jsonrpc":"2.0","method":"notifications/cancelled",
                   "params":{"requestId":0,"reason":"timed out"}}),
            json!({"jsonrpc":"2.0","id":4,"error":{"code":-32001,"message":"Request timed out"}}),
        ]
    );

    let probe = Probe::default();
    let mcp = mcp(&probe);
    let addr = mount(mcp.clone()).await;
    let session = initialize(addr).await;
    let headers = in_session(&session);
    let mut stream = Stream::post(addr, &headers, &ask(5, "still there?")).await;
    stream.until(1).await;
    let deleted = reqwest::Client::new()
        .delete(format!("http://{addr}/mcp"))
        .header("mcp-session-id", session.as_str())
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 200);
    assert_eq!(
        stream.until_the_end().await,
        vec![
            elicitation(0, "still there?"),
            json!({"jsonrpc":"2.0","method":"notifications/cancelled",
                   "params":{"requestId":0,"reason":"parent request cancelled"}}),
        ]
    );
    eventually("nothing in flight", || mcp.in_flight() == 0).await;
}

fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": STATELESS_VERSION,
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {}
    })
}

/// The stateless revision has no requests from server to client: the handler's request fails at once (no hang),
/// and nothing but the reply is written.
#[tokio::test]
async fn in_the_stateless_revision_a_handlers_request_fails_at_once() {
    let probe = Probe::default();
    let mcp = mcp(&probe);
    let addr = mount(mcp.clone()).await;
    let body = json!({"jsonrpc":"2.0","id":1,"method":"tools/call",
                      "params":{"_meta":meta(),"name":"ask","arguments":{"message":"?"}}})
    .to_string();
    let headers = [
        ("MCP-Protocol-Version", STATELESS_VERSION),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "ask"),
    ];
    let (status, text) = post(addr, &headers, &body).await;
    assert_eq!(status, 200);
    let reply: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        reply,
        answered(
            1,
            "not asked: this side may not send requests in this conversation's revision"
        )
    );
    eventually("nothing in flight", || mcp.in_flight() == 0).await;
}

fn listen() -> (String, [(&'static str, &'static str); 2]) {
    let body = json!({"jsonrpc":"2.0","id":"listen:0","method":"subscriptions/listen",
                      "params":{"_meta":meta(),"notifications":{"toolsListChanged":true}}})
    .to_string();
    (
        body,
        [
            ("MCP-Protocol-Version", STATELESS_VERSION),
            ("Mcp-Method", "subscriptions/listen"),
        ],
    )
}

fn teardown(reason: &str) -> Value {
    json!({"jsonrpc":"2.0","method":"notifications/cancelled",
           "params":{"requestId":"listen:0","reason":reason}})
}

/// The server ends a subscription (its timeout here): `notifications/cancelled` naming the listen request goes out
/// on the listen's own stream, and ends it (no reply after it).
#[tokio::test]
async fn a_subscription_the_server_ends_is_torn_down_on_its_own_stream() {
    let probe = Probe::default();
    let mcp = mcp_http_with_timeout(&probe, Duration::from_millis(100));
    let addr = mount(mcp.clone()).await;
    let (body, headers) = listen();
    let mut stream = Stream::post(addr, &headers, &body).await;
    let events = stream.until_the_end().await;
    let n = events.len();
    assert_eq!(
        events[0]["method"], "notifications/subscriptions/acknowledged",
        "{events:?}"
    );
    assert_eq!(
        events[n - 1],
        teardown("subscription ended by the server: timed out")
    );
    assert!(events[1..n - 1]
        .iter()
        .all(|e| e["method"] == "notifications/tools/list_changed"));
    eventually("nothing in flight", || mcp.in_flight() == 0).await;
}

/// A shutdown ends every subscription with its teardown too; one the client closed itself gets none (nothing is
/// written after the client's hang-up, which is its cancel).
#[tokio::test]
async fn a_shutdown_tears_subscriptions_down_and_a_client_that_closes_its_own_gets_none() {
    let probe = Probe::default();
    let mcp = mcp(&probe);
    let addr = mount(mcp.clone()).await;
    let (body, headers) = listen();
    let mut closed_by_client = Stream::post(addr, &headers, &body).await;
    closed_by_client.until(1).await;
    drop(closed_by_client);
    assert_eq!(
        probe.ended(1).await,
        vec![("\"listen:0\"".to_string(), "disconnect".to_string())]
    );

    let mut stream = Stream::post(addr, &headers, &body).await;
    stream.until(1).await;
    assert_eq!(mcp.shutdown(), 1);
    let events = stream.until_the_end().await;
    let n = events.len();
    assert_eq!(
        events[n - 1],
        teardown("subscription ended by the server: server shutting down"),
        "the teardown ends the stream: no -32603 after it"
    );
    eventually("nothing in flight", || mcp.in_flight() == 0).await;
}
