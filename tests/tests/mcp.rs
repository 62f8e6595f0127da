//! MCP over NDJSON: `notifications/cancelled {"requestId": …, "reason": …}`; a cancelled request gets no reply.
//!
//! "No reply" is proven on the wire: after the cancel the test sends a later request, and the next frame is that
//! request's reply (a reply to the cancelled request would have been written first), and when the connection is
//! closed nothing else has been written.

use serde_json::json;
use tests::{Conn, Counts, Ended, Probe};
use tower_cancel::CancelReason;

#[tokio::test(start_paused = true)]
async fn cancel_while_running_stops_the_handler_and_sends_nothing() {
    let probe = Probe::new();
    let mut conn = Conn::mcp(&probe);
    conn.send(r#"{"jsonrpc":"2.0","id":7,"method":"hang"}"#)
        .await;
    probe.wait_started(7).await;
    conn.send(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7,"reason":"User requested cancellation"}}"#)
        .await;
    conn.send(r#"{"jsonrpc":"2.0","id":8,"method":"echo","params":{"after":"cancel"}}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":8,"result":{"after":"cancel"}}"#)
        .await;
    // The handler was stopped and saw the peer's reason.
    assert_eq!(
        probe.ended_of(7),
        Some(Ended::stopped(
            7,
            "hang",
            Some(CancelReason::peer(Some(
                "User requested cancellation".into()
            )))
        ))
    );
    assert!(probe.notifications().is_empty());
    assert!(conn.registry().is_empty());

    let counts = conn.counts();
    conn.finish_quiet().await;
    assert_eq!(
        counts,
        Counts {
            registered: 2,
            completed: 1,
            cancelled: 1,
            ..Counts::default()
        }
    );
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
    let counts = conn.counts();
    conn.finish_quiet().await;
    assert_eq!(
        counts,
        Counts {
            registered: 2,
            completed: 1,
            cancelled: 1,
            ..Counts::default()
        }
    );
}

#[tokio::test(start_paused = true)]
async fn a_cancel_before_its_request_means_the_handler_never_runs() {
    let probe = Probe::new();
    let mut conn = Conn::mcp(&probe);
    conn.send(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7,"reason":"too late"}}"#)
        .await;
    conn.send(r#"{"jsonrpc":"2.0","id":7,"method":"hang"}"#)
        .await;
    conn.send(r#"{"jsonrpc":"2.0","id":8,"method":"echo"}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":8,"result":null}"#)
        .await;
    assert_eq!(probe.started(), 1, "only request 8 ran");
    assert_eq!(probe.started_list()[0].method, "echo");

    let counts = conn.counts();
    conn.finish_quiet().await;
    assert_eq!(
        counts,
        Counts {
            registered: 2,
            completed: 1,
            cancelled: 1,
            early_cancels: 1,
            remembered: 0
        }
    );
}

#[tokio::test(start_paused = true)]
async fn a_cancel_after_completion_leaves_the_reply_and_changes_nothing() {
    let probe = Probe::new();
    let mut conn = Conn::mcp(&probe);
    conn.send(r#"{"jsonrpc":"2.0","id":7,"method":"sleep","params":{"ms":5}}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":7,"result":{"slept":5}}"#)
        .await;
    conn.send(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}"#)
        .await;
    conn.send(r#"{"jsonrpc":"2.0","id":8,"method":"echo"}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":8,"result":null}"#)
        .await;

    let counts = conn.counts();
    conn.finish_quiet().await;
    assert_eq!(
        counts,
        Counts {
            registered: 2,
            completed: 2,
            early_cancels: 1,
            remembered: 1,
            ..Counts::default()
        }
    );
}

#[tokio::test(start_paused = true)]
async fn unknown_malformed_and_duplicate_cancels_are_ignored() {
    let probe = Probe::new();
    let mut conn = Conn::mcp(&probe);
    conn.send(r#"{"jsonrpc":"2.0","id":7,"method":"hang"}"#)
        .await;
    probe.wait_started(7).await;

    conn.send_together(&[
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":99,"reason":"unknown"}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"7"}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"id":7}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":[7,"positional"]}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":true}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":null}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"reason":"no id"}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled"}"#,
        r#"{"jsonrpc":"2.0","id":8,"method":"echo","params":"after the bad cancels"}"#,
    ])
    .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":8,"result":"after the bad cancels"}"#)
        .await;
    assert!(conn.registry().contains(&7.into()));
    assert_eq!(probe.ended_of(7), None);
    assert!(probe.notifications().is_empty());

    let cancel = r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}"#;
    conn.send_together(&[cancel, cancel]).await;
    conn.send(r#"{"jsonrpc":"2.0","id":9,"method":"echo"}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":9,"result":null}"#)
        .await;
    assert_eq!(
        probe.ended_of(7),
        Some(Ended::stopped(7, "hang", Some(CancelReason::peer(None))))
    );

    let counts = conn.counts();
    conn.finish_quiet().await;
    assert_eq!(
        counts,
        Counts {
            registered: 3,
            completed: 2,
            cancelled: 1,
            early_cancels: 3,
            remembered: 3
        }
    );
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
    let counts = conn.counts();
    conn.finish_quiet().await;
    assert_eq!(counts, Counts::default());
}

#[tokio::test(start_paused = true)]
async fn initialize_is_never_cancelled() {
    let probe = Probe::new();
    let mut conn = Conn::mcp(&probe);
    conn.send(r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"},"ms":50}}"#)
        .await;
    probe.wait_started(0).await;
    conn.send(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":0,"reason":"impatient"}}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":0,"result":{"capabilities":{}}}"#)
        .await;
    assert_eq!(probe.ended(), [Ended::finished(0, "initialize", None)]);

    let counts = conn.counts();
    conn.finish_quiet().await;
    assert_eq!(
        counts,
        Counts {
            early_cancels: 1,
            remembered: 1,
            ..Counts::default()
        }
    );
}
