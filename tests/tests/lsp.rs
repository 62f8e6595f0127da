//! LSP over `Content-Length` framing: `$/cancelRequest {"id": …}`, answered -32800 "Request cancelled".

use tests::{scenarios, Conn, Counts, End, Probe, Spoken};
use tower_cancel::{dialect::Lsp, CancelStack};

const CANCELLED_7: &str =
    r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32800,"message":"Request cancelled"}}"#;

#[tokio::test(start_paused = true)]
async fn cancel_while_running_answers_request_cancelled_and_stops_the_handler() {
    scenarios::cancel_while_running(CancelStack::lsp()).await;
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
    conn.finish_counting(Counts::new(1, 0, 1)).await;
}

#[tokio::test(start_paused = true)]
async fn a_cancel_before_its_request_means_the_handler_never_runs() {
    let then = (
        r#"{"jsonrpc":"2.0","id":8,"method":"echo","params":{"x":1}}"#,
        r#"{"jsonrpc":"2.0","id":8,"result":{"x":1}}"#,
    );
    scenarios::a_cancel_before_its_request(CancelStack::lsp(), &Lsp::cancel_frame(7), Some(then))
        .await;
}

#[tokio::test(start_paused = true)]
async fn a_cancel_after_completion_leaves_the_reply_and_changes_nothing() {
    scenarios::a_cancel_after_completion(
        CancelStack::lsp(),
        r#"{"jsonrpc":"2.0","id":7,"method":"sleep","params":{"ms":10}}"#,
        r#"{"jsonrpc":"2.0","id":7,"result":{"slept":10}}"#,
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn unknown_malformed_and_duplicate_cancels_are_ignored() {
    scenarios::bad_and_duplicate_cancels_are_ignored(
        CancelStack::lsp(),
        &[
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
        ],
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn initialize_is_never_cancellable() {
    scenarios::initialize_is_never_cancelled(
        CancelStack::lsp(),
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"ms":50}}"#,
        &Lsp::cancel_frame(1),
    )
    .await;
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
    conn.finish_counting(Counts::new(2, 1, 1)).await;
}

#[tokio::test(start_paused = true)]
async fn completion_racing_a_cancel_gives_exactly_one_reply() {
    // The handler finishes at 100 ms; the cancel arrives a little before, at the same instant, or a little after.
    // Whoever reaches the request's lifecycle first decides the one reply.
    let slept = r#"{"jsonrpc":"2.0","id":7,"result":{"slept":100}}"#;
    for (cancel_after_ms, expected) in [(99, Some(CANCELLED_7)), (100, None), (101, Some(slept))] {
        let probe = Probe::new();
        let mut conn = Conn::lsp(&probe);
        conn.send(r#"{"jsonrpc":"2.0","id":7,"method":"sleep","params":{"ms":100}}"#)
            .await;
        probe.wait_started(7).await;
        tokio::time::sleep(tests::ms(cancel_after_ms)).await;
        conn.send(r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":7}}"#)
            .await;
        let replies = conn
            .replies_until(
                r#"{"jsonrpc":"2.0","id":8,"method":"echo"}"#,
                r#"{"jsonrpc":"2.0","id":8,"result":null}"#,
            )
            .await;
        assert_eq!(replies.len(), 1, "{cancel_after_ms} ms: {replies:?}");
        if let Some(expected) = expected {
            assert_eq!(replies[0], expected, "{cancel_after_ms} ms");
        } else {
            assert!(
                [CANCELLED_7, slept].contains(&replies[0].as_str()),
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
    a.finish_counting(Counts::new(1, 1, 0)).await;
    b.finish_counting(Counts::new(1, 1, 0).early(1, 1)).await;
}
