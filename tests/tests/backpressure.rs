//! Cancels are never stuck behind backpressure: a request queued behind a saturated
//! `ConcurrencyLimit` placed below the stack can be cancelled (by the peer, or by its deadline, armed when it
//! arrived), and then its handler never runs.

use std::time::Duration;

use tests::{assert_about, ms, Conn, Counts, End, Probe, Spoken};
use tokio::time::Instant;
use tower::ServiceBuilder;
use tower_cancel::{CancelStack, TimeoutLayer};
use tower_cancel_io::Server;

/// `stack` over `probe`'s handler behind a concurrency limit of 1.
fn limited<D: Spoken>(probe: &Probe, stack: CancelStack<D>) -> Conn {
    let service = ServiceBuilder::new()
        .layer(stack)
        .concurrency_limit(1)
        .service(probe.service());
    Conn::start(Server::new(service), D::FRAMING)
}

#[tokio::test(start_paused = true)]
async fn lsp_a_queued_request_is_cancellable_and_never_runs() {
    let probe = Probe::new();
    let mut conn = limited(&probe, CancelStack::lsp());
    conn.send(r#"{"jsonrpc":"2.0","id":1,"method":"hang"}"#)
        .await;
    probe.wait_started(1).await;
    // Request 2 waits for the permit request 1 holds; its cancel reaches it all the same.
    conn.send(r#"{"jsonrpc":"2.0","id":2,"method":"echo"}"#)
        .await;
    conn.send(r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":2}}"#)
        .await;
    conn.expect(
        r#"{"jsonrpc":"2.0","id":2,"error":{"code":-32800,"message":"Request cancelled"}}"#,
    )
    .await;
    assert_eq!(probe.started(), 1, "request 2 never ran");
    assert!(conn.registry().contains(&1.into()));

    // Cancelling the holder frees the permit: the next request runs.
    conn.send(r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":1}}"#)
        .await;
    conn.expect(
        r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32800,"message":"Request cancelled"}}"#,
    )
    .await;
    conn.send(r#"{"jsonrpc":"2.0","id":3,"method":"echo","params":"runs"}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":3,"result":"runs"}"#)
        .await;
    let methods: Vec<_> = probe.started_list().into_iter().map(|s| s.method).collect();
    assert_eq!(methods, ["hang", "echo"]);
    assert_eq!(probe.ended_of(2), None, "never started, so never ended");

    conn.finish_counting(Counts::new(3, 1, 2)).await;
}

#[tokio::test(start_paused = true)]
async fn lsp_a_queued_request_runs_once_the_permit_is_free() {
    let probe = Probe::new();
    let mut conn = limited(&probe, CancelStack::lsp());
    conn.send_together(&[
        r#"{"jsonrpc":"2.0","id":1,"method":"sleep","params":{"ms":100}}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"sleep","params":{"ms":100}}"#,
    ])
    .await;
    let start = tokio::time::Instant::now();
    conn.expect(r#"{"jsonrpc":"2.0","id":1,"result":{"slept":100}}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":2,"result":{"slept":100}}"#)
        .await;
    // One at a time: 2 started only after 1 finished.
    let elapsed = start.elapsed();
    assert!(
        elapsed >= Duration::from_millis(200) && elapsed < Duration::from_millis(210),
        "{elapsed:?}"
    );
    conn.finish_counting(Counts::new(2, 2, 0)).await;
}

#[tokio::test(start_paused = true)]
async fn mcp_a_queued_request_is_cancellable_never_runs_and_gets_no_reply() {
    let probe = Probe::new();
    let mut conn = limited(&probe, CancelStack::mcp());
    conn.send(r#"{"jsonrpc":"2.0","id":1,"method":"sleep","params":{"ms":100}}"#)
        .await;
    probe.wait_started(1).await;
    conn.send_together(&[
        r#"{"jsonrpc":"2.0","id":2,"method":"echo"}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2,"reason":"queued too long"}}"#,
    ])
    .await;
    conn.send(r#"{"jsonrpc":"2.0","id":3,"method":"echo"}"#)
        .await;
    // 1 finishes, then 3 gets the permit; 2 is never answered.
    conn.expect(r#"{"jsonrpc":"2.0","id":1,"result":{"slept":100}}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":3,"result":null}"#)
        .await;
    let methods: Vec<_> = probe
        .started_list()
        .into_iter()
        .map(|s| s.id.to_string())
        .collect();
    assert_eq!(methods, ["1", "3"]);

    conn.finish_counting(Counts::new(3, 2, 1)).await;
}

#[tokio::test(start_paused = true)]
async fn cooperative_a_queued_request_that_is_cancelled_never_runs() {
    // In cooperative mode there is no handler to cooperate with yet: the queued request must not be started
    // later, when the permit frees within the grace period.
    let probe = Probe::new();
    let mut conn = limited(
        &probe,
        CancelStack::lsp().cooperative(Duration::from_secs(5)),
    );
    conn.send(r#"{"jsonrpc":"2.0","id":1,"method":"sleep","params":{"ms":100}}"#)
        .await;
    probe.wait_started(1).await;
    conn.send_together(&[
        r#"{"jsonrpc":"2.0","id":2,"method":"echo"}"#,
        r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":2}}"#,
    ])
    .await;
    conn.expect(
        r#"{"jsonrpc":"2.0","id":2,"error":{"code":-32800,"message":"Request cancelled"}}"#,
    )
    .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":1,"result":{"slept":100}}"#)
        .await;
    assert_eq!(probe.started(), 1, "request 2 never ran");
    assert_eq!(probe.ended_of(1).unwrap().end, End::Finished);

    conn.finish_counting(Counts::new(2, 1, 1)).await;
}

#[tokio::test(start_paused = true)]
async fn a_disconnect_reaches_queued_requests_and_they_never_run() {
    let probe = Probe::new();
    let mut conn = limited(&probe, CancelStack::lsp());
    conn.send(r#"{"jsonrpc":"2.0","id":1,"method":"hang"}"#)
        .await;
    probe.wait_started(1).await;
    conn.send_together(&[
        r#"{"jsonrpc":"2.0","id":2,"method":"echo"}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":"echo"}"#,
    ])
    .await;
    let registry = conn.registry().clone();
    let rest = conn.finish().await;
    assert_eq!(
        tests::set_of(rest),
        tests::set_of((1..=3).map(|id| format!(
            r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-32800,"message":"Request cancelled"}}}}"#
        )))
    );
    assert_eq!(probe.started(), 1, "the queued requests never ran");
    assert_eq!(
        probe.ended(),
        [tests::Ended::stopped(
            1,
            "hang",
            Some(tower_cancel::CancelReason::Disconnect)
        )]
    );
    assert_eq!(Counts::of(&registry), Counts::new(3, 0, 3));
}

#[tokio::test(start_paused = true)]
async fn a_queued_request_times_out_while_it_waits_and_never_runs() {
    // The deadline is armed when the request arrives, not when it gets past the limit: request 2 (timeout 1 s)
    // waits behind a 10 s request and is answered at its deadline.
    let probe = Probe::new();
    let timeouts = TimeoutLayer::none().method("echo", ms(1000));
    let mut conn = limited(&probe, CancelStack::lsp().timeouts(timeouts));
    conn.send(r#"{"jsonrpc":"2.0","id":1,"method":"sleep","params":{"ms":10000}}"#)
        .await;
    probe.wait_started(1).await;
    let sent = Instant::now();
    conn.send(r#"{"jsonrpc":"2.0","id":2,"method":"echo","params":"late"}"#)
        .await;
    conn.expect(
        r#"{"jsonrpc":"2.0","id":2,"error":{"code":-32800,"message":"Request cancelled"}}"#,
    )
    .await;
    assert_about(sent.elapsed(), ms(1000));
    conn.expect(r#"{"jsonrpc":"2.0","id":1,"result":{"slept":10000}}"#)
        .await;
    assert_eq!(probe.started(), 1, "request 2 never ran");
    conn.finish_counting(Counts::new(2, 1, 1)).await;
}
