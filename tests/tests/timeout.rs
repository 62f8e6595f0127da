//! `TimeoutLayer` inside the stack (`CancelStack::…().timeouts(…)`), and tower's own timeout layer below it: a
//! request's deadline passing cancels it with reason Timeout, through the same path as a peer's cancel, and it is
//! answered the dialect's way (-32800 for LSP and ACP, "Cancelled" for the ACP draft, -32001 for MCP).

use std::time::Duration;

use serde_json::json;
use tests::{assert_about, ms, Conn, Counts, End, Ended, Probe, Spoken};
use tokio::time::Instant;
use tower::ServiceBuilder;
use tower_cancel::{
    dialect::{Lsp, Mcp},
    timeout::TimeoutLayer,
    CancelReason, CancelStack,
};
use tower_cancel_io::{Framing, Server};

const LSP_CANCELLED_7: &str =
    r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32800,"message":"Request cancelled"}}"#;
const MCP_TIMED_OUT_7: &str =
    r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32001,"message":"Request timed out"}}"#;

const HANG_7: &str = r#"{"jsonrpc":"2.0","id":7,"method":"hang"}"#;

fn lsp(probe: &Probe, timeouts: TimeoutLayer) -> Conn {
    Conn::stack(CancelStack::lsp().timeouts(timeouts), probe)
}

fn mcp(probe: &Probe, timeouts: TimeoutLayer) -> Conn {
    Conn::stack(CancelStack::mcp().timeouts(timeouts), probe)
}

/// Send request 7 (`hang`), check it times out after exactly `after` with `reply`, that its handler was stopped
/// with reason Timeout, that its context showed the deadline, and that the tables are empty.
async fn times_out(conn: Conn, probe: &Probe, after: Duration, reply: &str) {
    times_out_showing(conn, probe, after, reply, true).await;
}

/// [`times_out`], where the context shows the deadline only if `shown` (tower's own timeout layer cannot show it).
async fn times_out_showing(
    mut conn: Conn,
    probe: &Probe,
    after: Duration,
    reply: &str,
    shown: bool,
) {
    let sent = Instant::now();
    conn.send(HANG_7).await;
    probe.wait_started(7).await;
    assert_eq!(probe.deadline_of(7), shown.then_some(sent + after));
    assert!(conn.registry().contains(&7.into()));
    conn.expect(reply).await;
    assert_about(sent.elapsed(), after);
    assert_eq!(
        probe.ended_of(7),
        Some(Ended::stopped(7, "hang", Some(CancelReason::Timeout)))
    );
    assert!(
        conn.registry().is_empty(),
        "removed as soon as it is answered"
    );
    let registered = conn.counts().registered;
    conn.finish_counting(Counts::new(registered, 0, 1)).await;
}

#[tokio::test(start_paused = true)]
async fn lsp_the_default_timeout_answers_request_cancelled() {
    let probe = Probe::new();
    let conn = lsp(&probe, TimeoutLayer::new(ms(1000)));
    times_out(conn, &probe, ms(1000), LSP_CANCELLED_7).await;
}

#[tokio::test(start_paused = true)]
async fn acp_the_default_timeout_answers_request_cancelled() {
    let probe = Probe::new();
    let conn = Conn::stack(CancelStack::acp().timeout(ms(1000)), &probe);
    times_out(conn, &probe, ms(1000), LSP_CANCELLED_7).await;
}

#[tokio::test(start_paused = true)]
async fn acp_draft_the_default_timeout_answers_cancelled() {
    let probe = Probe::new();
    let conn = Conn::ready(CancelStack::acp_draft().timeout(ms(1000)), &probe).await;
    times_out(
        conn,
        &probe,
        ms(1000),
        r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32800,"message":"Cancelled"}}"#,
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn mcp_the_default_timeout_answers_request_timed_out() {
    // A server-side timeout is not the peer's cancel: the client is still waiting, so it gets an answer.
    let probe = Probe::new();
    let conn = mcp(&probe, TimeoutLayer::new(ms(1000)));
    times_out(conn, &probe, ms(1000), MCP_TIMED_OUT_7).await;
}

#[tokio::test(start_paused = true)]
async fn a_per_method_timeout_wins_over_the_default() {
    let probe = Probe::new();
    let mut conn = lsp(
        &probe,
        TimeoutLayer::new(ms(10_000)).method("hang", ms(1000)),
    );
    let sent = Instant::now();
    conn.send(HANG_7).await;
    // Another method gets the default: it may take longer than `hang`'s timeout.
    conn.send(r#"{"jsonrpc":"2.0","id":8,"method":"sleep","params":{"ms":5000}}"#)
        .await;
    conn.send(r#"{"jsonrpc":"2.0","id":9,"method":"deadline"}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":9,"result":{"deadline_ms":10000}}"#)
        .await;
    conn.expect(LSP_CANCELLED_7).await;
    assert_about(sent.elapsed(), ms(1000));
    conn.expect(r#"{"jsonrpc":"2.0","id":8,"result":{"slept":5000}}"#)
        .await;
    assert_about(sent.elapsed(), ms(5000));
    assert_eq!(probe.deadline_of(7), Some(sent + ms(1000)));
    assert_eq!(probe.deadline_of(8), Some(sent + ms(10_000)));
    assert_eq!(
        probe.ended(),
        [
            Ended::finished(9, "deadline", None),
            Ended::stopped(7, "hang", Some(CancelReason::Timeout)),
            Ended::finished(8, "sleep", None),
        ]
    );

    conn.finish_counting(Counts::new(3, 2, 1)).await;
}

#[tokio::test(start_paused = true)]
async fn a_requests_own_timeout_may_shorten_the_servers_limits_but_never_extend_them() {
    let probe = Probe::new();
    let mut conn = mcp(
        &probe,
        TimeoutLayer::new(ms(10_000))
            .method("hang", ms(1000))
            .from_meta("timeoutMs"),
    );
    let sent = Instant::now();
    conn.send_together(&[
        // Shorter than the method's timeout.
        r#"{"jsonrpc":"2.0","id":1,"method":"hang","params":{"_meta":{"timeoutMs":250}}}"#,
        // Longer than the method's timeout: capped at it (a peer cannot extend the server's limits).
        r#"{"jsonrpc":"2.0","id":2,"method":"hang","params":{"_meta":{"timeoutMs":3000}}}"#,
        // Not a number of milliseconds: ignored, the method's timeout applies.
        r#"{"jsonrpc":"2.0","id":3,"method":"hang","params":{"_meta":{"timeoutMs":"250"}}}"#,
        // Another field of _meta: ignored too.
        r#"{"jsonrpc":"2.0","id":4,"method":"hang","params":{"_meta":{"timeout":250}}}"#,
        // Over the default: capped at it.
        r#"{"jsonrpc":"2.0","id":5,"method":"deadline","params":{"_meta":{"timeoutMs":42000}}}"#,
    ])
    .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":5,"result":{"deadline_ms":10000}}"#)
        .await;
    conn.expect(
        r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32001,"message":"Request timed out"}}"#,
    )
    .await;
    assert_about(sent.elapsed(), ms(250));
    let at_1s: Vec<_> = vec![conn.recv().await, conn.recv().await, conn.recv().await];
    assert_about(sent.elapsed(), ms(1000));
    assert_eq!(
        tests::set_of(at_1s),
        tests::set_of([
            r#"{"jsonrpc":"2.0","id":2,"error":{"code":-32001,"message":"Request timed out"}}"#,
            r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32001,"message":"Request timed out"}}"#,
            r#"{"jsonrpc":"2.0","id":4,"error":{"code":-32001,"message":"Request timed out"}}"#,
        ])
    );
    for (id, after) in [(1, 250), (2, 1000), (3, 1000), (4, 1000), (5, 10_000)] {
        assert_eq!(
            probe.deadline_of(id),
            Some(sent + ms(after)),
            "request {id}"
        );
    }
    for id in 1..=4 {
        assert_eq!(
            probe.ended_of(id),
            Some(Ended::stopped(id, "hang", Some(CancelReason::Timeout)))
        );
    }

    conn.finish_counting(Counts::new(5, 1, 4)).await;
}

#[tokio::test(start_paused = true)]
async fn without_from_meta_a_requests_timeout_field_is_ignored() {
    let probe = Probe::new();
    let mut conn = lsp(&probe, TimeoutLayer::new(ms(1000)));
    let sent = Instant::now();
    conn.send(r#"{"jsonrpc":"2.0","id":7,"method":"hang","params":{"_meta":{"timeoutMs":250}}}"#)
        .await;
    conn.expect(LSP_CANCELLED_7).await;
    assert_about(sent.elapsed(), ms(1000));
    assert_eq!(
        probe.ended(),
        [Ended::stopped(7, "hang", Some(CancelReason::Timeout))]
    );
    conn.finish_counting(Counts::new(1, 0, 1)).await;
}

#[tokio::test(start_paused = true)]
async fn no_deadline_without_a_default_or_a_matching_rule() {
    let probe = Probe::new();
    let mut conn = lsp(
        &probe,
        TimeoutLayer::none()
            .method("other", ms(10))
            .from_meta("timeoutMs"),
    );
    conn.send(r#"{"jsonrpc":"2.0","id":1,"method":"deadline"}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":1,"result":{"deadline_ms":null}}"#)
        .await;
    conn.send(r#"{"jsonrpc":"2.0","id":2,"method":"sleep","params":{"ms":600000}}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":2,"result":{"slept":600000}}"#)
        .await;
    assert_eq!(probe.deadline_of(2), None);
    conn.finish_counting(Counts::new(2, 2, 0)).await;
}

#[tokio::test(start_paused = true)]
async fn a_request_that_completes_in_time_is_answered_and_nothing_happens_at_its_deadline() {
    for mcp_dialect in [false, true] {
        let probe = Probe::new();
        let mut conn = if mcp_dialect {
            mcp(&probe, TimeoutLayer::new(ms(1000)))
        } else {
            lsp(&probe, TimeoutLayer::new(ms(1000)))
        };
        let sent = Instant::now();
        conn.send(r#"{"jsonrpc":"2.0","id":7,"method":"sleep","params":{"ms":999}}"#)
            .await;
        conn.expect(r#"{"jsonrpc":"2.0","id":7,"result":{"slept":999}}"#)
            .await;
        assert_about(sent.elapsed(), ms(999));
        // Well past the deadline: nothing was written (the next frame is the reply to a later request).
        tokio::time::sleep(ms(5000)).await;
        assert!(replies_before_echo(&mut conn).await.is_empty());
        assert_eq!(
            probe.ended(),
            [
                Ended::finished(7, "sleep", None),
                Ended::finished(99, "echo", None)
            ]
        );
        conn.finish_counting(Counts::new(2, 2, 0)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_timeout_of_duration_max_is_practically_none() {
    // `Duration::MAX` is a natural way to say "no limit"; it used to overflow the deadline's `Instant` and panic
    // in every request (each one answered -32603).
    let probe = Probe::new();
    let mut conn = lsp(
        &probe,
        TimeoutLayer::new(Duration::MAX).reset_on_progress(Duration::MAX),
    );
    let sent = Instant::now();
    conn.send(r#"{"jsonrpc":"2.0","id":1,"method":"sleep","params":{"ms":600000}}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":1,"result":{"slept":600000}}"#)
        .await;
    let deadline = probe.deadline_of(1).expect("a deadline");
    assert!(
        deadline > sent + Duration::from_secs(10 * 365 * 24 * 3600),
        "{deadline:?}"
    );
    assert_eq!(probe.ended(), [Ended::finished(1, "sleep", None)]);
    conn.finish_counting(Counts::new(1, 1, 0)).await;
}

#[tokio::test(start_paused = true)]
async fn notifications_never_time_out() {
    let probe = Probe::new();
    let mut conn = mcp(&probe, TimeoutLayer::new(ms(100)).from_meta("timeoutMs"));
    conn.send(r#"{"jsonrpc":"2.0","method":"slow/notification","params":{"ms":10000,"_meta":{"timeoutMs":1}}}"#)
        .await;
    let note = probe.wait_notification().await;
    assert_eq!(note.0, "slow/notification");
    tokio::time::sleep(ms(10_001)).await;
    assert_eq!(
        probe.notifications_done(),
        [(
            "slow/notification".to_owned(),
            json!({"ms":10000,"_meta":{"timeoutMs":1}})
        )],
        "ran to its end"
    );
    // Notifications are never registered.
    conn.finish_counting(Counts::default()).await;
}

#[tokio::test(start_paused = true)]
async fn initialize_never_times_out() {
    // `initialize` is never cancellable (invariant 7), and a timeout is a cancellation: it gets no deadline, its
    // token never fires, and it is answered when its handler is done, however long that takes.
    let probe = Probe::new();
    let mut conn = lsp(&probe, TimeoutLayer::new(ms(100)));
    let sent = Instant::now();
    conn.send(r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"ms":1000}}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":0,"result":{"capabilities":{}}}"#)
        .await;
    assert_about(sent.elapsed(), ms(1000));
    assert_eq!(probe.deadline_of(0), None);
    assert_eq!(probe.ended(), [Ended::finished(0, "initialize", None)]);
    // The requests after it time out as usual.
    times_out(conn, &probe, ms(100), LSP_CANCELLED_7).await;
}

#[tokio::test(start_paused = true)]
async fn acp_draft_nothing_times_out_before_initialize() {
    // Before `initialize` nothing is cancellable in the draft, so nothing gets a deadline: a cooperative handler
    // never sees its token fire, and answers in full.
    let probe = Probe::new();
    let mut conn = Conn::stack(
        CancelStack::acp_draft()
            .timeout(ms(100))
            .cooperative(ms(500)),
        &probe,
    );
    conn.send(r#"{"jsonrpc":"2.0","id":1,"method":"sleep","params":{"ms":1000}}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":1,"result":{"slept":1000}}"#)
        .await;
    assert_eq!(probe.deadline_of(1), None);
    assert_eq!(probe.ended(), [Ended::finished(1, "sleep", None)]);
    // Nothing registered.
    conn.finish_counting(Counts::default()).await;
}

/// The replies written before the reply to a later `echo` (id 99).
async fn replies_before_echo(conn: &mut Conn) -> Vec<String> {
    let (echo, echoed) = (
        r#"{"jsonrpc":"2.0","id":99,"method":"echo"}"#,
        r#"{"jsonrpc":"2.0","id":99,"result":null}"#,
    );
    conn.replies_until(echo, echoed).await
}

#[tokio::test(start_paused = true)]
async fn a_timeout_racing_completion_at_the_same_instant_gives_exactly_one_reply() {
    for mcp_dialect in [false, true] {
        let probe = Probe::new();
        let (mut conn, cancelled) = if mcp_dialect {
            (mcp(&probe, TimeoutLayer::new(ms(100))), MCP_TIMED_OUT_7)
        } else {
            (lsp(&probe, TimeoutLayer::new(ms(100))), LSP_CANCELLED_7)
        };
        let result = r#"{"jsonrpc":"2.0","id":7,"result":{"slept":100}}"#;
        conn.send(r#"{"jsonrpc":"2.0","id":7,"method":"sleep","params":{"ms":100}}"#)
            .await;
        probe.wait_started(7).await;
        tokio::time::sleep(ms(200)).await;
        let replies = replies_before_echo(&mut conn).await;
        assert_eq!(replies.len(), 1, "{replies:?}");
        let counts = conn.counts();
        // The outcome, the handler's view and the counters agree, whichever won. (Today the completion does: the
        // timeout layer polls the handler before its timer.)
        let completed = replies[0] == result;
        if completed {
            assert_eq!(probe.ended_of(7), Some(Ended::finished(7, "sleep", None)));
        } else {
            assert_eq!(replies[0], cancelled);
            assert_eq!(
                probe.ended_of(7).map(|e| e.reason),
                Some(Some(CancelReason::Timeout))
            );
        }
        conn.finish_quiet().await;
        let cancelled = u64::from(!completed);
        assert_eq!(counts, Counts::new(2, 2 - cancelled, cancelled));
    }
}

/// Request 7 (`hang`, a deadline of 1 s) is cancelled by the peer (`cancel`) at 500 ms and gets the dialect's
/// answer to that (if any); the handler sees the peer's `reason`, and at the deadline nothing more is written.
async fn a_peer_cancel_before_the_deadline<D: Spoken>(
    stack: CancelStack<D>,
    cancel: &str,
    reason: CancelReason,
) {
    let probe = Probe::new();
    let mut conn = Conn::stack(stack.timeout(ms(1000)), &probe);
    conn.send(HANG_7).await;
    probe.wait_started(7).await;
    tokio::time::sleep(ms(500)).await;
    conn.send(cancel).await;
    if let Some(reply) = D::cancelled_frame(7) {
        conn.expect(&reply).await;
    }
    tokio::time::sleep(ms(2000)).await;
    assert!(replies_before_echo(&mut conn).await.is_empty());
    assert_eq!(
        probe.ended_of(7),
        Some(Ended::stopped(7, "hang", Some(reason)))
    );
    conn.finish_counting(Counts::new(2, 1, 1)).await;
}

#[tokio::test(start_paused = true)]
async fn a_peer_cancel_before_the_deadline_wins_and_the_deadline_then_does_nothing() {
    // MCP makes the winner visible: the peer's cancel gets no reply, the timeout would get -32001.
    a_peer_cancel_before_the_deadline(
        CancelStack::mcp(),
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7,"reason":"bored"}}"#,
        CancelReason::peer(Some("bored".into())),
    )
    .await;
    // LSP: one -32800, none at the deadline.
    a_peer_cancel_before_the_deadline(
        CancelStack::lsp(),
        &Lsp::cancel_frame(7),
        CancelReason::peer(None),
    )
    .await;
}

/// Request 7 (`hang`) times out at its deadline (1 s) with `timed_out`; the peer's `cancel` comes after it and
/// nothing more is written. The late cancel finds no request 7 in flight: it is remembered (bounded), like any
/// cancel after completion.
async fn the_deadline_before_a_peer_cancel<D: Spoken>(
    stack: CancelStack<D>,
    timed_out: &str,
    cancel: &str,
) {
    let probe = Probe::new();
    let mut conn = Conn::stack(stack.timeout(ms(1000)), &probe);
    conn.send(HANG_7).await;
    conn.expect(timed_out).await;
    conn.send(cancel).await;
    assert!(replies_before_echo(&mut conn).await.is_empty());
    assert_eq!(
        probe.ended_of(7),
        Some(Ended::stopped(7, "hang", Some(CancelReason::Timeout)))
    );
    conn.finish_counting(Counts::new(2, 1, 1).early(1, 1)).await;
}

#[tokio::test(start_paused = true)]
async fn the_deadline_before_a_peer_cancel_wins_and_the_late_cancel_does_nothing() {
    the_deadline_before_a_peer_cancel(
        CancelStack::mcp(),
        MCP_TIMED_OUT_7,
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7,"reason":"timed out here too"}}"#,
    )
    .await;
    the_deadline_before_a_peer_cancel(CancelStack::lsp(), LSP_CANCELLED_7, &Lsp::cancel_frame(7))
        .await;
}

#[tokio::test(start_paused = true)]
async fn a_peer_cancel_at_the_deadline_instant_gives_at_most_the_one_reply_of_the_winner() {
    for mcp_dialect in [false, true] {
        let probe = Probe::new();
        let (mut conn, cancel, timed_out, peer_cancelled): (_, _, _, &[&str]) = if mcp_dialect {
            (
                mcp(&probe, TimeoutLayer::new(ms(1000))),
                Mcp::cancel_frame(7),
                MCP_TIMED_OUT_7,
                &[],
            )
        } else {
            (
                lsp(&probe, TimeoutLayer::new(ms(1000))),
                Lsp::cancel_frame(7),
                LSP_CANCELLED_7,
                &[LSP_CANCELLED_7],
            )
        };
        conn.send(HANG_7).await;
        probe.wait_started(7).await;
        tokio::time::sleep(ms(1000)).await;
        conn.send(&cancel).await;
        let replies = replies_before_echo(&mut conn).await;
        let ended = probe.ended_of(7).expect("stopped");
        assert_eq!(ended.end, End::Stopped);
        let counts = conn.counts();
        match ended.reason {
            // The peer won: its dialect's reply to a peer's cancel.
            Some(CancelReason::Peer { .. }) => {
                assert_eq!(replies, peer_cancelled);
                assert_eq!((counts.early_cancels, counts.remembered), (0, 0));
            }
            // The deadline won (today's order: the timer fires before the cancel is read): the timeout's reply,
            // and the cancel found the request settled (ignored) or already gone (remembered).
            Some(CancelReason::Timeout) => {
                assert_eq!(replies, [timed_out]);
                assert!(counts.early_cancels <= 1);
                assert_eq!(counts.remembered as u64, counts.early_cancels);
            }
            other => panic!("{other:?}"),
        }
        conn.finish_quiet().await;
        assert_eq!(
            (counts.registered, counts.completed, counts.cancelled),
            (2, 1, 1)
        );
    }
}

#[tokio::test(start_paused = true)]
async fn cooperative_lsp_a_partial_result_within_the_grace_answers_a_timeout() {
    let probe = Probe::new();
    let mut conn = Conn::stack(
        CancelStack::lsp().timeout(ms(1000)).cooperative(ms(500)),
        &probe,
    );
    let sent = Instant::now();
    conn.send(r#"{"jsonrpc":"2.0","id":7,"method":"partial"}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":7,"result":{"partial":true}}"#)
        .await;
    assert_about(sent.elapsed(), ms(1000));
    assert_eq!(
        probe.ended(),
        [Ended::finished(7, "partial", Some(CancelReason::Timeout))]
    );
    // A handler that ignores its token is dropped after the grace: -32800 at deadline + grace.
    let sent = Instant::now();
    conn.send(r#"{"jsonrpc":"2.0","id":8,"method":"hang"}"#)
        .await;
    conn.expect(
        r#"{"jsonrpc":"2.0","id":8,"error":{"code":-32800,"message":"Request cancelled"}}"#,
    )
    .await;
    assert_about(sent.elapsed(), ms(1500));
    assert_eq!(
        probe.ended_of(8),
        Some(Ended::stopped(8, "hang", Some(CancelReason::Timeout)))
    );
    conn.finish_counting(Counts::new(2, 0, 2)).await;
}

#[tokio::test(start_paused = true)]
async fn cooperative_mcp_a_timeout_answers_request_timed_out_not_the_partial_result() {
    let probe = Probe::new();
    let mut conn = Conn::stack(
        CancelStack::mcp().timeout(ms(1000)).cooperative(ms(500)),
        &probe,
    );
    let sent = Instant::now();
    conn.send(r#"{"jsonrpc":"2.0","id":7,"method":"partial"}"#)
        .await;
    conn.expect(MCP_TIMED_OUT_7).await;
    // Answered as soon as the handler wound down, not after the grace.
    assert_about(sent.elapsed(), ms(1000));
    assert_eq!(
        probe.ended(),
        [Ended::finished(7, "partial", Some(CancelReason::Timeout))]
    );
    conn.finish_counting(Counts::new(1, 0, 1)).await;
}

#[tokio::test(start_paused = true)]
async fn lsp_server_cancellable_methods_get_server_cancelled_with_retrigger_on_timeout() {
    let probe = Probe::new();
    let mut conn = Conn::serve(
        CancelStack::new(Lsp.server_cancellable(["textDocument/diagnostic"])).timeout(ms(1000)),
        &probe,
        Framing::ContentLength,
    );
    let sent = Instant::now();
    conn.send_together(&[
        r#"{"jsonrpc":"2.0","id":1,"method":"textDocument/diagnostic","params":{"hang":true}}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"textDocument/hover","params":{"hang":true}}"#,
    ])
    .await;
    let replies = vec![conn.recv().await, conn.recv().await];
    assert_about(sent.elapsed(), ms(1000));
    assert_eq!(
        tests::set_of(replies),
        tests::set_of([
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32802,"message":"Server cancelled the request","data":{"retriggerRequest":true}}}"#,
            r#"{"jsonrpc":"2.0","id":2,"error":{"code":-32800,"message":"Request cancelled"}}"#,
        ])
    );
    assert_eq!(
        probe.ended_of(1),
        Some(Ended::stopped(
            1,
            "textDocument/diagnostic",
            Some(CancelReason::Timeout)
        ))
    );
    assert_eq!(
        probe.ended_of(2),
        Some(Ended::stopped(
            2,
            "textDocument/hover",
            Some(CancelReason::Timeout)
        ))
    );

    // The client's own cancel of a diagnostic is not the server's: -32800.
    conn.send(
        r#"{"jsonrpc":"2.0","id":3,"method":"textDocument/diagnostic","params":{"hang":true}}"#,
    )
    .await;
    probe.wait_started(3).await;
    conn.send(r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":3}}"#)
        .await;
    conn.expect(
        r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32800,"message":"Request cancelled"}}"#,
    )
    .await;
    conn.finish_counting(Counts::new(3, 0, 3)).await;
}

/// The stack with tower's own timeout layer below it.
fn with_towers_timeout<D: Spoken>(probe: &Probe, stack: CancelStack<D>) -> Conn {
    let service = ServiceBuilder::new()
        .layer(stack)
        .layer(tower::timeout::TimeoutLayer::new(ms(1000)))
        .service(probe.service());
    Conn::start(Server::new(service), D::FRAMING)
}

#[tokio::test(start_paused = true)]
async fn towers_own_timeout_below_the_stack_is_answered_as_a_timeout() {
    let probe = Probe::new();
    let conn = with_towers_timeout(&probe, CancelStack::lsp());
    times_out_showing(conn, &probe, ms(1000), LSP_CANCELLED_7, false).await;

    let probe = Probe::new();
    let conn = with_towers_timeout(&probe, CancelStack::mcp());
    times_out_showing(conn, &probe, ms(1000), MCP_TIMED_OUT_7, false).await;
}

/// `initialize` can never be cancelled, so tower's timeout firing on it is an ordinary failure (-32603), never
/// the dialect's cancelled reply.
#[tokio::test(start_paused = true)]
async fn initialize_timed_out_by_towers_timeout_is_a_failure_not_a_cancel() {
    async fn initialize<D: Spoken>(stack: CancelStack<D>) {
        let probe = Probe::new();
        let mut conn = with_towers_timeout(&probe, stack);
        let sent = Instant::now();
        conn.send(r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"ms":5000}}"#)
            .await;
        conn.expect(r#"{"jsonrpc":"2.0","id":0,"error":{"code":-32603,"message":"Internal error: request timed out"}}"#)
            .await;
        assert_about(sent.elapsed(), ms(1000));
        assert_eq!(
            probe.ended_of(0),
            Some(Ended::stopped(0, "initialize", None)),
            "never cancelled"
        );
        conn.finish_counting(Counts::default()).await;
    }
    initialize(CancelStack::lsp()).await;
    initialize(CancelStack::mcp()).await;
}

/// tower's timeout firing inside the cooperative grace after the peer's cancel: the peer's cancel settled the
/// request, so it is answered as that cancel (MCP: nothing; LSP: -32800), and the handler saw reason Peer.
#[tokio::test(start_paused = true)]
async fn towers_timeout_inside_the_grace_keeps_the_peers_cancel() {
    async fn cancelled_then_timed_out<D: Spoken>(stack: CancelStack<D>) -> (Vec<String>, Probe) {
        let probe = Probe::new();
        let mut conn = with_towers_timeout(&probe, stack.cooperative(ms(5000)));
        conn.send(&format!(
            r#"{{"jsonrpc":"2.0","id":{},"method":"hang"}}"#,
            D::ID
        ))
        .await;
        probe.wait_started(D::ID).await;
        conn.send(&D::cancel_frame(D::ID)).await;
        // tower's timeout fires 1 s after the call, inside the 5 s grace.
        tokio::time::sleep(ms(1500)).await;
        let replies = conn
            .replies_until(
                r#"{"jsonrpc":"2.0","id":99,"method":"echo"}"#,
                r#"{"jsonrpc":"2.0","id":99,"result":null}"#,
            )
            .await;
        conn.finish_counting(Counts::new(2, 1, 1)).await;
        (replies, probe)
    }
    let (replies, probe) = cancelled_then_timed_out(CancelStack::mcp()).await;
    assert_eq!(replies, Vec::<String>::new());
    assert_eq!(
        probe.ended_of(7),
        Some(Ended::stopped(7, "hang", Some(CancelReason::peer(None))))
    );
    let (replies, probe) = cancelled_then_timed_out(CancelStack::lsp()).await;
    assert_eq!(replies, [LSP_CANCELLED_7]);
    assert_eq!(
        probe.ended_of(7),
        Some(Ended::stopped(7, "hang", Some(CancelReason::peer(None))))
    );
    // Where the reason shows on the wire: an LSP method that opted in to ServerCancelled gets -32802 for a timeout,
    // but this request was cancelled by the peer: -32800.
    let stack = CancelStack::new(Lsp.server_cancellable(["hang"]));
    let (replies, _) = cancelled_then_timed_out(stack).await;
    assert_eq!(replies, [LSP_CANCELLED_7]);
}
