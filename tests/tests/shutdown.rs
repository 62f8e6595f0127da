//! Graceful shutdown of a connection (`Server::shutdown_handle().shutdown()`, `.drain_timeout(d)`): the server
//! stops reading, lets the requests in flight finish within the drain timeout, cancels the rest with reason
//! Shutdown and answers them the dialect's way, then closes the connection; `serve` returns `Ok`.

use std::time::Duration;

use tests::{assert_about, ms, set_of, Conn, Counts, Ended, Probe};
use tokio::time::Instant;
use tower_cancel::{dialect::Lsp, CancelReason, CancelStack};
use tower_cancel_io::{Framing, ShutdownHandle};

/// `stack` over `probe`, served with a drain timeout of 1 s; and the connection's shutdown handle.
fn serve<L>(stack: L, probe: &Probe, framing: Framing) -> (Conn, ShutdownHandle)
where
    L: tower::Layer<tests::Handler>,
    L::Service: tests::Served,
{
    let mut handle = None;
    let conn = Conn::serve_configured(stack, probe, framing, |server| {
        let server = server.drain_timeout(ms(1000));
        handle = Some(server.shutdown_handle());
        server
    });
    (conn, handle.expect("configured"))
}

const LSP_CANCELLED: &str = r#"{"code":-32800,"message":"Request cancelled"}"#;
const MCP_SHUTTING_DOWN: &str =
    r#"{"code":-32603,"message":"Internal error: request cancelled (server shutting down)"}"#;

fn error(id: i64, error: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{error}}}"#)
}

/// Requests 1 (done after 100 ms), 2 (never done) and 3 (done after 5 s) in flight, then a shutdown with a drain
/// timeout of 1 s: 1 is answered normally, 2 and 3 are cancelled at 1 s with reason Shutdown and get `cancelled`.
async fn drains_then_cancels(
    mut conn: Conn,
    shutdown: ShutdownHandle,
    probe: &Probe,
    cancelled: &str,
) {
    conn.send_together(&[
        r#"{"jsonrpc":"2.0","id":1,"method":"sleep","params":{"ms":100}}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"hang"}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":"sleep","params":{"ms":5000}}"#,
    ])
    .await;
    for id in 1..=3 {
        probe.wait_started(id).await;
    }
    let began = Instant::now();
    shutdown.shutdown();
    assert!(shutdown.is_shutting_down());
    conn.expect(r#"{"jsonrpc":"2.0","id":1,"result":{"slept":100}}"#)
        .await;
    assert_about(began.elapsed(), ms(100));
    let registry = conn.registry().clone();
    // The server closes the connection itself once the rest are answered.
    let rest = conn.closed_by_server().await;
    assert_about(began.elapsed(), ms(1000));
    assert_eq!(
        set_of(rest),
        set_of([error(2, cancelled), error(3, cancelled)])
    );
    assert_eq!(probe.ended_of(1), Some(Ended::finished(1, "sleep", None)));
    assert_eq!(
        probe.ended_of(2),
        Some(Ended::stopped(2, "hang", Some(CancelReason::Shutdown)))
    );
    assert_eq!(
        probe.ended_of(3),
        Some(Ended::stopped(3, "sleep", Some(CancelReason::Shutdown)))
    );
    assert_eq!(probe.running(), 0);
    assert!(registry.is_empty());
    assert_eq!(Counts::of(&registry), Counts::new(3, 1, 2));
}

#[tokio::test(start_paused = true)]
async fn lsp_requests_done_within_the_drain_are_answered_and_the_rest_cancelled() {
    let probe = Probe::new();
    let (conn, shutdown) = serve(CancelStack::lsp(), &probe, Framing::ContentLength);
    drains_then_cancels(conn, shutdown, &probe, LSP_CANCELLED).await;
}

#[tokio::test(start_paused = true)]
async fn acp_requests_done_within_the_drain_are_answered_and_the_rest_cancelled() {
    let probe = Probe::new();
    let (conn, shutdown) = serve(CancelStack::acp(), &probe, Framing::Ndjson);
    drains_then_cancels(conn, shutdown, &probe, LSP_CANCELLED).await;
}

#[tokio::test(start_paused = true)]
async fn mcp_requests_done_within_the_drain_are_answered_and_the_rest_get_internal_error() {
    // The client of a request the server gives up on is still waiting: it gets an answer, unlike a request it
    // cancelled itself.
    let probe = Probe::new();
    let (conn, shutdown) = serve(CancelStack::mcp(), &probe, Framing::Ndjson);
    drains_then_cancels(conn, shutdown, &probe, MCP_SHUTTING_DOWN).await;
}

#[tokio::test(start_paused = true)]
async fn when_everything_is_done_within_the_drain_the_connection_closes_at_once() {
    let probe = Probe::new();
    let (mut conn, shutdown) = serve(CancelStack::lsp(), &probe, Framing::ContentLength);
    conn.send_together(&[
        r#"{"jsonrpc":"2.0","id":1,"method":"sleep","params":{"ms":100}}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"sleep","params":{"ms":200}}"#,
    ])
    .await;
    probe.wait_started(2).await;
    let began = Instant::now();
    shutdown.shutdown();
    let registry = conn.registry().clone();
    let rest = conn.closed_by_server().await;
    assert_about(began.elapsed(), ms(200));
    assert_eq!(
        rest,
        [
            r#"{"jsonrpc":"2.0","id":1,"result":{"slept":100}}"#,
            r#"{"jsonrpc":"2.0","id":2,"result":{"slept":200}}"#
        ]
    );
    assert_eq!(
        probe.ended(),
        [
            Ended::finished(1, "sleep", None),
            Ended::finished(2, "sleep", None)
        ]
    );
    assert_eq!(Counts::of(&registry), Counts::new(2, 2, 0));
}

#[tokio::test(start_paused = true)]
async fn an_idle_connection_closes_at_once() {
    let probe = Probe::new();
    let (conn, shutdown) = serve(CancelStack::mcp(), &probe, Framing::Ndjson);
    let began = Instant::now();
    shutdown.shutdown();
    let registry = conn.registry().clone();
    assert!(conn.closed_by_server().await.is_empty());
    assert_eq!(began.elapsed(), Duration::ZERO);
    assert_eq!(Counts::of(&registry), Counts::default());
}

#[tokio::test(start_paused = true)]
async fn a_request_written_after_the_shutdown_signal_is_never_read() {
    let probe = Probe::new();
    let (mut conn, shutdown) = serve(CancelStack::lsp(), &probe, Framing::ContentLength);
    shutdown.shutdown();
    conn.send_together(&[
        r#"{"jsonrpc":"2.0","id":1,"method":"echo","params":"too late"}"#,
        r#"{"jsonrpc":"2.0","method":"too/late"}"#,
    ])
    .await;
    let registry = conn.registry().clone();
    assert!(conn.closed_by_server().await.is_empty(), "no reply");
    assert_eq!(probe.started(), 0, "its handler never started");
    assert!(probe.notifications().is_empty());
    assert_eq!(Counts::of(&registry), Counts::default());
}

#[tokio::test(start_paused = true)]
async fn a_request_written_during_the_drain_is_answered_as_shut_down_and_never_runs() {
    let probe = Probe::new();
    let (mut conn, shutdown) = serve(CancelStack::lsp(), &probe, Framing::ContentLength);
    conn.send(r#"{"jsonrpc":"2.0","id":1,"method":"sleep","params":{"ms":500}}"#)
        .await;
    probe.wait_started(1).await;
    shutdown.shutdown();
    tokio::time::sleep(ms(100)).await;
    conn.send(r#"{"jsonrpc":"2.0","id":2,"method":"echo","params":"too late"}"#)
        .await;
    let registry = conn.registry().clone();
    assert_eq!(
        conn.closed_by_server().await,
        [
            r#"{"jsonrpc":"2.0","id":2,"error":{"code":-32800,"message":"Request cancelled"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"slept":500}}"#
        ]
    );
    assert_eq!(probe.started(), 1, "request 2 never started");
    assert_eq!(Counts::of(&registry), Counts::new(2, 1, 1));
}

#[tokio::test(start_paused = true)]
async fn a_peers_cancel_still_reaches_a_request_during_the_drain() {
    // The drain keeps reading: a cancel is never stuck behind the shutdown (invariant 3), and in MCP the request
    // the peer cancelled gets no reply at all, not the shutdown's error.
    let probe = Probe::new();
    let (mut conn, shutdown) = serve(CancelStack::mcp(), &probe, Framing::Ndjson);
    conn.send_together(&[
        r#"{"jsonrpc":"2.0","id":1,"method":"hang"}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"sleep","params":{"ms":500}}"#,
    ])
    .await;
    probe.wait_started(2).await;
    shutdown.shutdown();
    tokio::time::sleep(ms(100)).await;
    conn.send(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"reason":"no longer needed"}}"#)
        .await;
    let registry = conn.registry().clone();
    assert_eq!(
        conn.closed_by_server().await,
        [r#"{"jsonrpc":"2.0","id":2,"result":{"slept":500}}"#]
    );
    assert_eq!(
        probe.ended_of(1),
        Some(Ended::stopped(
            1,
            "hang",
            Some(CancelReason::peer(Some("no longer needed".into())))
        ))
    );
    assert_eq!(Counts::of(&registry), Counts::new(2, 1, 1));
}

#[tokio::test(start_paused = true)]
async fn a_timeout_during_the_drain_is_still_a_timeout() {
    // MCP tells the two apart: -32001 for the timeout, -32603 for the shutdown.
    let probe = Probe::new();
    let (mut conn, shutdown) = serve(
        CancelStack::mcp().timeouts(tower_cancel::TimeoutLayer::none().method("hang", ms(300))),
        &probe,
        Framing::Ndjson,
    );
    let sent = Instant::now();
    conn.send_together(&[
        r#"{"jsonrpc":"2.0","id":1,"method":"hang"}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"other","params":{"hang":true}}"#,
    ])
    .await;
    probe.wait_started(2).await;
    shutdown.shutdown();
    conn.expect(&error(
        1,
        r#"{"code":-32001,"message":"Request timed out"}"#,
    ))
    .await;
    assert_about(sent.elapsed(), ms(300));
    let registry = conn.registry().clone();
    assert_eq!(conn.closed_by_server().await, [error(2, MCP_SHUTTING_DOWN)]);
    assert_about(sent.elapsed(), ms(1000));
    assert_eq!(
        probe.ended(),
        [
            Ended::stopped(1, "hang", Some(CancelReason::Timeout)),
            Ended::stopped(2, "other", Some(CancelReason::Shutdown))
        ]
    );
    assert_eq!(Counts::of(&registry), Counts::new(2, 0, 2));
}

#[tokio::test(start_paused = true)]
async fn lsp_server_cancellable_methods_get_server_cancelled_without_retrigger_on_shutdown() {
    let probe = Probe::new();
    let (mut conn, shutdown) = serve(
        CancelStack::new(Lsp.server_cancellable(["textDocument/diagnostic"])),
        &probe,
        Framing::ContentLength,
    );
    conn.send_together(&[
        r#"{"jsonrpc":"2.0","id":1,"method":"textDocument/diagnostic","params":{"hang":true}}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"textDocument/hover","params":{"hang":true}}"#,
    ])
    .await;
    probe.wait_started(2).await;
    shutdown.shutdown();
    let registry = conn.registry().clone();
    assert_eq!(
        set_of(conn.closed_by_server().await),
        set_of([
            error(
                1,
                r#"{"code":-32802,"message":"Server cancelled the request","data":{"retriggerRequest":false}}"#
            ),
            error(2, LSP_CANCELLED),
        ])
    );
    assert_eq!(Counts::of(&registry), Counts::new(2, 0, 2));
}

#[tokio::test(start_paused = true)]
async fn cooperative_handlers_wind_down_within_their_grace_after_the_drain() {
    // The grace (3 s) is longer than the server's close grace (1 s by default): the handler that ignores its token
    // still gets all of its grace, and its request is answered when it is dropped.
    let probe = Probe::new();
    let (mut conn, shutdown) = serve(
        CancelStack::lsp().cooperative(ms(3000)),
        &probe,
        Framing::ContentLength,
    );
    conn.send_together(&[
        r#"{"jsonrpc":"2.0","id":1,"method":"partial"}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"hang"}"#,
    ])
    .await;
    probe.wait_started(2).await;
    let began = Instant::now();
    shutdown.shutdown();
    conn.expect(r#"{"jsonrpc":"2.0","id":1,"result":{"partial":true}}"#)
        .await;
    assert_about(began.elapsed(), ms(1000));
    let registry = conn.registry().clone();
    assert_eq!(conn.closed_by_server().await, [error(2, LSP_CANCELLED)]);
    assert_about(began.elapsed(), ms(4000));
    assert_eq!(
        probe.ended(),
        [
            Ended::finished(1, "partial", Some(CancelReason::Shutdown)),
            Ended::stopped(2, "hang", Some(CancelReason::Shutdown))
        ]
    );
    assert_eq!(Counts::of(&registry), Counts::new(2, 0, 2));
}

#[tokio::test(start_paused = true)]
async fn what_cannot_be_cancelled_gets_the_drain_and_the_close_grace_then_is_dropped() {
    // `initialize` is never cancellable, so the shutdown cannot end it: it may finish within the drain timeout and
    // the close grace after it; then the connection closes without its reply (there is no reply the server could
    // give it) and `serve` still returns.
    let probe = Probe::new();
    let (mut conn, shutdown) = serve(CancelStack::lsp(), &probe, Framing::ContentLength);
    conn.send(r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"ms":60000}}"#)
        .await;
    probe.wait_started(0).await;
    let began = Instant::now();
    shutdown.shutdown();
    let registry = conn.registry().clone();
    assert!(conn.closed_by_server().await.is_empty());
    assert_about(began.elapsed(), ms(2000));
    assert_eq!(probe.ended(), [Ended::stopped(0, "initialize", None)]);
    assert_eq!(Counts::of(&registry), Counts::default(), "never registered");
}

/// A service that is not ready (a concurrency limit placed above the stack) holds the read loop while it waits:
/// a shutdown still begins the drain there, the request that waited is refused when the service takes it, and the
/// connection closes at the end of the drain.
#[tokio::test(start_paused = true)]
async fn a_shutdown_is_seen_while_the_read_loop_waits_for_readiness() {
    let probe = Probe::new();
    let service = tower::ServiceBuilder::new()
        .concurrency_limit(1)
        .layer(CancelStack::lsp())
        .service(probe.service());
    let server = tower_cancel_io::Server::new(service)
        .drain_timeout(ms(1000))
        .close_grace(ms(100));
    let shutdown = server.shutdown_handle();
    let mut conn = Conn::start(server, Framing::ContentLength);
    conn.send(r#"{"jsonrpc":"2.0","id":1,"method":"hang"}"#)
        .await;
    probe.wait_started(1).await;
    conn.send(r#"{"jsonrpc":"2.0","id":2,"method":"echo"}"#)
        .await;
    tokio::time::sleep(ms(10)).await;
    let began = Instant::now();
    shutdown.shutdown();
    let rest = conn.closed_by_server().await;
    assert_about(began.elapsed(), ms(1000));
    // Request 1 is cancelled at the end of the drain; request 2 never got past the limit.
    assert_eq!(
        set_of(rest),
        set_of([
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32800,"message":"Request cancelled"}}"#,
            r#"{"jsonrpc":"2.0","id":2,"error":{"code":-32603,"message":"Internal error: service unavailable"}}"#,
        ])
    );
    assert_eq!(probe.started(), 1, "request 2 never ran");
}
