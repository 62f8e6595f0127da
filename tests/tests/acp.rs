//! ACP (current) over NDJSON: `$/cancel_request {"requestId": …}`, answered -32800 "Request cancelled".

use serde_json::json;
use tests::{scenarios, Conn, Counts, Probe, Spoken};
use tower_cancel::{dialect::Acp, CancelReason, CancelStack};

#[tokio::test(start_paused = true)]
async fn cancel_while_running_answers_request_cancelled_and_stops_the_handler() {
    scenarios::cancel_while_running(CancelStack::acp()).await;
}

#[tokio::test(start_paused = true)]
async fn a_cancel_with_meta_is_a_cancel() {
    let cancel = r#"{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":3,"_meta":{"trace":"abc"}}}"#;
    scenarios::cancel_while_running_with(CancelStack::acp(), cancel, CancelReason::peer(None))
        .await;
}

#[tokio::test(start_paused = true)]
async fn a_cancel_before_its_request_means_the_handler_never_runs() {
    let then = (
        r#"{"jsonrpc":"2.0","id":4,"method":"echo","params":[1,2]}"#,
        r#"{"jsonrpc":"2.0","id":4,"result":[1,2]}"#,
    );
    scenarios::a_cancel_before_its_request(CancelStack::acp(), &Acp::cancel_frame(3), Some(then))
        .await;
}

#[tokio::test(start_paused = true)]
async fn a_cancel_after_completion_leaves_the_reply_and_changes_nothing() {
    scenarios::a_cancel_after_completion(
        CancelStack::acp(),
        r#"{"jsonrpc":"2.0","id":3,"method":"sleep","params":{"ms":20}}"#,
        r#"{"jsonrpc":"2.0","id":3,"result":{"slept":20}}"#,
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn unknown_malformed_and_duplicate_cancels_are_ignored() {
    scenarios::bad_and_duplicate_cancels_are_ignored(
        CancelStack::acp(),
        &[
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
        ],
    )
    .await;
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
    conn.finish_counting(Counts::new(1, 1, 0)).await;
}

#[tokio::test(start_paused = true)]
async fn initialize_is_never_cancellable() {
    scenarios::initialize_is_never_cancelled(
        CancelStack::acp(),
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,"ms":50}}"#,
        &Acp::cancel_frame(0),
    )
    .await;
}
