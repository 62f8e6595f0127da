//! Progress reports (`req.progress()`) on the wire, in each dialect's shape, and the idle timeout they keep alive
//! (`TimeoutLayer::new(idle).reset_on_progress(max)`): each report pushes the deadline back to a full idle window
//! from now, never past the maximum.
//!
//! The probe's `progress` method reports `steps` times, every `every` ms, with `step` of `steps` and the message
//! `"step <step>"`, then drops its handle and answers `{"token": …, "reports": …}`.

use std::time::Duration;

use serde_json::{json, Value};
use tests::{assert_about, ms, Conn, Counts, Ended, Probe};
use tokio::time::Instant;
use tower::{service_fn, ServiceBuilder};
use tower_cancel::{
    progress::ProgressUpdate, timeout::TimeoutLayer, BoxError, CancelReason, CancelStack, Request,
};
use tower_cancel_io::{Framing, Server};

/// An idle timeout of 100 ms, cut at `max` in all.
fn idle(max: Duration) -> TimeoutLayer {
    TimeoutLayer::new(ms(100)).reset_on_progress(max)
}

fn mcp(probe: &Probe, timeouts: TimeoutLayer) -> Conn {
    Conn::stack(CancelStack::mcp().timeouts(timeouts), probe)
}

fn lsp(probe: &Probe, timeouts: TimeoutLayer) -> Conn {
    Conn::stack(CancelStack::lsp().timeouts(timeouts), probe)
}

fn mcp_progress(token: &str, step: u64, total: u64) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","method":"notifications/progress","params":{{"message":"step {step}","progress":{step},"progressToken":{token},"total":{total}}}}}"#
    )
}

fn lsp_progress(token: &str, value: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","method":"$/progress","params":{{"token":{token},"value":{value}}}}}"#
    )
}

/// LSP's `$/progress` for report `step` of `total`: `begin` (titled "step 1") for the first, `report` after it.
fn lsp_report(token: &str, step: u64, total: u64) -> String {
    let percentage = step * 100 / total;
    let value = if step == 1 {
        format!(r#"{{"kind":"begin","percentage":{percentage},"title":"step 1"}}"#)
    } else {
        format!(r#"{{"kind":"report","message":"step {step}","percentage":{percentage}}}"#)
    };
    lsp_progress(token, &value)
}

/// LSP's `$/progress` `end`, sent when the handler drops its handle (stopped or not), before the reply.
fn lsp_end(token: &str) -> String {
    lsp_progress(token, r#"{"kind":"end"}"#)
}

/// Request 7 (`request`: 10 steps, one every 60 ms) under an idle timeout of 100 ms cut at 250 ms in all: the
/// reports at 60, 120, 180 and 240 ms (`report(step)`) each push the deadline back to 100 ms later, but 250 ms is
/// the end. Then `end` (where the dialect ends its progress) and the timeout's `reply`, at 250 ms.
async fn cut_at_the_maximum(
    mut conn: Conn,
    probe: &Probe,
    request: &str,
    report: impl Fn(u64) -> String,
    end: Option<String>,
    reply: &str,
) {
    let sent = Instant::now();
    conn.send(request).await;
    for step in 1..=4 {
        conn.expect(&report(step)).await;
        assert_about(sent.elapsed(), ms(60 * step));
    }
    if let Some(end) = end {
        conn.expect(&end).await;
    }
    conn.expect(reply).await;
    assert_about(sent.elapsed(), ms(250));
    assert_eq!(
        probe.ended(),
        [Ended::stopped(7, "progress", Some(CancelReason::Timeout))]
    );
    conn.finish_counting(Counts::new(1, 0, 1)).await;
}

#[tokio::test(start_paused = true)]
async fn mcp_progress_keeps_a_request_alive_past_its_idle_timeout() {
    let probe = Probe::new();
    let mut conn = mcp(&probe, idle(ms(10_000)));
    let sent = Instant::now();
    conn.send(r#"{"jsonrpc":"2.0","id":7,"method":"progress","params":{"steps":5,"every":60,"_meta":{"progressToken":"p-1"}}}"#)
        .await;
    probe.wait_started(7).await;
    assert_eq!(probe.deadline_of(7), Some(sent + ms(100)));
    for step in 1..=5 {
        conn.expect(&mcp_progress(r#""p-1""#, step, 5)).await;
        assert_about(sent.elapsed(), ms(60 * step));
    }
    // 300 ms in all, three times the idle timeout.
    conn.expect(r#"{"jsonrpc":"2.0","id":7,"result":{"reports":5,"token":"p-1"}}"#)
        .await;
    assert_about(sent.elapsed(), ms(300));
    assert_eq!(probe.ended(), [Ended::finished(7, "progress", None)]);
    conn.finish_counting(Counts::new(1, 1, 0)).await;
}

#[tokio::test(start_paused = true)]
async fn mcp_progress_never_keeps_a_request_past_the_maximum() {
    let probe = Probe::new();
    cut_at_the_maximum(
        mcp(&probe, idle(ms(250))),
        &probe,
        r#"{"jsonrpc":"2.0","id":7,"method":"progress","params":{"steps":10,"every":60,"_meta":{"progressToken":42}}}"#,
        |step| mcp_progress("42", step, 10),
        None,
        r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32001,"message":"Request timed out"}}"#,
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn mcp_a_gap_longer_than_the_idle_window_times_out() {
    let probe = Probe::new();
    let mut conn = mcp(&probe, idle(ms(10_000)));
    let sent = Instant::now();
    // Reports every 150 ms: the first one comes after the idle window is over.
    conn.send(r#"{"jsonrpc":"2.0","id":7,"method":"progress","params":{"steps":3,"every":150,"_meta":{"progressToken":"p-1"}}}"#)
        .await;
    conn.expect(
        r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32001,"message":"Request timed out"}}"#,
    )
    .await;
    assert_about(sent.elapsed(), ms(100));
    assert_eq!(
        probe.ended(),
        [Ended::stopped(7, "progress", Some(CancelReason::Timeout))]
    );
    conn.finish_counting(Counts::new(1, 0, 1)).await;
}

#[tokio::test(start_paused = true)]
async fn mcp_without_a_progress_token_nothing_is_sent() {
    let probe = Probe::new();
    let mut conn = mcp(&probe, TimeoutLayer::none());
    conn.send_together(&[
        r#"{"jsonrpc":"2.0","id":1,"method":"progress","params":{"steps":3,"every":10}}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"progress","params":{"steps":3,"every":10,"_meta":{}}}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":"progress","params":{"steps":3,"every":10,"_meta":{"progressToken":null}}}"#,
        // LSP's token means nothing in MCP.
        r#"{"jsonrpc":"2.0","id":4,"method":"progress","params":{"steps":3,"every":10,"workDoneToken":"wd"}}"#,
    ])
    .await;
    // Only the four replies: `req.progress()` was None for each, so not one notification.
    let replies: Vec<_> = vec![
        conn.recv().await,
        conn.recv().await,
        conn.recv().await,
        conn.recv().await,
    ];
    assert_eq!(
        tests::set_of(replies),
        tests::set_of((1..=4).map(|id| format!(
            r#"{{"jsonrpc":"2.0","id":{id},"result":{{"reports":0,"token":null}}}}"#
        )))
    );
    let mut ended = probe.ended();
    ended.sort_by_key(|e| e.id.to_string());
    assert_eq!(
        ended,
        (1..=4)
            .map(|id| Ended::finished(id, "progress", None))
            .collect::<Vec<_>>()
    );
    conn.finish_counting(Counts::new(4, 4, 0)).await;
}

#[tokio::test(start_paused = true)]
async fn without_a_progress_token_the_idle_timeout_is_reset_only_by_touch() {
    let probe = Probe::new();
    let mut conn = mcp(&probe, idle(ms(10_000)));
    let sent = Instant::now();
    // No token, no touch: nothing pushes the deadline back.
    conn.send(r#"{"jsonrpc":"2.0","id":1,"method":"progress","params":{"steps":5,"every":60}}"#)
        .await;
    conn.expect(
        r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32001,"message":"Request timed out"}}"#,
    )
    .await;
    assert_about(sent.elapsed(), ms(100));
    // No token, but the handler touches its context at each step: it runs to its end, and nothing is sent.
    let sent = Instant::now();
    conn.send(r#"{"jsonrpc":"2.0","id":2,"method":"progress","params":{"steps":5,"every":60,"touch":true}}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":2,"result":{"reports":0,"token":null}}"#)
        .await;
    assert_about(sent.elapsed(), ms(300));
    assert_eq!(
        probe.ended(),
        [
            Ended::stopped(1, "progress", Some(CancelReason::Timeout)),
            Ended::finished(2, "progress", None)
        ]
    );
    conn.finish_counting(Counts::new(2, 1, 1)).await;
}

#[tokio::test(start_paused = true)]
async fn lsp_work_done_progress_begins_reports_and_ends() {
    let probe = Probe::new();
    let mut conn = lsp(&probe, TimeoutLayer::none());
    conn.send(r#"{"jsonrpc":"2.0","id":7,"method":"progress","params":{"steps":3,"every":10,"workDoneToken":"wd-1"}}"#)
        .await;
    // begin at 33 %, report at 66 % and 100 %, then `end` when the handler drops its handle, before the reply.
    for step in 1..=3 {
        conn.expect(&lsp_report(r#""wd-1""#, step, 3)).await;
    }
    conn.expect(&lsp_end(r#""wd-1""#)).await;
    conn.expect(r#"{"jsonrpc":"2.0","id":7,"result":{"reports":3,"token":"wd-1"}}"#)
        .await;

    // A number token, one report: begin then end.
    conn.send(
        r#"{"jsonrpc":"2.0","id":8,"method":"progress","params":{"steps":1,"workDoneToken":5}}"#,
    )
    .await;
    conn.expect(&lsp_report("5", 1, 1)).await;
    conn.expect(&lsp_end("5")).await;
    conn.expect(r#"{"jsonrpc":"2.0","id":8,"result":{"reports":1,"token":5}}"#)
        .await;

    assert_eq!(
        probe.ended(),
        [
            Ended::finished(7, "progress", None),
            Ended::finished(8, "progress", None)
        ]
    );
    conn.finish_counting(Counts::new(2, 2, 0)).await;
}

#[tokio::test(start_paused = true)]
async fn lsp_without_a_work_done_token_nothing_is_sent() {
    let probe = Probe::new();
    let mut conn = lsp(&probe, TimeoutLayer::none());
    conn.send(r#"{"jsonrpc":"2.0","id":1,"method":"progress","params":{"steps":3,"every":10}}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":1,"result":{"reports":0,"token":null}}"#)
        .await;
    // MCP's token means nothing in LSP; a token that is neither a string nor an integer is no token.
    conn.send(r#"{"jsonrpc":"2.0","id":2,"method":"progress","params":{"steps":3,"_meta":{"progressToken":"p"}}}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":2,"result":{"reports":0,"token":null}}"#)
        .await;
    conn.send(r#"{"jsonrpc":"2.0","id":3,"method":"progress","params":{"steps":3,"workDoneToken":{"not":"a token"}}}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":3,"result":{"reports":0,"token":null}}"#)
        .await;
    assert_eq!(
        probe.ended(),
        (1..=3)
            .map(|id| Ended::finished(id, "progress", None))
            .collect::<Vec<_>>()
    );
    conn.finish_counting(Counts::new(3, 3, 0)).await;
}

#[tokio::test(start_paused = true)]
async fn lsp_progress_keeps_a_request_alive_and_ends_when_it_is_cut_at_the_maximum() {
    // Stopped at the maximum: its handle is dropped with it, so the progress still ends, before the reply.
    let probe = Probe::new();
    cut_at_the_maximum(
        lsp(&probe, idle(ms(250))),
        &probe,
        r#"{"jsonrpc":"2.0","id":7,"method":"progress","params":{"steps":10,"every":60,"workDoneToken":"wd-1"}}"#,
        |step| lsp_report(r#""wd-1""#, step, 10),
        Some(lsp_end(r#""wd-1""#)),
        r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32800,"message":"Request cancelled"}}"#,
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn lsp_a_peer_cancel_ends_the_progress_too() {
    let probe = Probe::new();
    let mut conn = lsp(&probe, TimeoutLayer::none());
    conn.send(r#"{"jsonrpc":"2.0","id":7,"method":"progress","params":{"steps":10,"every":60,"workDoneToken":"wd-1"}}"#)
        .await;
    conn.expect(&lsp_report(r#""wd-1""#, 1, 10)).await;
    conn.send(r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":7}}"#)
        .await;
    conn.expect(&lsp_end(r#""wd-1""#)).await;
    conn.expect(
        r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32800,"message":"Request cancelled"}}"#,
    )
    .await;
    assert_eq!(
        probe.ended(),
        [Ended::stopped(
            7,
            "progress",
            Some(CancelReason::peer(None))
        )]
    );
    conn.finish_counting(Counts::new(1, 0, 1)).await;
}

#[tokio::test(start_paused = true)]
async fn acp_has_no_progress_notification() {
    let probe = Probe::new();
    let mut conn = Conn::acp(&probe);
    conn.send(r#"{"jsonrpc":"2.0","id":1,"method":"progress","params":{"steps":3,"workDoneToken":"wd","_meta":{"progressToken":"p"}}}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":1,"result":{"reports":0,"token":null}}"#)
        .await;
    assert_eq!(probe.ended(), [Ended::finished(1, "progress", None)]);
    conn.finish_counting(Counts::new(1, 1, 0)).await;
}

#[tokio::test(start_paused = true)]
async fn reports_after_the_request_was_cancelled_are_not_sent() {
    // Cooperative mode: the handler ignores its token and goes on reporting within its grace; once the request is
    // cancelled (here at its maximum, 250 ms) its reports are not sent, and it answers a partial result at 600 ms.
    let probe = Probe::new();
    let mut conn = Conn::stack(
        CancelStack::lsp()
            .timeouts(idle(ms(250)))
            .cooperative(ms(1000)),
        &probe,
    );
    let sent = Instant::now();
    conn.send(r#"{"jsonrpc":"2.0","id":7,"method":"progress","params":{"steps":10,"every":60,"workDoneToken":"wd-1"}}"#)
        .await;
    for step in 1..=4 {
        conn.expect(&lsp_report(r#""wd-1""#, step, 10)).await;
    }
    conn.expect(&lsp_end(r#""wd-1""#)).await;
    conn.expect(r#"{"jsonrpc":"2.0","id":7,"result":{"reports":4,"token":"wd-1"}}"#)
        .await;
    assert_about(sent.elapsed(), ms(600));
    assert_eq!(
        probe.ended(),
        [Ended::finished(7, "progress", Some(CancelReason::Timeout))]
    );
    conn.finish_counting(Counts::new(1, 0, 1)).await;
}

/// A progress handle kept by a task that outlives its handler (the usual way to report from background work):
/// once the request is answered nothing more is sent for it, and `report` says so.
#[tokio::test(start_paused = true)]
async fn progress_after_the_request_completed_is_not_sent() {
    let (reported_tx, mut reported_rx) = tokio::sync::mpsc::unbounded_channel::<bool>();
    let service = ServiceBuilder::new()
        .layer(CancelStack::mcp())
        .service(service_fn(move |req: Request| {
            let reported_tx = reported_tx.clone();
            async move {
                let progress = req
                    .progress()
                    .expect("the request carried a progress token");
                tokio::spawn(async move {
                    tokio::time::sleep(ms(10)).await;
                    let sent = progress.report(ProgressUpdate::new(1.0).total(2.0));
                    let _ = reported_tx.send(sent);
                });
                Ok::<Value, BoxError>(json!("done"))
            }
        }));
    let mut conn = Conn::start(Server::new(service), Framing::Ndjson);
    conn.send(
        r#"{"jsonrpc":"2.0","id":7,"method":"work","params":{"_meta":{"progressToken":"t"}}}"#,
    )
    .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":7,"result":"done"}"#)
        .await;
    assert_eq!(
        reported_rx.recv().await,
        Some(false),
        "report says nothing was sent"
    );
    assert_eq!(conn.finish().await, Vec::<String>::new());
}

/// A handler that reports while the peer reads nothing: past the outbox's bound its reports are dropped (and
/// `report` says so) rather than buffered without bound; replies are never dropped.
#[tokio::test(start_paused = true)]
async fn progress_is_dropped_while_the_peer_is_not_reading() {
    let (reported_tx, mut reported_rx) = tokio::sync::mpsc::unbounded_channel::<(u32, bool)>();
    let service = ServiceBuilder::new()
        .layer(CancelStack::mcp())
        .service(service_fn(move |req: Request| {
            let reported_tx = reported_tx.clone();
            async move {
                let progress = req.progress().expect("a progress token");
                for step in 0..100 {
                    let sent = progress
                        .report(ProgressUpdate::new(f64::from(step)).message("x".repeat(1000)));
                    let _ = reported_tx.send((step, sent));
                }
                Ok::<Value, BoxError>(json!("done"))
            }
        }));
    let (mut client_out, server_in) = tokio::io::duplex(64 * 1024);
    // A pipe of 1 KiB the client never reads: the writer stalls at once.
    let (server_out, client_in) = tokio::io::duplex(1024);
    let server = Server::new(service).max_queued_bytes(16 * 1024);
    let outbox = server.connection().outbox().clone();
    let serving = tokio::spawn(server.serve(server_in, server_out, Framing::Ndjson));
    {
        use tokio::io::AsyncWriteExt;
        client_out
            .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"work\",\"params\":{\"_meta\":{\"progressToken\":1}}}\n")
            .await
            .unwrap();
    }
    let mut sent = Vec::new();
    for _ in 0..100 {
        sent.push(reported_rx.recv().await.unwrap().1);
    }
    let kept = sent.iter().filter(|sent| **sent).count();
    assert!(
        (10..30).contains(&kept),
        "{kept} of 100 reports of about 1 KiB queued under a 16 KiB bound"
    );
    assert!(
        sent[..kept].iter().all(|sent| *sent),
        "the first ones are sent, the rest dropped"
    );
    assert!(
        outbox.queued_bytes() < 32 * 1024,
        "{} bytes queued",
        outbox.queued_bytes()
    );
    // The peer reads everything in the end: the reports that were kept, then the reply.
    drop(client_out);
    let mut reader = tokio::io::BufReader::new(client_in);
    let mut frames = Vec::new();
    while let Some(frame) = tests::read_frame(&mut reader, Framing::Ndjson).await {
        frames.push(frame);
    }
    assert_eq!(frames.len(), kept + 1);
    assert_eq!(
        frames.last().unwrap(),
        r#"{"jsonrpc":"2.0","id":7,"result":"done"}"#
    );
    serving.await.unwrap().unwrap();
}
