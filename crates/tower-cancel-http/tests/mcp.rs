//! MCP Streamable HTTP over real sockets, both revisions: each status code, replies as JSON and as SSE with
//! progress first, cancels POSTed in a session (and only there), DELETE, hang-ups that are cancels (stateless)
//! and hang-ups that are not (sessions), and nothing left running at the end.

mod support;

use std::{net::SocketAddr, time::Duration};

use serde_json::{json, Value};
use support::{eventually, mcp_http as mcp, mount_mcp as mount, raw_post, read_some, Probe};
use tower::{service_fn, ServiceBuilder};
use tower_cancel::CancelStack;
use tower_cancel_http::{mcp::Origins, McpHttp};

struct Reply {
    status: u16,
    headers: reqwest::header::HeaderMap,
    text: String,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_str(&self.text)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.text))
    }

    fn content_type(&self) -> &str {
        self.headers
            .get("content-type")
            .map(|v| v.to_str().unwrap())
            .unwrap_or("")
    }

    /// The messages of an SSE body, in order.
    fn events(&self) -> Vec<Value> {
        assert!(
            self.content_type().starts_with("text/event-stream"),
            "{}",
            self.content_type()
        );
        assert!(
            !self.text.contains("\nid:") && !self.text.starts_with("id:"),
            "no event ids"
        );
        self.text
            .lines()
            .filter_map(|line| line.strip_prefix("data: "))
            .map(|data| serde_json::from_str(data).unwrap())
            .collect()
    }
}

const ACCEPT: (&str, &str) = ("accept", "application/json, text/event-stream");

async fn post(addr: SocketAddr, headers: &[(&str, &str)], body: &str) -> Reply {
    let mut request = reqwest::Client::new()
        .post(format!("http://{addr}/mcp"))
        .header("content-type", "application/json")
        .body(body.to_string());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    Reply {
        status: response.status().as_u16(),
        headers: response.headers().clone(),
        text: response.text().await.unwrap(),
    }
}

async fn initialize(addr: SocketAddr) -> String {
    let reply = post(
        addr,
        &[ACCEPT],
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#,
    )
    .await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.json()["result"]["protocolVersion"], "2025-11-25");
    let id = reply
        .headers
        .get("mcp-session-id")
        .expect("a session id")
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(id.len(), 32, "128 random bits");
    id
}

fn call(id: u64, tool: &str, arguments: Value) -> String {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":tool,"arguments":arguments}}).to_string()
}

fn call_with_progress(id: u64, tool: &str, arguments: Value) -> String {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":tool,"arguments":arguments,"_meta":{"progressToken":id}}})
        .to_string()
}

// ---------------------------------------------------------------------------------------------------------
// 2025-11-25: sessions

#[tokio::test]
async fn a_session_is_minted_by_initialize_and_named_by_every_later_post() {
    let probe = Probe::default();
    let mcp = mcp(&probe);
    let addr = mount(mcp.clone()).await;
    let session = initialize(addr).await;
    assert_eq!(mcp.sessions(), 1);
    let with_session = [
        ACCEPT,
        ("mcp-session-id", session.as_str()),
        ("mcp-protocol-version", "2025-11-25"),
    ];

    let initialized = post(
        addr,
        &with_session,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    )
    .await;
    assert_eq!((initialized.status, initialized.text.as_str()), (202, ""));
    let reply = post(addr, &with_session, &call(1, "sleep", json!({"ms": 1}))).await;
    assert_eq!(reply.status, 200);
    assert_eq!(
        reply.content_type(),
        "application/json",
        "a quick reply is one JSON body"
    );
    assert_eq!(
        reply.json(),
        json!({"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"done"}]}})
    );

    let missing = post(addr, &[ACCEPT], &call(2, "sleep", json!({}))).await;
    assert_eq!(missing.status, 400);
    assert_eq!(missing.json()["error"]["code"], -32600);
    let unknown = post(
        addr,
        &[ACCEPT, ("mcp-session-id", "feedface")],
        &call(2, "sleep", json!({})),
    )
    .await;
    assert_eq!(unknown.status, 404);
    assert_eq!(
        unknown.json(),
        json!({"jsonrpc":"2.0","id":2,"error":{"code":-32001,"message":"Session not found"}})
    );
    let bad_version = post(
        addr,
        &[
            ACCEPT,
            ("mcp-session-id", session.as_str()),
            ("mcp-protocol-version", "1999-01-01"),
        ],
        &call(3, "sleep", json!({})),
    )
    .await;
    assert_eq!(bad_version.status, 400);
    assert_eq!(
        bad_version.json()["error"]["data"]["requested"],
        "1999-01-01"
    );
    // Without the header, the version is assumed (2025-03-26), as the revision allows.
    let no_version = post(
        addr,
        &[ACCEPT, ("mcp-session-id", session.as_str())],
        &call(4, "sleep", json!({})),
    )
    .await;
    assert_eq!(no_version.status, 200);
    assert_eq!(mcp.in_flight(), 0);
}

#[tokio::test]
async fn a_failed_initialize_opens_no_session() {
    let probe = Probe::default();
    let mcp = {
        let stack = ServiceBuilder::new()
            .layer(CancelStack::mcp())
            .service(service_fn(|_req: tower_cancel::Request| async {
                Err::<Value, tower_cancel::BoxError>(Box::new(
                    tower_cancel::ErrorObject::invalid_params("no"),
                ))
            }));
        let _ = &probe;
        McpHttp::new(stack)
    };
    let addr = mount(mcp.clone()).await;
    let reply = post(
        addr,
        &[ACCEPT],
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}"#,
    )
    .await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.json()["error"]["code"], -32602);
    assert!(reply.headers.get("mcp-session-id").is_none());
    assert_eq!(mcp.sessions(), 0);
}

#[tokio::test]
async fn http_rules_answer_with_their_status() {
    let probe = Probe::default();
    let addr = mount(mcp(&probe)).await;
    let client = reqwest::Client::new();
    let url = format!("http://{addr}/mcp");
    assert_eq!(
        client.get(&url).send().await.unwrap().status(),
        405,
        "no server-initiated stream"
    );
    assert_eq!(
        client.delete(&url).send().await.unwrap().status(),
        405,
        "DELETE without a session"
    );
    assert_eq!(client.put(&url).send().await.unwrap().status(), 405);
    let evil = post(
        addr,
        &[ACCEPT, ("origin", "http://evil.example")],
        &call(1, "sleep", json!({})),
    )
    .await;
    assert_eq!(evil.status, 403);
    let local = post(
        addr,
        &[ACCEPT, ("origin", "http://localhost:3000")],
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}"#,
    )
    .await;
    assert_eq!(local.status, 200);
    let html = post(
        addr,
        &[("accept", "text/html")],
        &call(1, "sleep", json!({})),
    )
    .await;
    assert_eq!(html.status, 406);
    let text = client
        .post(&url)
        .header("content-type", "text/plain")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(text.status(), 415);
    let garbage = post(addr, &[ACCEPT], "{not json").await;
    assert_eq!(
        (garbage.status, garbage.json()["error"]["code"].clone()),
        (400, json!(-32700))
    );
    let batch = post(addr, &[ACCEPT], "[]").await;
    assert_eq!(
        (batch.status, batch.json()["error"]["code"].clone()),
        (400, json!(-32600))
    );
}

#[tokio::test]
async fn any_origin_can_be_allowed() {
    let probe = Probe::default();
    let addr = mount(mcp(&probe).origins(Origins::Any)).await;
    let reply = post(
        addr,
        &[ACCEPT, ("origin", "http://evil.example")],
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}"#,
    )
    .await;
    assert_eq!(reply.status, 200);
}

#[tokio::test]
async fn progress_comes_first_on_an_sse_stream_that_ends_with_the_reply() {
    let probe = Probe::default();
    let mcp = mcp(&probe);
    let addr = mount(mcp.clone()).await;
    let session = initialize(addr).await;
    let reply = post(
        addr,
        &[ACCEPT, ("mcp-session-id", session.as_str())],
        &call_with_progress(5, "progress", json!({"steps": 3, "intervalMs": 5})),
    )
    .await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.headers.get("x-accel-buffering").unwrap(), "no");
    let events = reply.events();
    let progress = |n: u64| json!({"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":5,"progress":n,"total":3}});
    assert_eq!(
        events,
        vec![
            progress(1),
            progress(2),
            progress(3),
            json!({"jsonrpc":"2.0","id":5,"result":{"content":[{"type":"text","text":"done"}]}})
        ]
    );
    assert_eq!(mcp.in_flight(), 0);
}

#[tokio::test]
async fn a_cancel_posted_in_the_session_stops_the_request_and_ends_its_stream_without_a_reply() {
    let probe = Probe::default();
    let mcp = mcp(&probe).keep_alive(Duration::from_millis(20));
    let addr = mount(mcp.clone()).await;
    let session = initialize(addr).await;
    let headers = [ACCEPT, ("mcp-session-id", session.as_str())];
    let slow = tokio::spawn({
        let session = session.clone();
        async move {
            post(
                addr,
                &[ACCEPT, ("mcp-session-id", session.as_str())],
                &call(9, "sleep", json!({"ms": 60000})),
            )
            .await
        }
    });
    probe.started(1).await;
    let cancel = post(
        addr,
        &headers,
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":9,"reason":"user"}}"#,
    )
    .await;
    assert_eq!((cancel.status, cancel.text.as_str()), (202, ""));
    let slow = slow.await.unwrap();
    assert_eq!(slow.status, 200);
    assert_eq!(
        slow.events(),
        Vec::<Value>::new(),
        "a cancelled MCP request is never answered"
    );
    assert_eq!(
        probe.ended(1).await,
        vec![("9".to_string(), "peer".to_string())]
    );
    eventually("nothing in flight", || mcp.in_flight() == 0).await;
}

#[tokio::test]
async fn a_cancel_in_one_session_never_touches_another_sessions_request_of_the_same_id() {
    let probe = Probe::default();
    let mcp = mcp(&probe);
    let addr = mount(mcp.clone()).await;
    let (a, b) = (initialize(addr).await, initialize(addr).await);
    assert_ne!(a, b);
    let run = |session: String| {
        tokio::spawn(async move {
            post(
                addr,
                &[ACCEPT, ("mcp-session-id", session.as_str())],
                &call(1, "sleep", json!({"ms": 300})),
            )
            .await
        })
    };
    let (in_a, in_b) = (run(a.clone()), run(b.clone()));
    probe.started(2).await;
    let cancel = r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}"#;
    assert_eq!(
        post(addr, &[ACCEPT, ("mcp-session-id", b.as_str())], cancel)
            .await
            .status,
        202
    );
    assert_eq!(in_b.await.unwrap().events(), Vec::<Value>::new());
    let a_reply = in_a.await.unwrap();
    assert_eq!(a_reply.json()["result"]["content"][0]["text"], "done");
    let mut ends = probe.ended(2).await;
    ends.sort();
    assert_eq!(
        ends,
        vec![
            ("1".into(), "completed".into()),
            ("1".into(), "peer".into())
        ]
    );
    assert_eq!(mcp.in_flight(), 0);
}

#[tokio::test]
async fn a_cancel_posted_before_its_request_arrives_cancels_it_on_arrival() {
    let probe = Probe::default();
    let mcp = mcp(&probe);
    let addr = mount(mcp.clone()).await;
    let session = initialize(addr).await;
    let headers = [ACCEPT, ("mcp-session-id", session.as_str())];
    let cancel =
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"early"}}"#;
    assert_eq!(post(addr, &headers, cancel).await.status, 202);
    let body = json!({"jsonrpc":"2.0","id":"early","method":"tools/call","params":{"name":"sleep","arguments":{"ms":60000}}});
    let reply = post(addr, &headers, &body.to_string()).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.events(), Vec::<Value>::new());
    assert!(probe.ends().is_empty(), "the handler never ran");
    assert_eq!(mcp.in_flight(), 0);
}

#[tokio::test]
async fn delete_ends_the_session_and_cancels_what_it_has_in_flight() {
    let probe = Probe::default();
    let mcp = mcp(&probe);
    let addr = mount(mcp.clone()).await;
    let session = initialize(addr).await;
    let slow = tokio::spawn({
        let session = session.clone();
        async move {
            post(
                addr,
                &[ACCEPT, ("mcp-session-id", session.as_str())],
                &call(1, "sleep", json!({"ms": 60000})),
            )
            .await
        }
    });
    probe.started(1).await;
    let client = reqwest::Client::new();
    let deleted = client
        .delete(format!("http://{addr}/mcp"))
        .header("mcp-session-id", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 200);
    assert_eq!(slow.await.unwrap().events(), Vec::<Value>::new());
    assert_eq!(
        probe.ended(1).await,
        vec![("1".to_string(), "disconnect".to_string())]
    );
    assert_eq!(mcp.sessions(), 0);
    let again = client
        .delete(format!("http://{addr}/mcp"))
        .header("mcp-session-id", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 404);
    let after = post(
        addr,
        &[ACCEPT, ("mcp-session-id", session.as_str())],
        &call(2, "sleep", json!({})),
    )
    .await;
    assert_eq!(after.status, 404, "the client must initialize again");
    eventually("nothing in flight", || mcp.in_flight() == 0).await;
}

/// POST on a raw socket, read until `until` shows up (or the server closes), and hang up.
async fn hang_up_after(
    addr: SocketAddr,
    headers: &[(&str, &str)],
    body: &str,
    probe: &Probe,
    until: Option<&str>,
) {
    let mut all = vec![
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    all.extend_from_slice(headers);
    let mut stream = raw_post(addr, "/mcp", &all, body).await;
    probe.started(1).await;
    if let Some(until) = until {
        let mut seen = String::new();
        while !seen.contains(until) {
            let more = read_some(&mut stream, Duration::from_millis(50)).await;
            seen.push_str(&more);
        }
        assert!(seen.contains("text/event-stream"), "{seen}");
    }
    drop(stream);
}

#[tokio::test]
async fn in_a_session_a_hang_up_is_not_a_cancel() {
    let probe = Probe::default();
    let mcp = mcp(&probe);
    let addr = mount(mcp.clone()).await;
    let session = initialize(addr).await;
    let body = call_with_progress(1, "progress", json!({"steps": 4, "intervalMs": 40}));
    hang_up_after(
        addr,
        &[("Mcp-Session-Id", &session)],
        &body,
        &probe,
        Some("notifications/progress"),
    )
    .await;
    assert_eq!(
        probe.ended(1).await,
        vec![("1".to_string(), "completed".to_string())]
    );
    eventually("nothing in flight", || mcp.in_flight() == 0).await;
}

#[tokio::test]
async fn in_a_session_a_hang_up_cancels_when_asked_to_during_the_stream_and_before_it() {
    let probe = Probe::default();
    let mcp = mcp(&probe).cancel_on_disconnect_in_sessions(true);
    let addr = mount(mcp.clone()).await;
    let session = initialize(addr).await;
    let body = call_with_progress(1, "progress", json!({"steps": 1000, "intervalMs": 20}));
    hang_up_after(
        addr,
        &[("Mcp-Session-Id", &session)],
        &body,
        &probe,
        Some("notifications/progress"),
    )
    .await;
    assert_eq!(
        probe.ended(1).await,
        vec![("1".to_string(), "disconnect".to_string())]
    );

    // Before anything was written (the reply would have been a JSON body).
    let body = call(2, "sleep", json!({"ms": 60000}));
    hang_up_after(addr, &[("Mcp-Session-Id", &session)], &body, &probe, None).await;
    let ends = probe.ended(2).await;
    assert_eq!(ends[1], ("2".to_string(), "disconnect".to_string()));
    eventually("nothing in flight", || mcp.in_flight() == 0).await;
}

// ---------------------------------------------------------------------------------------------------------
// 2026-07-28: stateless

const VERSION: &str = "2026-07-28";

fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": VERSION,
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {}
    })
}

fn stateless_call(id: u64, tool: &str, arguments: Value, progress: bool) -> String {
    let mut meta = meta();
    if progress {
        meta["progressToken"] = json!(id);
    }
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":tool,"arguments":arguments,"_meta":meta}}).to_string()
}

fn stateless_headers<'a>(method: &'a str, name: Option<&'a str>) -> Vec<(&'a str, &'a str)> {
    let mut headers = vec![
        ACCEPT,
        ("mcp-protocol-version", VERSION),
        ("mcp-method", method),
    ];
    if let Some(name) = name {
        headers.push(("mcp-name", name));
    }
    headers
}

#[tokio::test]
async fn stateless_requests_need_no_session_and_get_none() {
    let probe = Probe::default();
    let mcp = mcp(&probe);
    let addr = mount(mcp.clone()).await;
    let discover =
        json!({"jsonrpc":"2.0","id":"d","method":"server/discover","params":{"_meta":meta()}})
            .to_string();
    let mut headers = stateless_headers("server/discover", None);
    headers.push(("mcp-session-id", "ignored"));
    let reply = post(addr, &headers, &discover).await;
    assert_eq!(reply.status, 200);
    assert_eq!(
        reply.json()["result"]["supportedVersions"],
        json!(["2026-07-28"])
    );
    assert!(
        reply.headers.get("mcp-session-id").is_none(),
        "never minted"
    );

    let reply = post(
        addr,
        &stateless_headers("tools/call", Some("sleep")),
        &stateless_call(1, "sleep", json!({"ms": 1}), false),
    )
    .await;
    assert_eq!(
        reply.json(),
        json!({"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"done"}],"resultType":"complete"}})
    );
    // A name that is not plain ASCII comes base64-encoded: "sleep".
    let reply = post(
        addr,
        &stateless_headers("tools/call", Some("=?base64?c2xlZXA=?=")),
        &stateless_call(2, "sleep", json!({}), false),
    )
    .await;
    assert_eq!(reply.status, 200);
    let cancelled = json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"listen:0","_meta":meta()}});
    let notification = post(
        addr,
        &[ACCEPT, ("mcp-protocol-version", VERSION)],
        &cancelled.to_string(),
    )
    .await;
    assert_eq!((notification.status, notification.text.as_str()), (202, ""));
    assert_eq!(mcp.sessions(), 0);
    assert_eq!(mcp.in_flight(), 0);
}

#[tokio::test]
async fn stateless_header_rules_answer_400_with_their_code_and_unknown_methods_404() {
    let probe = Probe::default();
    let addr = mount(mcp(&probe)).await;
    let body = stateless_call(1, "sleep", json!({}), false);

    let wrong_version = post(
        addr,
        &[
            ACCEPT,
            ("mcp-protocol-version", "2025-11-25"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "sleep"),
        ],
        &body,
    )
    .await;
    assert_eq!(wrong_version.status, 400);
    assert_eq!(
        wrong_version.json(),
        json!({"jsonrpc":"2.0","id":1,"error":{"code":-32020,"message":"Header mismatch: MCP-Protocol-Version header value '2025-11-25' does not match body value '2026-07-28'"}})
    );
    let no_method = post(
        addr,
        &[
            ACCEPT,
            ("mcp-protocol-version", VERSION),
            ("mcp-name", "sleep"),
        ],
        &body,
    )
    .await;
    assert_eq!(
        (no_method.status, no_method.json()["error"]["code"].clone()),
        (400, json!(-32020))
    );
    let other_method = post(addr, &stateless_headers("tools/list", Some("sleep")), &body).await;
    assert_eq!(
        (
            other_method.status,
            other_method.json()["error"]["code"].clone()
        ),
        (400, json!(-32020))
    );
    let other_name = post(
        addr,
        &stateless_headers("tools/call", Some("progress")),
        &body,
    )
    .await;
    assert_eq!(other_name.json()["error"]["message"], "Header mismatch: Mcp-Name header value 'progress' does not match body value 'sleep' (params.name)");
    let no_name = post(addr, &stateless_headers("tools/call", None), &body).await;
    assert_eq!(
        (no_name.status, no_name.json()["error"]["code"].clone()),
        (400, json!(-32020))
    );

    let future = json!({"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":{
        "io.modelcontextprotocol/protocolVersion":"2099-01-01","io.modelcontextprotocol/clientCapabilities":{}}}});
    let unsupported = post(
        addr,
        &[
            ACCEPT,
            ("mcp-protocol-version", "2099-01-01"),
            ("mcp-method", "server/discover"),
        ],
        &future.to_string(),
    )
    .await;
    assert_eq!(unsupported.status, 400);
    assert_eq!(
        unsupported.json()["error"],
        json!({"code":-32022,"message":"Unsupported protocol version","data":{"supported":["2026-07-28","2025-11-25","2025-06-18","2025-03-26"],"requested":"2099-01-01"}})
    );
    let no_capabilities = json!({"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":VERSION}}});
    let reply = post(
        addr,
        &stateless_headers("server/discover", None),
        &no_capabilities.to_string(),
    )
    .await;
    assert_eq!(
        (reply.status, reply.json()["error"]["code"].clone()),
        (400, json!(-32602))
    );

    let unknown = json!({"jsonrpc":"2.0","id":1,"method":"foo/bar","params":{"_meta":meta()}});
    let reply = post(
        addr,
        &stateless_headers("foo/bar", None),
        &unknown.to_string(),
    )
    .await;
    assert_eq!(reply.status, 404);
    assert_eq!(
        reply.json(),
        json!({"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"Method not found: foo/bar"}})
    );
    let unknown_tool = post(
        addr,
        &stateless_headers("tools/call", Some("nope")),
        &stateless_call(1, "nope", json!({}), false),
    )
    .await;
    assert_eq!(
        (
            unknown_tool.status,
            unknown_tool.json()["error"]["code"].clone()
        ),
        (400, json!(-32602))
    );

    let client = reqwest::Client::new();
    let url = format!("http://{addr}/mcp");
    assert_eq!(
        client
            .get(&url)
            .header("mcp-protocol-version", VERSION)
            .send()
            .await
            .unwrap()
            .status(),
        405
    );
    assert_eq!(
        client
            .delete(&url)
            .header("mcp-protocol-version", VERSION)
            .send()
            .await
            .unwrap()
            .status(),
        405
    );
}

#[tokio::test]
async fn closing_a_stateless_stream_cancels_its_request_during_the_stream_and_before_it() {
    let probe = Probe::default();
    let mcp = mcp(&probe);
    let addr = mount(mcp.clone()).await;
    let body = stateless_call(
        1,
        "progress",
        json!({"steps": 1000, "intervalMs": 20}),
        true,
    );
    let headers = [
        ("MCP-Protocol-Version", VERSION),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "progress"),
    ];
    hang_up_after(
        addr,
        &headers,
        &body,
        &probe,
        Some("notifications/progress"),
    )
    .await;
    assert_eq!(
        probe.ended(1).await,
        vec![("1".to_string(), "disconnect".to_string())]
    );

    let body = stateless_call(2, "sleep", json!({"ms": 60000}), false);
    let headers = [
        ("MCP-Protocol-Version", VERSION),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "sleep"),
    ];
    hang_up_after(addr, &headers, &body, &probe, None).await;
    assert_eq!(
        probe.ended(2).await[1],
        ("2".to_string(), "disconnect".to_string())
    );
    eventually("nothing in flight", || mcp.in_flight() == 0).await;
}

#[tokio::test]
async fn a_quiet_request_gets_a_stream_with_keep_alive_lines() {
    let probe = Probe::default();
    let mcp = mcp(&probe).keep_alive(Duration::from_millis(20));
    let addr = mount(mcp.clone()).await;
    let reply = post(
        addr,
        &stateless_headers("tools/call", Some("sleep")),
        &stateless_call(3, "sleep", json!({"ms": 200}), false),
    )
    .await;
    assert_eq!(reply.status, 200);
    assert!(
        reply.text.starts_with(":\n\n:"),
        "comment lines first: {:?}",
        reply.text
    );
    assert_eq!(
        reply.events(),
        vec![
            json!({"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"done"}],"resultType":"complete"}})
        ]
    );
    assert_eq!(mcp.in_flight(), 0);
}

#[tokio::test]
async fn a_subscription_streams_tagged_notifications_until_the_client_closes_it() {
    let probe = Probe::default();
    let mcp = mcp(&probe);
    let addr = mount(mcp.clone()).await;
    let mut params = json!({"notifications": {"toolsListChanged": true}});
    params["_meta"] = meta();
    let body =
        json!({"jsonrpc":"2.0","id":"listen:0","method":"subscriptions/listen","params":params})
            .to_string();
    let headers = [
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("MCP-Protocol-Version", VERSION),
        ("Mcp-Method", "subscriptions/listen"),
    ];
    let mut stream = raw_post(addr, "/mcp", &headers, &body).await;
    let mut seen = String::new();
    while seen.matches("notifications/tools/list_changed").count() < 2 {
        seen.push_str(&read_some(&mut stream, Duration::from_millis(50)).await);
    }
    let events: Vec<Value> = seen
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .map(|data| serde_json::from_str(data).unwrap())
        .collect();
    let tag = json!({"io.modelcontextprotocol/subscriptionId": "listen:0"});
    assert_eq!(
        events[0],
        json!({"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged",
               "params":{"_meta":tag,"notifications":{"toolsListChanged":true}}}),
        "the acknowledgment first"
    );
    assert!(events[1..]
        .iter()
        .all(|e| e["method"] == "notifications/tools/list_changed" && e["params"]["_meta"] == tag));

    // The client closes the stream: the subscription ends (its handler is stopped, as a cancelled request).
    drop(stream);
    assert_eq!(
        probe.ended(1).await,
        vec![("\"listen:0\"".to_string(), "disconnect".to_string())]
    );
    eventually("nothing in flight", || mcp.in_flight() == 0).await;
}
