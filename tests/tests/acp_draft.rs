//! The first ACP draft over NDJSON: `$/cancelRequest {"id": …}` behind the `cancellation.request` capability,
//! answered -32800 "Cancelled"; nothing is cancellable before `initialize` completed.

use serde_json::json;
use tests::{Conn, Counts, Ended, Probe};
use tower_cancel::CancelReason;

const CANCELLED_3: &str =
    r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32800,"message":"Cancelled"}}"#;
const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{"cancellation":{"request":true}}}}"#;
const INITIALIZED: &str = r#"{"jsonrpc":"2.0","id":0,"result":{"capabilities":{}}}"#;

/// A draft connection whose `initialize` has completed.
async fn initialized(probe: &Probe) -> Conn {
    let mut conn = Conn::acp_draft(probe);
    conn.send(INITIALIZE).await;
    conn.expect(INITIALIZED).await;
    assert!(conn.registry().session().is_initialized());
    conn
}

#[tokio::test(start_paused = true)]
async fn cancel_while_running_answers_cancelled_and_stops_the_handler() {
    let probe = Probe::new();
    let mut conn = initialized(&probe).await;
    conn.send(r#"{"jsonrpc":"2.0","id":3,"method":"hang"}"#)
        .await;
    probe.wait_started(3).await;
    // The draft's own example omits "jsonrpc"; it is tolerated.
    conn.send(r#"{"method":"$/cancelRequest","params":{"id":3}}"#)
        .await;
    conn.expect(CANCELLED_3).await;
    assert_eq!(
        probe.ended_of(3),
        Some(Ended::stopped(3, "hang", Some(CancelReason::peer(None))))
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
async fn a_cancel_before_its_request_means_the_handler_never_runs() {
    let probe = Probe::new();
    let mut conn = initialized(&probe).await;
    conn.send(r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":3}}"#)
        .await;
    conn.send(r#"{"jsonrpc":"2.0","id":3,"method":"hang"}"#)
        .await;
    conn.expect(CANCELLED_3).await;
    assert_eq!(probe.started(), 1, "only initialize ran");

    let counts = conn.counts();
    conn.finish_quiet().await;
    assert_eq!(
        counts,
        Counts {
            registered: 1,
            cancelled: 1,
            early_cancels: 1,
            ..Counts::default()
        }
    );
}

#[tokio::test(start_paused = true)]
async fn a_cancel_after_completion_leaves_the_reply_and_changes_nothing() {
    let probe = Probe::new();
    let mut conn = initialized(&probe).await;
    conn.send(r#"{"jsonrpc":"2.0","id":3,"method":"echo","params":{"done":true}}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":3,"result":{"done":true}}"#)
        .await;
    conn.send(r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":3}}"#)
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
            early_cancels: 1,
            remembered: 1,
            ..Counts::default()
        }
    );
}

#[tokio::test(start_paused = true)]
async fn unknown_malformed_and_duplicate_cancels_are_ignored() {
    let probe = Probe::new();
    let mut conn = initialized(&probe).await;
    conn.send(r#"{"jsonrpc":"2.0","id":3,"method":"hang"}"#)
        .await;
    probe.wait_started(3).await;

    conn.send_together(&[
        r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":99}}"#,
        r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":"3"}}"#,
        r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"requestId":3}}"#,
        r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":[3]}"#,
        r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":false}}"#,
        r#"{"jsonrpc":"2.0","method":"$/cancelRequest"}"#,
        r#"{"jsonrpc":"2.0","id":4,"method":"echo","params":"after the bad cancels"}"#,
    ])
    .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":4,"result":"after the bad cancels"}"#)
        .await;
    assert!(conn.registry().contains(&3.into()));
    assert!(probe.notifications().is_empty());

    let cancel = r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":3}}"#;
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

    let counts = conn.counts();
    conn.finish_quiet().await;
    assert_eq!(
        counts,
        Counts::default(),
        "nothing registered, nothing remembered"
    );
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
    assert!(!conn.registry().contains(&1.into()));

    conn.send(INITIALIZE).await;
    conn.expect(INITIALIZED).await;
    // A request that arrived before initialize stays uncancellable after it.
    conn.send(r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":1}}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":1,"result":{"slept":100}}"#)
        .await;
    // The cancel of 3 sent before initialize was not remembered: request 3 runs.
    conn.send(r#"{"jsonrpc":"2.0","id":3,"method":"echo"}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":3,"result":null}"#)
        .await;

    let counts = conn.counts();
    conn.finish_quiet().await;
    assert_eq!(
        counts,
        Counts {
            registered: 1,
            completed: 1,
            early_cancels: 1,
            remembered: 1,
            ..Counts::default()
        }
    );
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

    let counts = conn.counts();
    conn.finish_quiet().await;
    assert_eq!(
        counts,
        Counts::default(),
        "nothing registered, nothing remembered"
    );
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
        assert_eq!(
            conn.registry().session().peer_accepts_cancel(),
            accepts,
            "{params}"
        );
        let counts = conn.counts();
        conn.finish_quiet().await;
        assert_eq!(counts, Counts::default());
    }
}
