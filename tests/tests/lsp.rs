//! LSP over `Content-Length` framing: `$/cancelRequest {"id": …}`, answered -32800 "Request cancelled".

use tests::{Conn, Counts, End, Ended, Probe};
use tower_cancel::CancelReason;

const CANCELLED_7: &str =
    r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32800,"message":"Request cancelled"}}"#;

#[tokio::test(start_paused = true)]
async fn cancel_while_running_answers_request_cancelled_and_stops_the_handler() {
    let probe = Probe::new();
    let mut conn = Conn::lsp(&probe);
    conn.send(r#"{"jsonrpc":"2.0","id":7,"method":"hang"}"#)
        .await;
    probe.wait_started(7).await;
    assert!(conn.registry().contains(&7.into()));

    conn.send(r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":7}}"#)
        .await;
    conn.expect(CANCELLED_7).await;
    assert_eq!(
        probe.ended(),
        [Ended::stopped(7, "hang", Some(CancelReason::peer(None)))]
    );
    assert!(
        conn.registry().is_empty(),
        "removed as soon as it is answered"
    );
    assert!(
        probe.notifications().is_empty(),
        "cancels never reach the service"
    );

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
async fn string_ids_are_cancelled_too() {
    let probe = Probe::new();
    let mut conn = Conn::lsp(&probe);
    conn.send(r#"{"jsonrpc":"2.0","id":"req-1","method":"hang"}"#)
        .await;
    probe.wait_started("req-1").await;
    conn.send(r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":"req-1"}}"#)
        .await;
    conn.expect(
        r#"{"jsonrpc":"2.0","id":"req-1","error":{"code":-32800,"message":"Request cancelled"}}"#,
    )
    .await;
    assert_eq!(probe.ended_of("req-1").unwrap().end, End::Stopped);
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
    let mut conn = Conn::lsp(&probe);
    conn.send(r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":7}}"#)
        .await;
    conn.send(r#"{"jsonrpc":"2.0","id":7,"method":"hang"}"#)
        .await;
    conn.expect(CANCELLED_7).await;
    // The connection goes on, and the remembered cancel was used up by request 7.
    conn.send(r#"{"jsonrpc":"2.0","id":8,"method":"echo","params":{"x":1}}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":8,"result":{"x":1}}"#)
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
    let mut conn = Conn::lsp(&probe);
    conn.send(r#"{"jsonrpc":"2.0","id":7,"method":"sleep","params":{"ms":10}}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":7,"result":{"slept":10}}"#)
        .await;
    conn.send(r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":7}}"#)
        .await;
    conn.send(r#"{"jsonrpc":"2.0","id":8,"method":"echo"}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":8,"result":null}"#)
        .await;
    assert_eq!(
        probe.ended(),
        [
            Ended::finished(7, "sleep", None),
            Ended::finished(8, "echo", None)
        ]
    );

    let counts = conn.counts();
    conn.finish_quiet().await;
    // The registry cannot tell a late cancel from an early one: it remembers it (bounded), in case a request 7
    // is still on its way. Ids are never reused by a conforming peer, so that memory is never used.
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
    let mut conn = Conn::lsp(&probe);
    conn.send(r#"{"jsonrpc":"2.0","id":7,"method":"hang"}"#)
        .await;
    probe.wait_started(7).await;

    conn.send_together(&[
        // Unknown id.
        r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":99}}"#,
        // Wrong id type: the string "7" is not the number 7.
        r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":"7"}}"#,
        // Wrong shapes.
        r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"requestId":7}}"#,
        r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":[7]}"#,
        r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":true}}"#,
        r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":7.5}}"#,
        r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":null}}"#,
        r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{}}"#,
        r#"{"jsonrpc":"2.0","method":"$/cancelRequest"}"#,
        r#"{"jsonrpc":"2.0","id":8,"method":"echo","params":"after the bad cancels"}"#,
    ])
    .await;
    // The next frame is the reply to 8: none of the cancels was answered, and 7 is still running.
    conn.expect(r#"{"jsonrpc":"2.0","id":8,"result":"after the bad cancels"}"#)
        .await;
    assert!(conn.registry().contains(&7.into()));
    assert_eq!(probe.ended_of(7), None);
    assert!(
        probe.notifications().is_empty(),
        "malformed cancels are consumed, not passed on"
    );

    // Two cancels for the same request, back to back: one reply.
    let cancel = r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":7}}"#;
    conn.send_together(&[cancel, cancel]).await;
    conn.expect(CANCELLED_7).await;
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
    // Remembered: 99, "7", and the second cancel of 7 (7 had been answered and removed by then).
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
async fn initialize_is_never_cancellable() {
    let probe = Probe::new();
    let mut conn = Conn::lsp(&probe);
    conn.send(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"ms":50}}"#)
        .await;
    probe.wait_started(1).await;
    conn.send(r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":1}}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":1,"result":{"capabilities":{}}}"#)
        .await;
    assert_eq!(probe.ended(), [Ended::finished(1, "initialize", None)]);

    let counts = conn.counts();
    conn.finish_quiet().await;
    assert_eq!(
        counts,
        Counts {
            registered: 0,
            early_cancels: 1,
            remembered: 1,
            ..Counts::default()
        }
    );
}

#[tokio::test(start_paused = true)]
async fn other_requests_in_flight_are_not_touched_by_a_cancel() {
    let probe = Probe::new();
    let mut conn = Conn::lsp(&probe);
    conn.send(r#"{"jsonrpc":"2.0","id":1,"method":"sleep","params":{"ms":100}}"#)
        .await;
    conn.send(r#"{"jsonrpc":"2.0","id":7,"method":"hang"}"#)
        .await;
    probe.wait_started(1).await;
    probe.wait_started(7).await;
    conn.send(r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":7}}"#)
        .await;
    conn.expect(CANCELLED_7).await;
    conn.expect(r#"{"jsonrpc":"2.0","id":1,"result":{"slept":100}}"#)
        .await;
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
async fn completion_racing_a_cancel_gives_exactly_one_reply() {
    // The handler finishes at 100 ms; the cancel arrives a little before, at the same instant, or a little after.
    // Whoever reaches the request's lifecycle first decides the one reply.
    for (cancel_after_ms, expected) in [
        (99, Some(CANCELLED_7)),
        (100, None),
        (
            101,
            Some(r#"{"jsonrpc":"2.0","id":7,"result":{"slept":100}}"#),
        ),
    ] {
        let probe = Probe::new();
        let mut conn = Conn::lsp(&probe);
        conn.send(r#"{"jsonrpc":"2.0","id":7,"method":"sleep","params":{"ms":100}}"#)
            .await;
        probe.wait_started(7).await;
        tokio::time::sleep(std::time::Duration::from_millis(cancel_after_ms)).await;
        conn.send(r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":7}}"#)
            .await;
        conn.send(r#"{"jsonrpc":"2.0","id":8,"method":"echo"}"#)
            .await;
        let mut replies = Vec::new();
        loop {
            let reply = conn.recv().await;
            if reply == r#"{"jsonrpc":"2.0","id":8,"result":null}"# {
                break;
            }
            replies.push(reply);
        }
        assert_eq!(replies.len(), 1, "{cancel_after_ms} ms: {replies:?}");
        if let Some(expected) = expected {
            assert_eq!(replies[0], expected, "{cancel_after_ms} ms");
        } else {
            assert!(
                [
                    CANCELLED_7,
                    r#"{"jsonrpc":"2.0","id":7,"result":{"slept":100}}"#
                ]
                .contains(&replies[0].as_str()),
                "{replies:?}"
            );
        }
        let counts = conn.counts();
        conn.finish_quiet().await;
        assert_eq!(counts.registered, 2);
        assert_eq!(counts.completed + counts.cancelled, 2);
    }
}

#[tokio::test(start_paused = true)]
async fn a_cancel_reaches_only_requests_of_its_own_connection() {
    let probe = Probe::new();
    let mut a = Conn::lsp(&probe);
    let mut b = Conn::lsp(&probe);
    a.send(r#"{"jsonrpc":"2.0","id":7,"method":"sleep","params":{"ms":100}}"#)
        .await;
    probe.wait_started(7).await;
    b.send(r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":7}}"#)
        .await;
    b.send(r#"{"jsonrpc":"2.0","id":1,"method":"echo"}"#).await;
    b.expect(r#"{"jsonrpc":"2.0","id":1,"result":null}"#).await;
    a.expect(r#"{"jsonrpc":"2.0","id":7,"result":{"slept":100}}"#)
        .await;
    let (counts_a, counts_b) = (a.counts(), b.counts());
    a.finish_quiet().await;
    b.finish_quiet().await;
    assert_eq!(
        counts_a,
        Counts {
            registered: 1,
            completed: 1,
            ..Counts::default()
        }
    );
    assert_eq!(
        counts_b,
        Counts {
            registered: 1,
            completed: 1,
            early_cancels: 1,
            remembered: 1,
            ..Counts::default()
        }
    );
}
