//! MCP Streamable HTTP against a hostile client, over real sockets: a session's requests left running by POSTs
//! that hang up (in the `2025-11-25` revision a hang-up is rightly not a cancel), and a flood of `initialize`.
//! Both are bounded: the client sees 503 with `Retry-After` past a session's bound, a flood evicts idle sessions
//! instead of locking new clients out, and a normal request is still answered within a second.

mod support;

use std::{net::SocketAddr, time::Duration};

use serde_json::{json, Value};
use support::{eventually, mcp_http as mcp, mount_mcp as mount, raw_post, Probe};

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#;

struct Answer {
    status: u16,
    retry_after: Option<String>,
    session: Option<String>,
}

async fn post(
    client: &reqwest::Client,
    addr: SocketAddr,
    session: Option<&str>,
    body: &str,
) -> Answer {
    let mut request = client
        .post(format!("http://{addr}/mcp"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.to_owned());
    if let Some(session) = session {
        request = request.header("mcp-session-id", session);
    }
    let response = request.send().await.unwrap();
    let header = |name| {
        response
            .headers()
            .get(name)
            .map(|value: &reqwest::header::HeaderValue| value.to_str().unwrap().to_owned())
    };
    let (retry_after, session) = (header("retry-after"), header("mcp-session-id"));
    let status = response.status().as_u16();
    let _ = response.bytes().await;
    Answer {
        status,
        retry_after,
        session,
    }
}

async fn initialize(client: &reqwest::Client, addr: SocketAddr) -> String {
    let answer = post(client, addr, None, INITIALIZE).await;
    assert_eq!(answer.status, 200);
    answer.session.expect("a session id")
}

fn call(id: u64, tool: &str, arguments: Value) -> String {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":tool,"arguments":arguments}}).to_string()
}

#[tokio::test]
async fn posts_that_hang_up_leave_no_more_running_in_a_session_than_its_bound() {
    let probe = Probe::default();
    // A bound of its own, lower than the default (DEFAULT_MAX_IN_FLIGHT_PER_SCOPE) so that the test holds its
    // sockets open within the smallest file limit a machine has (1024).
    let bound = 64;
    let mcp = mcp(&probe).max_in_flight_per_session(bound as usize);
    let addr = mount(mcp.clone()).await;
    let client = reqwest::Client::new();
    let session = initialize(&client, addr).await;
    // As many `sleep` calls as a session may run, each POSTed and hung up once it runs: they run on (a
    // hang-up is not a cancel in this revision).
    let mut hung_up = Vec::new();
    for id in 1..=bound {
        let headers = [
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("Mcp-Session-Id", session.as_str()),
        ];
        hung_up.push(
            raw_post(
                addr,
                "/mcp",
                &headers,
                &call(id, "sleep", json!({"ms": 60_000})),
            )
            .await,
        );
    }
    probe.started(bound as usize).await;
    drop(hung_up);
    // One more: refused before it runs, the HTTP way of saying "busy".
    let past = post(
        &client,
        addr,
        Some(&session),
        &call(bound + 1, "sleep", json!({"ms": 0})),
    )
    .await;
    assert_eq!(past.status, 503);
    assert_eq!(past.retry_after.as_deref(), Some("1"));
    assert_eq!(mcp.in_flight(), bound as usize, "the bound holds");
    assert_eq!(mcp.stats().busy, 1);
    // A cancel is never refused: it needs no room.
    let cancel =
        json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId": 1}})
            .to_string();
    assert_eq!(
        post(&client, addr, Some(&session), &cancel).await.status,
        202
    );
    eventually("the cancelled one ended", || {
        mcp.in_flight() == bound as usize - 1
    })
    .await;
    // Another client's session is not touched by this one's bound.
    let other = initialize(&client, addr).await;
    let answer = tokio::time::timeout(
        Duration::from_secs(1),
        post(
            &client,
            addr,
            Some(&other),
            &call(1, "sleep", json!({"ms": 0})),
        ),
    )
    .await
    .expect("a normal request answered within a second");
    assert_eq!(answer.status, 200);
    // DELETE ends the session and what it left running.
    let deleted = client
        .delete(format!("http://{addr}/mcp"))
        .header("mcp-session-id", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 200);
    eventually("nothing in flight", || mcp.in_flight() == 0).await;
}

#[tokio::test]
async fn a_flood_of_initialize_evicts_idle_sessions_instead_of_locking_new_clients_out() {
    let probe = Probe::default();
    let mcp = mcp(&probe).session_limits(Duration::from_secs(30 * 60), 50);
    let addr = mount(mcp.clone()).await;
    let client = reqwest::Client::new();
    // A client at work: a long call in flight in its session.
    let working = initialize(&client, addr).await;
    let long = {
        let (client, working) = (client.clone(), working.clone());
        tokio::spawn(async move {
            post(
                &client,
                addr,
                Some(&working),
                &call(1, "sleep", json!({"ms": 1_000})),
            )
            .await
            .status
        })
    };
    probe.started(1).await;
    // A client that initialized and went quiet: the first one the flood pushes out.
    let idle = initialize(&client, addr).await;
    // The flood: more initializes than the table holds, every one of them served.
    for _ in 0..200 {
        initialize(&client, addr).await;
    }
    assert_eq!(mcp.front().stats().busy, 0, "none refused");
    // The idle client is told its session is gone, and initializes again, as MCP clients do.
    let gone = post(
        &client,
        addr,
        Some(&idle),
        &call(2, "sleep", json!({"ms": 0})),
    )
    .await;
    assert_eq!(gone.status, 404);
    let again = initialize(&client, addr).await;
    assert_eq!(
        post(
            &client,
            addr,
            Some(&again),
            &call(3, "sleep", json!({"ms": 0}))
        )
        .await
        .status,
        200
    );
    // The working client's session, with a request in flight, was never a candidate.
    assert_eq!(long.await.unwrap(), 200);
    assert_eq!(
        post(
            &client,
            addr,
            Some(&working),
            &call(4, "sleep", json!({"ms": 0}))
        )
        .await
        .status,
        200
    );
}
