//! ACP (current) over NDJSON: `$/cancel_request {"requestId": …}`, answered -32800 "Request cancelled".

use serde_json::json;
use tests::{Conn, Counts, Ended, Probe};
use tower_cancel::CancelReason;

const CANCELLED_3: &str =
    r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32800,"message":"Request cancelled"}}"#;

#[tokio::test(start_paused = true)]
async fn cancel_while_running_answers_request_cancelled_and_stops_the_handler() {
    let probe = Probe::new();
    let mut conn = Conn::acp(&probe);
    conn.send(r#"{"jsonrpc":"2.0","id":3,"method":"hang"}"#)
        .await;
    probe.wait_started(3).await;
    conn.send(r#"{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":3}}"#)
        .await;
    conn.expect(CANCELLED_3).await;
    assert_eq!(
        probe.ended(),
        [Ended::stopped(3, "hang", Some(CancelReason::peer(None)))]
    );
    assert!(probe.notifications().is_empty());

    let counts = conn.counts();
    conn.finish_quiet().await;
    assert_eq!(
        counts,
        Counts {
            registered: 1,
            cancelled: 1,
            ..Counts::default()
        }
    );
}

#[tokio::test(start_paused = true)]
async fn a_cancel_with_meta_is_a_cancel() {
    let probe = Probe::new();
    let mut conn = Conn::acp(&probe);
    conn.send(r#"{"jsonrpc":"2.0","id":3,"method":"hang"}"#)
        .await;
    probe.wait_started(3).await;
    conn.send(r#"{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":3,"_meta":{"trace":"abc"}}}"#)
        .await;
    conn.expect(CANCELLED_3).await;
    let counts = conn.counts();
    conn.finish_quiet().await;
    assert_eq!(
        counts,
        Counts {
            registered: 1,
            cancelled: 1,
            ..Counts::default()
        }
    );
}

#[tokio::test(start_paused = true)]
async fn a_cancel_before_its_request_means_the_handler_never_runs() {
    let probe = Probe::new();
    let mut conn = Conn::acp(&probe);
    conn.send(r#"{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":3}}"#)
        .await;
    conn.send(r#"{"jsonrpc":"2.0","id":3,"method":"hang"}"#)
        .await;
    conn.expect(CANCELLED_3).await;
    conn.send(r#"{"jsonrpc":"2.0","id":4,"method":"echo","params":[1,2]}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":4,"result":[1,2]}"#)
        .await;
    assert_eq!(probe.started(), 1, "only request 4 ran");

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
    let mut conn = Conn::acp(&probe);
    conn.send(r#"{"jsonrpc":"2.0","id":3,"method":"sleep","params":{"ms":20}}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":3,"result":{"slept":20}}"#)
        .await;
    conn.send(r#"{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":3}}"#)
        .await;
    conn.send(r#"{"jsonrpc":"2.0","id":4,"method":"echo"}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":4,"result":null}"#)
        .await;

    let counts = conn.counts();
    conn.finish_quiet().await;
    assert_eq!(
        counts,
        Counts {
            registered: 2,
            completed: 2,
            cancelled: 0,
            early_cancels: 1,
            remembered: 1
        }
    );
}

#[tokio::test(start_paused = true)]
async fn unknown_malformed_and_duplicate_cancels_are_ignored() {
    let probe = Probe::new();
    let mut conn = Conn::acp(&probe);
    conn.send(r#"{"jsonrpc":"2.0","id":3,"method":"hang"}"#)
        .await;
    probe.wait_started(3).await;

    conn.send_together(&[
        // Unknown id.
        r#"{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":99}}"#,
        // Wrong id type: the string "3" is another request.
        r#"{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":"3"}}"#,
        // Wrong shapes: LSP's and the draft's field, a positional array, bad ids, nothing.
        r#"{"jsonrpc":"2.0","method":"$/cancel_request","params":{"id":3}}"#,
        r#"{"jsonrpc":"2.0","method":"$/cancel_request","params":[3]}"#,
        r#"{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":null}}"#,
        r#"{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":{"id":3}}}"#,
        r#"{"jsonrpc":"2.0","method":"$/cancel_request","params":"3"}"#,
        r#"{"jsonrpc":"2.0","method":"$/cancel_request"}"#,
        r#"{"jsonrpc":"2.0","id":4,"method":"echo","params":"after the bad cancels"}"#,
    ])
    .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":4,"result":"after the bad cancels"}"#)
        .await;
    assert!(conn.registry().contains(&3.into()));
    assert_eq!(probe.ended_of(3), None);
    assert!(probe.notifications().is_empty());

    let cancel = r#"{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":3}}"#;
    conn.send_together(&[cancel, cancel]).await;
    conn.expect(CANCELLED_3).await;
    conn.send(r#"{"jsonrpc":"2.0","id":5,"method":"echo"}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":5,"result":null}"#)
        .await;

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
async fn lsps_cancel_method_is_an_ordinary_notification_in_acp() {
    let probe = Probe::new();
    let mut conn = Conn::acp(&probe);
    conn.send(r#"{"jsonrpc":"2.0","id":3,"method":"sleep","params":{"ms":100}}"#)
        .await;
    probe.wait_started(3).await;
    conn.send(r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":3}}"#)
        .await;
    assert_eq!(
        probe.wait_notification().await,
        ("$/cancelRequest".to_owned(), json!({ "id": 3 }))
    );
    conn.expect(r#"{"jsonrpc":"2.0","id":3,"result":{"slept":100}}"#)
        .await;
    let counts = conn.counts();
    conn.finish_quiet().await;
    assert_eq!(
        counts,
        Counts {
            registered: 1,
            completed: 1,
            ..Counts::default()
        }
    );
}

#[tokio::test(start_paused = true)]
async fn initialize_is_never_cancellable() {
    let probe = Probe::new();
    let mut conn = Conn::acp(&probe);
    conn.send(
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,"ms":50}}"#,
    )
    .await;
    probe.wait_started(0).await;
    conn.send(r#"{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":0}}"#)
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
