//! A panicking handler is answered -32603, its registry entry is removed at once, and the connection goes on.

use tests::{Conn, Counts, End, Ended, Probe};
use tower_cancel::CancelReason;

const PANICKED_3: &str = r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32603,"message":"Internal error: handler panicked"}}"#;

#[tokio::test(start_paused = true)]
async fn lsp_a_panicking_handler_gets_internal_error_and_the_connection_goes_on() {
    let probe = Probe::new();
    let mut conn = Conn::lsp(&probe);
    // A request in flight next to the one that panics.
    conn.send(r#"{"jsonrpc":"2.0","id":1,"method":"hang"}"#)
        .await;
    probe.wait_started(1).await;

    conn.send(r#"{"jsonrpc":"2.0","id":3,"method":"panic"}"#)
        .await;
    // The panic message stays in the server's log; the peer gets the generic text.
    conn.expect(PANICKED_3).await;
    assert!(!conn.registry().contains(&3.into()), "the entry is removed");
    assert_eq!(conn.registry().len(), 1);
    assert_eq!(probe.ended_of(3).unwrap().end, End::Stopped);

    // The same id can be used again (the entry is gone), other requests are served, and the request that was in
    // flight is still cancellable.
    conn.send(r#"{"jsonrpc":"2.0","id":3,"method":"echo","params":"again"}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":3,"result":"again"}"#)
        .await;
    conn.send(r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":1}}"#)
        .await;
    conn.expect(
        r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32800,"message":"Request cancelled"}}"#,
    )
    .await;
    assert_eq!(
        probe.ended_of(1),
        Some(Ended::stopped(1, "hang", Some(CancelReason::peer(None))))
    );

    // The panic is the handler's outcome (answered -32603), so the panicked request counts as completed.
    conn.finish_counting(Counts::new(3, 2, 1)).await;
}

#[tokio::test(start_paused = true)]
async fn mcp_a_panicking_handler_gets_internal_error_too() {
    let probe = Probe::new();
    let mut conn = Conn::mcp(&probe);
    conn.send(r#"{"jsonrpc":"2.0","id":3,"method":"panic"}"#)
        .await;
    conn.expect(PANICKED_3).await;
    assert!(conn.registry().is_empty());
    conn.send(r#"{"jsonrpc":"2.0","id":4,"method":"echo"}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":4,"result":null}"#)
        .await;
    conn.finish_counting(Counts::new(2, 2, 0)).await;
}

#[tokio::test(start_paused = true)]
async fn a_panicking_initialize_gets_internal_error_and_initializes_nothing() {
    // `initialize` is never registered (never cancellable); its panic is caught all the same, and in the ACP
    // draft a failed initialize leaves the session uninitialized.
    let probe = Probe::new();
    let mut conn = Conn::acp_draft(&probe);
    conn.send(r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"panic":true}}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":0,"error":{"code":-32603,"message":"Internal error: handler panicked"}}"#)
        .await;
    assert!(!conn.session().is_initialized());
    conn.send(r#"{"jsonrpc":"2.0","id":1,"method":"initialize"}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":1,"result":{"capabilities":{}}}"#)
        .await;
    assert!(conn.session().is_initialized());
    conn.finish_counting(Counts::default()).await;
}

#[tokio::test(start_paused = true)]
async fn a_panicking_notification_handler_gets_no_reply_and_the_connection_goes_on() {
    let probe = Probe::new();
    let mut conn = Conn::lsp(&probe);
    conn.send(r#"{"jsonrpc":"2.0","method":"panic"}"#).await;
    conn.send(r#"{"jsonrpc":"2.0","id":4,"method":"echo"}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":4,"result":null}"#)
        .await;
    conn.finish_counting(Counts::new(1, 1, 0)).await;
}
