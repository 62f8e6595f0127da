//! Cooperative mode (`CancelStack::…().cooperative(grace)`): on cancel the token fires and the handler may answer
//! within the grace period (a partial result where the dialect allows one, or its own error); after the grace it
//! is dropped and the dialect's cancelled reply is sent. MCP has no partial results: nothing is sent.

use std::time::Duration;

use tests::{assert_about, Conn, Counts, End, Ended, Probe, Spoken};
use tokio::time::Instant;
use tower_cancel::{CancelReason, CancelStack};

const GRACE: Duration = Duration::from_secs(5);

const LSP_CANCELLED_7: &str =
    r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32800,"message":"Request cancelled"}}"#;

/// Request `ID` (`method`) runs in cooperative mode and the peer cancels it. The handler answers `reply` itself
/// at once (`End::Finished`: no waiting for the grace), or ignores its token and is dropped after the grace
/// (`End::Stopped`), `reply` then being the dialect's cancelled reply. Either way the request counts as cancelled.
async fn a_cancelled_handler<D: Spoken>(
    stack: CancelStack<D>,
    method: &str,
    reply: &str,
    end: End,
) {
    let probe = Probe::new();
    let mut conn = Conn::stack(stack.cooperative(GRACE), &probe);
    let id = D::ID;
    conn.send(&format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}"}}"#
    ))
    .await;
    probe.wait_started(id).await;
    let cancelled_at = Instant::now();
    conn.send(&D::cancel_frame(id)).await;
    conn.expect(reply).await;
    match end {
        End::Finished => assert_eq!(
            cancelled_at.elapsed(),
            Duration::ZERO,
            "no waiting for the grace"
        ),
        End::Stopped => assert_about(cancelled_at.elapsed(), GRACE),
    }
    let ended = Ended {
        id: id.into(),
        method: method.to_owned(),
        end,
        reason: Some(CancelReason::peer(None)),
    };
    assert_eq!(probe.ended(), [ended]);
    conn.finish_counting(Counts::new(1, 0, 1)).await;
}

#[tokio::test(start_paused = true)]
async fn lsp_a_partial_result_within_the_grace_is_sent() {
    let partial = r#"{"jsonrpc":"2.0","id":7,"result":{"partial":true}}"#;
    a_cancelled_handler(CancelStack::lsp(), "partial", partial, End::Finished).await;
}

#[tokio::test(start_paused = true)]
async fn lsp_the_handlers_own_error_within_the_grace_is_sent() {
    let error = r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32801,"message":"Content modified"}}"#;
    a_cancelled_handler(CancelStack::lsp(), "wind_down_error", error, End::Finished).await;
}

#[tokio::test(start_paused = true)]
async fn lsp_a_handler_that_ignores_its_token_is_dropped_after_the_grace() {
    a_cancelled_handler(CancelStack::lsp(), "hang", LSP_CANCELLED_7, End::Stopped).await;
}

#[tokio::test(start_paused = true)]
async fn lsp_other_requests_are_served_during_the_grace() {
    let probe = Probe::new();
    let mut conn = Conn::stack(CancelStack::lsp().cooperative(GRACE), &probe);
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
    conn.expect(LSP_CANCELLED_7).await;
    conn.finish_counting(Counts::new(2, 1, 1)).await;
}

#[tokio::test(start_paused = true)]
async fn a_cancel_before_its_request_means_the_handler_never_runs_in_cooperative_mode_too() {
    let probe = Probe::new();
    let mut conn = Conn::stack(CancelStack::lsp().cooperative(GRACE), &probe);
    conn.send(r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":7}}"#)
        .await;
    conn.send(r#"{"jsonrpc":"2.0","id":7,"method":"echo","params":"the whole result"}"#)
        .await;
    conn.expect(LSP_CANCELLED_7).await;
    assert_eq!(probe.started(), 0);
    conn.finish_counting(Counts::new(1, 0, 1).early(1, 0)).await;
}

#[tokio::test(start_paused = true)]
async fn acp_a_partial_result_within_the_grace_is_sent() {
    let partial = r#"{"jsonrpc":"2.0","id":3,"result":{"partial":true}}"#;
    a_cancelled_handler(CancelStack::acp(), "partial", partial, End::Finished).await;
}

#[tokio::test(start_paused = true)]
async fn mcp_even_a_partial_result_is_not_sent() {
    let probe = Probe::new();
    let mut conn = Conn::stack(CancelStack::mcp().cooperative(GRACE), &probe);
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
    conn.finish_counting(Counts::new(2, 1, 1)).await;
}

#[tokio::test(start_paused = true)]
async fn mcp_a_handler_that_ignores_its_token_is_dropped_after_the_grace_and_nothing_is_sent() {
    let probe = Probe::new();
    let mut conn = Conn::stack(CancelStack::mcp().cooperative(GRACE), &probe);
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
    conn.finish_counting(Counts::new(2, 1, 1)).await;
}
