//! Closing the connection (or dropping `serve`) cancels everything in flight with reason `Disconnect`; `serve`
//! returns `Ok` and the registry is empty.

use std::{ops::RangeInclusive, time::Duration};

use serde_json::json;
use tests::{assert_about, ms, set_of, Conn, Counts, End, Ended, Probe};
use tokio::time::Instant;
use tower::ServiceBuilder;
use tower_cancel::{CancelReason, CancelStack, PeerError};
use tower_cancel_io::{Framing, Server};

/// Send the `hang` requests `ids`, each once the one before it runs, and wait until the last one runs.
async fn hanging(conn: &mut Conn, probe: &Probe, ids: RangeInclusive<i64>) {
    for id in ids {
        conn.send(&format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"hang"}}"#))
            .await;
        probe.wait_started(id).await;
    }
}

fn stopped_by_disconnect(probe: &Probe, ids: &[i64]) {
    for &id in ids {
        let ended = probe
            .ended_of(id)
            .unwrap_or_else(|| panic!("handler {id} still running"));
        assert_eq!(ended.end, End::Stopped, "{ended:?}");
        assert_eq!(ended.reason, Some(CancelReason::Disconnect), "{ended:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn lsp_closing_the_sending_side_cancels_everything_in_flight() {
    let probe = Probe::new();
    let mut conn = Conn::lsp(&probe);
    conn.send(r#"{"jsonrpc":"2.0","id":1,"method":"echo"}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":1,"result":null}"#)
        .await;
    hanging(&mut conn, &probe, 2..=4).await;
    assert_eq!(conn.registry().len(), 3);
    let counts_before = conn.counts();

    // The peer closes its end (as a client closing the server's stdin); it still reads what the server writes.
    let (rest, counts) = conn.finish_counted().await;
    // LSP answers a cancelled request, whatever the source: the replies the server could still write.
    assert_eq!(
        set_of(rest),
        set_of((2..=4).map(|id| format!(
            r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-32800,"message":"Request cancelled"}}}}"#
        )))
    );
    stopped_by_disconnect(&probe, &[2, 3, 4]);
    assert_eq!(probe.running(), 0);
    assert_eq!(counts_before, Counts::new(4, 1, 0));
    assert_eq!(counts, Counts::new(4, 1, 3));
}

#[tokio::test(start_paused = true)]
async fn mcp_closing_cancels_everything_in_flight_and_sends_nothing() {
    let probe = Probe::new();
    let mut conn = Conn::mcp(&probe);
    hanging(&mut conn, &probe, 1..=3).await;
    let registry = conn.registry().clone();
    conn.finish_quiet().await;
    stopped_by_disconnect(&probe, &[1, 2, 3]);
    assert_eq!(Counts::of(&registry), Counts::new(3, 0, 3));
}

#[tokio::test(start_paused = true)]
async fn a_peer_that_vanishes_entirely_is_a_disconnect() {
    // Both directions dropped at once: the server's replies to the cancelled requests cannot be written, which
    // is not an error of this side.
    let probe = Probe::new();
    let mut conn = Conn::acp(&probe);
    hanging(&mut conn, &probe, 1..=2).await;
    let registry = conn.registry().clone();
    conn.vanish().await;
    stopped_by_disconnect(&probe, &[1, 2]);
    assert_eq!(Counts::of(&registry), Counts::new(2, 0, 2));
}

#[cfg(unix)]
#[tokio::test(start_paused = true)]
async fn over_a_unix_socket_pair_dropping_the_write_half_is_a_disconnect() {
    let probe = Probe::new();
    let service = ServiceBuilder::new()
        .layer(CancelStack::lsp())
        .service(probe.service());
    let (client, server) = tokio::net::UnixStream::pair().unwrap();
    let mut conn = Conn::over(
        Server::new(service),
        Framing::ContentLength,
        server.into_split(),
        client.into_split(),
    );
    conn.send(r#"{"jsonrpc":"2.0","id":1,"method":"echo","params":"over a socket"}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":1,"result":"over a socket"}"#)
        .await;
    conn.send(r#"{"jsonrpc":"2.0","id":2,"method":"hang"}"#)
        .await;
    probe.wait_started(2).await;
    // Dropping the client's `OwnedWriteHalf` shuts the socket down for writing: the server reads EOF.
    let (rest, counts) = conn.finish_counted().await;
    assert_eq!(
        rest,
        [r#"{"jsonrpc":"2.0","id":2,"error":{"code":-32800,"message":"Request cancelled"}}"#]
    );
    stopped_by_disconnect(&probe, &[2]);
    assert_eq!(counts, Counts::new(2, 1, 1));
}

#[tokio::test(start_paused = true)]
async fn cooperative_handlers_wind_down_on_disconnect() {
    let probe = Probe::new();
    let mut conn = Conn::stack(
        CancelStack::lsp().cooperative(Duration::from_secs(5)),
        &probe,
    );
    conn.send(r#"{"jsonrpc":"2.0","id":1,"method":"partial"}"#)
        .await;
    probe.wait_started(1).await;
    let (rest, counts) = conn.finish_counted().await;
    assert_eq!(
        rest,
        [r#"{"jsonrpc":"2.0","id":1,"result":{"partial":true}}"#]
    );
    assert_eq!(
        probe.ended(),
        [Ended::finished(
            1,
            "partial",
            Some(CancelReason::Disconnect)
        )]
    );
    assert_eq!(counts, Counts::new(1, 0, 1));
}

#[tokio::test(start_paused = true)]
async fn what_cannot_be_cancelled_is_dropped_after_the_close_grace() {
    // `initialize` is never cancellable, so the disconnect does not reach it: it gets the close grace to finish,
    // and is dropped when the grace is over.
    let probe = Probe::new();
    let mut conn = Conn::serve_configured(
        CancelStack::lsp(),
        &probe,
        Framing::ContentLength,
        |server| server.close_grace(ms(500)),
    );
    conn.send(r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"ms":60000}}"#)
        .await;
    probe.wait_started(0).await;
    let registry = conn.registry().clone();
    let closed_at = Instant::now();
    conn.finish_quiet().await;
    assert_about(closed_at.elapsed(), ms(500));
    assert_eq!(probe.ended(), [Ended::stopped(0, "initialize", None)]);
    assert_eq!(Counts::of(&registry), Counts::default(), "never registered");
}

#[tokio::test(start_paused = true)]
async fn an_idle_connection_closes_cleanly() {
    let probe = Probe::new();
    let conn = Conn::mcp(&probe);
    let registry = conn.registry().clone();
    conn.finish_quiet().await;
    assert_eq!(Counts::of(&registry), Counts::default());
}

/// Dropping the `serve` future (the usual `select!` against a signal, or aborting its task) is a disconnect too:
/// the requests in flight are cancelled and the peer's pending calls fail with `Closed`, rather than wait forever.
#[tokio::test(start_paused = true)]
async fn dropping_serve_cancels_what_is_in_flight_and_fails_the_peers_calls() {
    let probe = Probe::new();
    let server = Server::with_stack(CancelStack::lsp(), probe.service());
    let peer = server.peer().expect("the stack's dialect gives a peer");
    let registry = server.registry().clone();
    let (mut client_out, server_in) = tokio::io::duplex(64 * 1024);
    let (server_out, client_in) = tokio::io::duplex(64 * 1024);
    let serving = tokio::spawn(server.serve(server_in, server_out, Framing::ContentLength));
    {
        use tokio::io::AsyncWriteExt;
        let hang = tests::frame(
            r#"{"jsonrpc":"2.0","id":1,"method":"hang"}"#,
            Framing::ContentLength,
        );
        client_out.write_all(hang.as_bytes()).await.unwrap();
    }
    probe.wait_started(1).await;
    // A call the server makes to its client from a background task (not a request's child).
    let call = tokio::spawn(peer.request("window/showMessageRequest", json!({ "message": "hi" })));
    let mut reader = tokio::io::BufReader::new(client_in);
    let sent = tests::read_frame(&mut reader, Framing::ContentLength).await;
    assert!(sent.is_some_and(|frame| frame.contains("window/showMessageRequest")));

    serving.abort();
    let _ = serving.await;
    let outcome = tokio::time::timeout(Duration::from_secs(3600), call)
        .await
        .expect("the call ended")
        .unwrap();
    assert_eq!(outcome, Err(PeerError::Closed));
    assert_eq!(peer.stats().pending, 0);
    assert_eq!(
        probe.ended_of(1),
        Some(Ended::stopped(1, "hang", Some(CancelReason::Disconnect)))
    );
    assert!(registry.is_empty());
}

/// A connection closing with many requests in flight cancels them a batch at a time, giving the runtime's other
/// tasks a turn between batches: another connection served by the same (single) worker is answered while the close
/// is still under way, not after the last of its thousands of cancels.
#[tokio::test]
async fn a_connection_closing_with_many_requests_lets_others_be_served_meanwhile() {
    // On a task: the test's own future is polled only every 61 tasks of the runtime (tokio's `block_on`), which
    // would miss the turns under test.
    tokio::spawn(closing_with_many_requests(None, BAsks::WhileCancelling))
        .await
        .unwrap();
}

/// The same with both connections in one scope, whose table the closing one holds thousands of requests in: the
/// close walks that table a chunk at a time, so the other connection's requests enter and leave it, and are
/// answered, between the close's chunks and batches; and they are neither cancelled by the close nor missed by it.
#[tokio::test]
async fn a_connection_closing_with_many_requests_lets_another_of_its_scope_be_served_meanwhile() {
    let scope = tower_cancel::scope::Scope::with_dialect(tower_cancel::dialect::Lsp);
    tokio::spawn(closing_with_many_requests(
        Some(scope),
        BAsks::WhileCancelling,
    ))
    .await
    .unwrap();
}

/// After its cancels, a closing connection answers its thousands of settled requests (-32800 each) a batch at a
/// time too: another connection on the same worker is answered before the closing one has written its last reply.
#[tokio::test]
async fn a_connection_answering_many_cancelled_requests_lets_others_be_served_meanwhile() {
    tokio::spawn(closing_with_many_requests(None, BAsks::WhileAnswering))
        .await
        .unwrap();
}

/// When, in A's close, B sends its requests.
#[derive(Clone, Copy, PartialEq)]
enum BAsks {
    /// Once A's close has cancelled its first request.
    WhileCancelling,
    /// Once A's close has cancelled all of them, while its read loop answers them.
    WhileAnswering,
}

async fn closing_with_many_requests(shared: Option<tower_cancel::scope::Scope>, b_asks: BAsks) {
    use std::sync::{Arc, Mutex};

    use tokio::io::AsyncWriteExt;
    use tokio_util::sync::CancellationToken;
    use tower_cancel::{BoxError, Request};

    const HELD: usize = 5_000;
    let tokens: Arc<Mutex<Vec<CancellationToken>>> = Arc::default();
    let handler = {
        let tokens = tokens.clone();
        tower::service_fn(move |req: Request| {
            let tokens = tokens.clone();
            async move {
                if req.method() == "hold" {
                    let token = req.context().expect("a context").token().clone();
                    tokens.lock().unwrap().push(token);
                    std::future::pending::<()>().await;
                }
                Ok::<_, BoxError>(json!("pong"))
            }
        })
    };
    let cancelled = || {
        tokens
            .lock()
            .unwrap()
            .iter()
            .filter(|token| token.is_cancelled())
            .count()
    };
    let connect = || {
        let mut server = Server::with_stack(CancelStack::lsp(), handler.clone());
        if let Some(scope) = &shared {
            server = server.in_scope(scope.clone());
        }
        let registry = server.registry().clone();
        // Room for every reply the closing connection writes, so that its writer never waits for this test.
        let (client_out, server_in) = tokio::io::duplex(4 << 20);
        let (server_out, client_in) = tokio::io::duplex(4 << 20);
        let serving = tokio::spawn(server.serve(server_in, server_out, Framing::ContentLength));
        (
            client_out,
            tokio::io::BufReader::new(client_in),
            serving,
            registry,
        )
    };
    let (mut a_out, _a_in, a_serving, a_registry) = connect();
    let (mut b_out, mut b_in, _b_serving, _) = connect();

    for id in 0..HELD {
        let hold = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"hold"}}"#);
        let frame = tests::frame(&hold, Framing::ContentLength);
        a_out.write_all(frame.as_bytes()).await.unwrap();
    }
    while tokens.lock().unwrap().len() < HELD {
        turn().await;
    }

    // A's client hangs up; once its close has begun, B sends a request.
    drop(a_out);
    let begun = match b_asks {
        BAsks::WhileCancelling => 1,
        BAsks::WhileAnswering => HELD,
    };
    while cancelled() < begun {
        turn().await;
    }
    // B's requests use the ids of A's held ones: in a shared scope, ids are per connection.
    for id in 1..=3 {
        let ping = tests::frame(
            &format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#),
            Framing::ContentLength,
        );
        b_out.write_all(ping.as_bytes()).await.unwrap();
        let reply = tests::read_frame(&mut b_in, Framing::ContentLength).await;
        assert_eq!(
            reply,
            Some(format!(r#"{{"jsonrpc":"2.0","id":{id},"result":"pong"}}"#))
        );
    }
    match b_asks {
        BAsks::WhileCancelling => assert!(
            cancelled() < HELD,
            "B was answered only after all {HELD} of A's requests were cancelled"
        ),
        BAsks::WhileAnswering => assert!(
            !a_serving.is_finished(),
            "B was answered only after A had answered all {HELD} of its cancelled requests"
        ),
    }

    a_serving.await.unwrap().unwrap();
    assert_eq!(cancelled(), HELD);
    assert!(a_registry.is_empty(), "A's requests all left the table");
}

/// Go to the back of the runtime's queue once. Not `tokio::task::yield_now`, which defers its wake-up until the
/// runtime next polls its I/O driver (every 61 tasks run), far later than the turn under test.
async fn turn() {
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if std::mem::replace(&mut yielded, true) {
            return std::task::Poll::Ready(());
        }
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    })
    .await;
}
