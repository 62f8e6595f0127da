//! Cooperative mode (`CancelStack::…().cooperative(grace)`): on cancel the token fires and the handler may answer
//! within the grace period (a partial result where the dialect allows one, or its own error); after the grace it
//! is dropped and the dialect's cancelled reply is sent. MCP has no partial results: nothing is sent.

use std::time::Duration;

use tests::{Conn, Counts, End, Ended, Probe};
use tokio::time::Instant;
use tower_cancel::{CancelReason, CancelStack};
use tower_cancel_io::Framing;

const GRACE: Duration = Duration::from_secs(5);

fn lsp(probe: &Probe) -> Conn {
    Conn::serve(
        CancelStack::lsp().cooperative(GRACE),
        probe,
        Framing::ContentLength,
    )
}

fn mcp(probe: &Probe) -> Conn {
    Conn::serve(
        CancelStack::mcp().cooperative(GRACE),
        probe,
        Framing::Ndjson,
    )
}

/// Virtual time is exact up to the timer wheel's 1 ms resolution.
fn assert_about(elapsed: Duration, expected: Duration) {
    assert!(
        elapsed >= expected && elapsed <= expected + Duration::from_millis(1),
        "{elapsed:?} instead of {expected:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn lsp_a_partial_result_within_the_grace_is_sent() {
    let probe = Probe::new();
    let mut conn = lsp(&probe);
    conn.send(r#"{"jsonrpc":"2.0","id":7,"method":"partial"}"#)
        .await;
    probe.wait_started(7).await;
    let cancelled_at = Instant::now();
    conn.send(r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":7}}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":7,"result":{"partial":true}}"#)
        .await;
    assert_eq!(
        cancelled_at.elapsed(),
        Duration::ZERO,
        "no waiting for the grace"
    );
    assert_eq!(
        probe.ended(),
        [Ended::finished(
            7,
            "partial",
            Some(CancelReason::peer(None))
        )]
    );

    let counts = conn.counts();
    conn.finish_quiet().await;
    // The request was cancelled; its handler's answer was a partial result.
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
async fn lsp_the_handlers_own_error_within_the_grace_is_sent() {
    let probe = Probe::new();
    let mut conn = lsp(&probe);
    conn.send(r#"{"jsonrpc":"2.0","id":7,"method":"wind_down_error"}"#)
        .await;
    probe.wait_started(7).await;
    conn.send(r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":7}}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32801,"message":"Content modified"}}"#)
        .await;
    assert_eq!(probe.ended_of(7).unwrap().end, End::Finished);
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
async fn lsp_a_handler_that_ignores_its_token_is_dropped_after_the_grace() {
    let probe = Probe::new();
    let mut conn = lsp(&probe);
    conn.send(r#"{"jsonrpc":"2.0","id":7,"method":"hang"}"#)
        .await;
    probe.wait_started(7).await;
    let cancelled_at = Instant::now();
    conn.send(r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":7}}"#)
        .await;
    conn.expect(
        r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32800,"message":"Request cancelled"}}"#,
    )
    .await;
    assert_about(cancelled_at.elapsed(), GRACE);
    assert_eq!(
        probe.ended(),
        [Ended::stopped(7, "hang", Some(CancelReason::peer(None)))]
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
async fn lsp_other_requests_are_served_during_the_grace() {
    let probe = Probe::new();
    let mut conn = lsp(&probe);
    conn.send(r#"{"jsonrpc":"2.0","id":7,"method":"hang"}"#)
        .await;
    probe.wait_started(7).await;
    conn.send(r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":7}}"#)
        .await;
    conn.send(r#"{"jsonrpc":"2.0","id":8,"method":"sleep","params":{"ms":1000}}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":8,"result":{"slept":1000}}"#)
        .await;
    assert!(conn.registry().contains(&7.into()), "still in its grace");
    conn.expect(
        r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32800,"message":"Request cancelled"}}"#,
    )
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
async fn a_cancel_before_its_request_means_the_handler_never_runs_in_cooperative_mode_too() {
    let probe = Probe::new();
    let mut conn = lsp(&probe);
    conn.send(r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":7}}"#)
        .await;
    conn.send(r#"{"jsonrpc":"2.0","id":7,"method":"echo","params":"the whole result"}"#)
        .await;
    conn.expect(
        r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32800,"message":"Request cancelled"}}"#,
    )
    .await;
    assert_eq!(probe.started(), 0);
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
async fn acp_a_partial_result_within_the_grace_is_sent() {
    let probe = Probe::new();
    let mut conn = Conn::serve(
        CancelStack::acp().cooperative(GRACE),
        &probe,
        Framing::Ndjson,
    );
    conn.send(r#"{"jsonrpc":"2.0","id":3,"method":"partial"}"#)
        .await;
    probe.wait_started(3).await;
    conn.send(r#"{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":3}}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":3,"result":{"partial":true}}"#)
        .await;
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
async fn mcp_even_a_partial_result_is_not_sent() {
    let probe = Probe::new();
    let mut conn = mcp(&probe);
    conn.send(r#"{"jsonrpc":"2.0","id":7,"method":"partial"}"#)
        .await;
    probe.wait_started(7).await;
    conn.send(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7,"reason":"stop"}}"#)
        .await;
    conn.send(r#"{"jsonrpc":"2.0","id":8,"method":"echo"}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":8,"result":null}"#)
        .await;
    // The handler did wind down and answer; its answer was dropped.
    assert_eq!(
        probe.ended_of(7),
        Some(Ended::finished(
            7,
            "partial",
            Some(CancelReason::peer(Some("stop".into())))
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
async fn mcp_a_handler_that_ignores_its_token_is_dropped_after_the_grace_and_nothing_is_sent() {
    let probe = Probe::new();
    let mut conn = mcp(&probe);
    conn.send(r#"{"jsonrpc":"2.0","id":7,"method":"hang"}"#)
        .await;
    probe.wait_started(7).await;
    let cancelled_at = Instant::now();
    conn.send(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}"#)
        .await;
    // A request that outlasts the grace: when its reply comes, 7 has been dropped, without a reply.
    conn.send(r#"{"jsonrpc":"2.0","id":8,"method":"sleep","params":{"ms":6000}}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":8,"result":{"slept":6000}}"#)
        .await;
    assert_about(cancelled_at.elapsed(), Duration::from_secs(6));
    assert_eq!(
        probe.ended(),
        [
            Ended::stopped(7, "hang", Some(CancelReason::peer(None))),
            Ended::finished(8, "sleep", None)
        ]
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
