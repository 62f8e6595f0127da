//! ACP's turn cancel, `session/cancel {sessionId}`, ended by the stack when it groups requests by `sessionId`
//! (`CancelStack::acp().group_by_param("sessionId")`): the session's pending `session/prompt` answers the result
//! `{"stopReason":"cancelled"}`, its other requests -32800, another session's run on, and nothing is remembered.

use serde_json::{json, Value};
use tests::{ms, Conn, Counts, Ended, Probe, Spoken};
use tower::ServiceBuilder;
use tower_cancel::{dialect::Acp, CancelReason, CancelStack, Id, Registry};
use tower_cancel_io::{Framing, Server};

fn grouped() -> CancelStack<Acp> {
    CancelStack::acp().group_by_param("sessionId")
}

fn session_cancel(session: &str) -> String {
    json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session}})
        .to_string()
}

fn group(session: &str) -> Option<CancelReason> {
    Some(CancelReason::Group {
        key: Id::from(session),
    })
}

/// The next `n` replies, in id order (requests cancelled together are answered in whatever order they settle).
async fn replies(conn: &mut Conn, n: usize) -> Vec<Value> {
    let mut replies = Vec::new();
    for _ in 0..n {
        replies.push(conn.recv_json().await);
    }
    replies.sort_by_key(|reply| reply["id"].as_i64());
    replies
}

fn cancelled_error(id: i64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32800, "message": "Request cancelled"}})
}

#[tokio::test(start_paused = true)]
async fn a_session_cancel_ends_the_sessions_prompt_and_requests_and_nothing_else() {
    let probe = Probe::new();
    let mut conn = Conn::serve(grouped(), &probe, Framing::Ndjson);
    conn.send_together(&[
        r#"{"jsonrpc":"2.0","id":1,"method":"session/prompt","params":{"sessionId":"A","ms":60000,"prompt":[{"type":"text","text":"hi"}]}}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"sleep","params":{"ms":60000,"sessionId":"A"}}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":"sleep","params":{"ms":60000,"sessionId":"A"}}"#,
        r#"{"jsonrpc":"2.0","id":4,"method":"sleep","params":{"ms":100,"sessionId":"B"}}"#,
        r#"{"jsonrpc":"2.0","id":5,"method":"sleep","params":{"ms":100}}"#,
    ])
    .await;
    for id in 1..=5 {
        probe.wait_started(id).await;
    }
    assert_eq!(conn.registry().stats().groups, 2, "sessions A and B");

    conn.send(&session_cancel("A")).await;
    assert_eq!(
        replies(&mut conn, 3).await,
        [
            json!({"jsonrpc": "2.0", "id": 1, "result": {"stopReason": "cancelled"}}),
            cancelled_error(2),
            cancelled_error(3),
        ]
    );
    for (id, method) in [(1, "session/prompt"), (2, "sleep"), (3, "sleep")] {
        assert_eq!(
            probe.ended_of(id),
            Some(Ended::stopped(id, method, group("A")))
        );
    }
    // Passed on to the application after the stack acted.
    assert_eq!(
        probe.wait_notification().await,
        ("session/cancel".to_owned(), json!({"sessionId": "A"}))
    );
    // Session B's request and the ungrouped one run on.
    assert_eq!(
        replies(&mut conn, 2).await,
        [
            json!({"jsonrpc": "2.0", "id": 4, "result": {"slept": 100}}),
            json!({"jsonrpc": "2.0", "id": 5, "result": {"slept": 100}}),
        ]
    );
    let stats = conn.registry().stats();
    assert_eq!((stats.in_flight, stats.groups, stats.remembered), (0, 0, 0));
    conn.finish_counting(Counts::new(5, 2, 3)).await;
}

#[tokio::test(start_paused = true)]
async fn a_request_cancel_of_the_prompt_is_still_request_cancelled() {
    let probe = Probe::new();
    let mut conn = Conn::serve(grouped(), &probe, Framing::Ndjson);
    conn.send(r#"{"jsonrpc":"2.0","id":1,"method":"session/prompt","params":{"sessionId":"A","ms":60000}}"#)
        .await;
    probe.wait_started(1).await;
    conn.send(&Acp::cancel_frame(1)).await;
    assert_eq!(conn.recv_json().await, cancelled_error(1));
    assert_eq!(
        probe.ended_of(1),
        Some(Ended::stopped(
            1,
            "session/prompt",
            Some(CancelReason::peer(None))
        ))
    );
    conn.finish_counting(Counts::new(1, 0, 1)).await;
}

#[tokio::test(start_paused = true)]
async fn a_session_cancel_with_nothing_in_flight_is_forgotten_and_the_next_turn_runs() {
    let probe = Probe::new();
    let mut conn = Conn::serve(grouped(), &probe, Framing::Ndjson);
    conn.send(&session_cancel("A")).await;
    assert_eq!(
        probe.wait_notification().await,
        ("session/cancel".to_owned(), json!({"sessionId": "A"}))
    );
    conn.send(
        r#"{"jsonrpc":"2.0","id":1,"method":"session/prompt","params":{"sessionId":"A","ms":50}}"#,
    )
    .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":1,"result":{"stopReason":"end_turn"}}"#)
        .await;
    assert_eq!(conn.registry().stats().remembered, 0);
    conn.finish_counting(Counts::new(1, 1, 0)).await;
}

#[tokio::test(start_paused = true)]
async fn without_grouping_a_session_cancel_is_the_applications_only() {
    let probe = Probe::new();
    let mut conn = Conn::acp(&probe);
    conn.send(
        r#"{"jsonrpc":"2.0","id":1,"method":"session/prompt","params":{"sessionId":"A","ms":50}}"#,
    )
    .await;
    probe.wait_started(1).await;
    conn.send(&session_cancel("A")).await;
    assert_eq!(
        probe.wait_notification().await,
        ("session/cancel".to_owned(), json!({"sessionId": "A"}))
    );
    conn.expect(r#"{"jsonrpc":"2.0","id":1,"result":{"stopReason":"end_turn"}}"#)
        .await;
    conn.finish_counting(Counts::new(1, 1, 0)).await;
}

#[tokio::test(start_paused = true)]
async fn a_cooperative_handler_sees_the_group_cancel_and_may_answer_its_own_result() {
    let probe = Probe::new();
    let mut conn = Conn::serve(grouped().cooperative(ms(500)), &probe, Framing::Ndjson);
    conn.send_together(&[
        r#"{"jsonrpc":"2.0","id":1,"method":"group","params":{"sessionId":"A"}}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"partial","params":{"sessionId":"A"}}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":"A","ms":60000}}"#,
    ])
    .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":1,"result":{"group":"A"}}"#)
        .await;
    probe.wait_started(2).await;
    probe.wait_started(3).await;
    conn.send(&session_cancel("A")).await;
    // The handler that winds down answers its own result at once; the prompt that does not is answered the
    // cancelled turn once its grace is over.
    conn.expect(r#"{"jsonrpc":"2.0","id":2,"result":{"partial":true}}"#)
        .await;
    assert_eq!(
        probe.ended_of(2),
        Some(Ended::finished(2, "partial", group("A")))
    );
    conn.expect(r#"{"jsonrpc":"2.0","id":3,"result":{"stopReason":"cancelled"}}"#)
        .await;
    assert_eq!(
        probe.ended_of(3),
        Some(Ended::stopped(3, "session/prompt", group("A")))
    );
    // The partial result is the reply of a request that was cancelled: counted cancelled, as any cooperative end.
    conn.finish_counting(Counts::new(3, 1, 2)).await;
}

#[tokio::test(start_paused = true)]
async fn a_session_cancel_from_another_connection_of_the_scope_does_nothing_here() {
    let shared = Registry::new();
    let connect = || {
        let probe = Probe::new();
        let service = ServiceBuilder::new()
            .layer(grouped())
            .service(probe.service());
        let server = Server::new(service).with_registry(shared.clone());
        (Conn::start(server, Framing::Ndjson), probe)
    };
    let ((mut a, probe_a), (mut b, probe_b)) = (connect(), connect());
    a.send(
        r#"{"jsonrpc":"2.0","id":1,"method":"session/prompt","params":{"sessionId":"A","ms":100}}"#,
    )
    .await;
    probe_a.wait_started(1).await;
    // Connection B names the same session id: its cancel reaches B's requests only (none).
    b.send(&session_cancel("A")).await;
    assert_eq!(
        probe_b.wait_notification().await,
        ("session/cancel".to_owned(), json!({"sessionId": "A"}))
    );
    a.expect(r#"{"jsonrpc":"2.0","id":1,"result":{"stopReason":"end_turn"}}"#)
        .await;
    assert_eq!(
        probe_a.ended_of(1),
        Some(Ended::finished(1, "session/prompt", None))
    );
    b.finish_quiet().await;
    a.finish_quiet().await;
    assert_eq!(Counts::of(&shared), Counts::new(1, 1, 0));
}

#[tokio::test(start_paused = true)]
async fn a_session_cancel_racing_the_prompts_end_gives_exactly_one_reply() {
    let probe = Probe::new();
    let mut conn = Conn::serve(grouped(), &probe, Framing::Ndjson);
    conn.send(
        r#"{"jsonrpc":"2.0","id":1,"method":"session/prompt","params":{"sessionId":"A","ms":10}}"#,
    )
    .await;
    probe.wait_started(1).await;
    // The prompt's timer and the cancel are due together: whichever settles it, one reply.
    tokio::time::sleep(ms(10)).await;
    conn.send(&session_cancel("A")).await;
    let reply = conn.recv_json().await;
    assert!(
        reply == json!({"jsonrpc": "2.0", "id": 1, "result": {"stopReason": "end_turn"}})
            || reply == json!({"jsonrpc": "2.0", "id": 1, "result": {"stopReason": "cancelled"}}),
        "{reply}"
    );
    let counts = conn.counts();
    conn.finish_quiet().await;
    assert_eq!(counts.registered, 1);
    assert_eq!(counts.completed + counts.cancelled, 1);
}

#[tokio::test(start_paused = true)]
async fn the_draft_dialect_ends_the_turn_the_same_way_once_initialized() {
    let probe = Probe::new();
    let mut conn = Conn::serve(
        CancelStack::acp_draft().group_by_param("sessionId"),
        &probe,
        Framing::Ndjson,
    );
    conn.send(r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":0,"result":{"capabilities":{}}}"#)
        .await;
    conn.send_together(&[
        r#"{"jsonrpc":"2.0","id":1,"method":"session/prompt","params":{"sessionId":"A","ms":60000}}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"sleep","params":{"ms":60000,"sessionId":"A"}}"#,
    ])
    .await;
    probe.wait_started(1).await;
    probe.wait_started(2).await;
    conn.send(&session_cancel("A")).await;
    assert_eq!(
        replies(&mut conn, 2).await,
        [
            json!({"jsonrpc": "2.0", "id": 1, "result": {"stopReason": "cancelled"}}),
            json!({"jsonrpc": "2.0", "id": 2, "error": {"code": -32800, "message": "Cancelled"}}),
        ]
    );
    conn.finish_counting(Counts::new(2, 0, 2)).await;
}
