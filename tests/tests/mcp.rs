//! MCP over NDJSON: `notifications/cancelled {"requestId": …, "reason": …}`; a cancelled request gets no reply.
//!
//! "No reply" is proven on the wire: after the cancel the test sends a later request, and the next frame is that
//! request's reply (a reply to the cancelled request would have been written first), and when the connection is
//! closed nothing else has been written.

use serde_json::json;
use tests::{scenarios, Conn, Counts, Ended, Probe};
use tower_cancel::{CancelReason, CancelStack};

#[tokio::test(start_paused = true)]
async fn cancel_while_running_stops_the_handler_and_sends_nothing() {
    scenarios::cancel_while_running_with(
        CancelStack::mcp(),
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7,"reason":"User requested cancellation"}}"#,
        CancelReason::peer(Some("User requested cancellation".into())),
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_cancel_without_a_reason_and_with_a_string_id() {
    let probe = Probe::new();
    let mut conn = Conn::mcp(&probe);
    conn.send(r#"{"jsonrpc":"2.0","id":"abc-123","method":"hang"}"#)
        .await;
    probe.wait_started("abc-123").await;
    conn.send(
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"abc-123"}}"#,
    )
    .await;
    conn.send(r#"{"jsonrpc":"2.0","id":"abc-124","method":"echo"}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":"abc-124","result":null}"#)
        .await;
    assert_eq!(
        probe.ended_of("abc-123"),
        Some(Ended::stopped(
            "abc-123",
            "hang",
            Some(CancelReason::peer(None))
        ))
    );
    conn.finish_counting(Counts::new(2, 1, 1)).await;
}

#[tokio::test(start_paused = true)]
async fn a_cancel_before_its_request_means_the_handler_never_runs() {
    scenarios::a_cancel_before_its_request(
        CancelStack::mcp(),
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7,"reason":"too late"}}"#,
        Some((
            r#"{"jsonrpc":"2.0","id":8,"method":"echo"}"#,
            r#"{"jsonrpc":"2.0","id":8,"result":null}"#,
        )),
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_cancel_after_completion_leaves_the_reply_and_changes_nothing() {
    scenarios::a_cancel_after_completion(
        CancelStack::mcp(),
        r#"{"jsonrpc":"2.0","id":7,"method":"sleep","params":{"ms":5}}"#,
        r#"{"jsonrpc":"2.0","id":7,"result":{"slept":5}}"#,
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn unknown_malformed_and_duplicate_cancels_are_ignored() {
    scenarios::bad_and_duplicate_cancels_are_ignored(
        CancelStack::mcp(),
        &[
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":99,"reason":"unknown"}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"7"}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"id":7}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":[7,"positional"]}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":true}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":null}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"reason":"no id"}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled"}"#,
        ],
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn other_notifications_reach_the_service() {
    let probe = Probe::new();
    let mut conn = Conn::mcp(&probe);
    conn.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
        .await;
    assert_eq!(
        probe.wait_notification().await,
        ("notifications/initialized".to_owned(), json!(null))
    );
    conn.finish_counting(Counts::default()).await;
}

#[tokio::test(start_paused = true)]
async fn initialize_is_never_cancelled() {
    scenarios::initialize_is_never_cancelled(
        CancelStack::mcp(),
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"},"ms":50}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":0,"reason":"impatient"}}"#,
    )
    .await;
}
