//! The first ACP draft over NDJSON: `$/cancelRequest {"id": …}` behind the `cancellation.request` capability,
//! answered -32800 "Cancelled"; nothing is cancellable before `initialize` completed.

use serde_json::json;
use tests::{scenarios, Conn, Counts, Ended, Probe, Spoken};
use tower_cancel::{dialect::AcpDraft, CancelReason, CancelStack};

const INITIALIZE: &str = tests::ACP_DRAFT_INITIALIZE.0;
const INITIALIZED: &str = tests::ACP_DRAFT_INITIALIZE.1;

#[tokio::test(start_paused = true)]
async fn cancel_while_running_answers_cancelled_and_stops_the_handler() {
    // The draft's own example omits "jsonrpc"; it is tolerated.
    let cancel = r#"{"method":"$/cancelRequest","params":{"id":3}}"#;
    scenarios::cancel_while_running_with(
        CancelStack::acp_draft(),
        cancel,
        CancelReason::peer(None),
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_cancel_before_its_request_means_the_handler_never_runs() {
    // Only initialize ran.
    scenarios::a_cancel_before_its_request(
        CancelStack::acp_draft(),
        &AcpDraft::cancel_frame(3),
        None,
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_cancel_after_completion_leaves_the_reply_and_changes_nothing() {
    scenarios::a_cancel_after_completion(
        CancelStack::acp_draft(),
        r#"{"jsonrpc":"2.0","id":3,"method":"echo","params":{"done":true}}"#,
        r#"{"jsonrpc":"2.0","id":3,"result":{"done":true}}"#,
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn unknown_malformed_and_duplicate_cancels_are_ignored() {
    scenarios::bad_and_duplicate_cancels_are_ignored(
        CancelStack::acp_draft(),
        &[
            r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":99}}"#,
            r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":"3"}}"#,
            r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"requestId":3}}"#,
            r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":[3]}"#,
            r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":false}}"#,
            r#"{"jsonrpc":"2.0","method":"$/cancelRequest"}"#,
        ],
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn initialize_is_never_cancellable_and_a_cancel_during_it_is_not_one() {
    let probe = Probe::new();
    let mut conn = Conn::acp_draft(&probe);
    conn.send(
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,"ms":50}}"#,
    )
    .await;
    probe.wait_started(0).await;
    conn.send(r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":0}}"#)
        .await;
    // Before initialize completed the method is not the draft's cancel: it goes on to the service.
    assert_eq!(
        probe.wait_notification().await,
        ("$/cancelRequest".to_owned(), json!({ "id": 0 }))
    );
    conn.expect(INITIALIZED).await;
    assert_eq!(probe.ended(), [Ended::finished(0, "initialize", None)]);

    // Nothing registered, nothing remembered.
    conn.finish_counting(Counts::default()).await;
}

#[tokio::test(start_paused = true)]
async fn nothing_is_cancellable_before_initialize_completed() {
    let probe = Probe::new();
    let mut conn = Conn::acp_draft(&probe);
    // A request and an early cancel before initialize: neither is handled by the cancel layer.
    conn.send(r#"{"jsonrpc":"2.0","id":1,"method":"sleep","params":{"ms":100}}"#)
        .await;
    probe.wait_started(1).await;
    conn.send(r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":1}}"#)
        .await;
    conn.send(r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":3}}"#)
        .await;
    assert_eq!(probe.wait_notification().await.1, json!({ "id": 1 }));
    assert_eq!(probe.wait_notification().await.1, json!({ "id": 3 }));
    assert_eq!(
        conn.registry().stats().registered,
        0,
        "request 1 is not cancellable"
    );

    conn.send(INITIALIZE).await;
    conn.expect(INITIALIZED).await;
    // A request that arrived before initialize stays uncancellable after it (the cancel finds it in flight, so
    // it is not remembered either).
    conn.send(r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":1}}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":1,"result":{"slept":100}}"#)
        .await;
    // The cancel of 3 sent before initialize was not remembered: request 3 runs.
    conn.send(r#"{"jsonrpc":"2.0","id":3,"method":"echo"}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":3,"result":null}"#)
        .await;

    conn.finish_counting(Counts::new(1, 1, 0)).await;
}

#[tokio::test(start_paused = true)]
async fn without_the_declaration_cancels_are_not_handled() {
    let probe = Probe::new();
    let mut conn = Conn::acp_draft_declared(&probe, false);
    conn.send(INITIALIZE).await;
    conn.expect(INITIALIZED).await;
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
    // An early cancel is not one either.
    conn.send(r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":4}}"#)
        .await;
    conn.send(r#"{"jsonrpc":"2.0","id":4,"method":"echo"}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":4,"result":null}"#)
        .await;
    assert_eq!(probe.notifications().len(), 2);

    // Nothing registered, nothing remembered.
    conn.finish_counting(Counts::default()).await;
}

#[tokio::test(start_paused = true)]
async fn the_peers_capability_is_recorded_from_initialize() {
    let cases = [
        (
            r#"{"protocolVersion":1,"clientCapabilities":{"cancellation":{"request":true}}}"#,
            true,
        ),
        (
            r#"{"protocolVersion":1,"agentCapabilities":{"cancellation":{"request":true}}}"#,
            true,
        ),
        (
            r#"{"protocolVersion":1,"clientCapabilities":{"cancellation":{"request":false}}}"#,
            false,
        ),
        (
            r#"{"protocolVersion":1,"clientCapabilities":{"cancellation":{}}}"#,
            false,
        ),
        (
            r#"{"protocolVersion":1,"clientCapabilities":{"fs":{"readTextFile":true}}}"#,
            false,
        ),
        (r#"{"protocolVersion":1}"#, false),
    ];
    for (params, accepts) in cases {
        let probe = Probe::new();
        let mut conn = Conn::acp_draft(&probe);
        conn.send(&format!(
            r#"{{"jsonrpc":"2.0","id":0,"method":"initialize","params":{params}}}"#
        ))
        .await;
        conn.expect(INITIALIZED).await;
        assert_eq!(conn.session().peer_accepts_cancel(), accepts, "{params}");
        conn.finish_counting(Counts::default()).await;
    }
}
