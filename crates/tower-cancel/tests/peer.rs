//! `Peer` on its own: what goes out on the wire for each way a call ends, and the pending table after it.

use std::{
    future::Future,
    pin::pin,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex,
    },
    task::{Context, Poll},
    time::Duration,
};

use futures_util::task::noop_waker_ref;
use serde_json::{json, Value};
use tokio_test::{assert_pending, assert_ready, task};
use tokio_util::sync::CancellationToken;
use tower_cancel::{
    dialect::{AcpDraft, Lsp, Mcp},
    outbox::OutboxReceiver,
    Dialect, ErrorObject, Id, Outbox, Peer, PeerError, Response,
};

fn peer<D: Dialect>(dialect: D) -> (Peer, OutboxReceiver) {
    let (outbox, rx) = Outbox::new();
    (Peer::new(dialect, outbox), rx)
}

fn sent(rx: &mut OutboxReceiver) -> Value {
    serde_json::from_slice(&rx.try_recv().expect("a message was sent")).unwrap()
}

fn nothing_sent(rx: &mut OutboxReceiver) {
    assert_eq!(rx.try_recv(), None);
}

#[tokio::test]
async fn a_reply_resolves_the_call_and_empties_the_table() {
    let (peer, mut rx) = peer(Lsp);
    let mut call = task::spawn(peer.request("hover", json!({ "line": 1 })));
    assert_eq!(
        sent(&mut rx),
        json!({ "jsonrpc": "2.0", "id": 0, "method": "hover", "params": { "line": 1 } })
    );
    assert_pending!(call.poll());
    assert!(peer.dispatch_response(Response::ok(0.into(), json!("docs"))));
    assert_eq!(assert_ready!(call.poll()), Ok(json!("docs")));
    drop(call);
    nothing_sent(&mut rx);
    assert_eq!(peer.stats().pending, 0);
}

#[tokio::test]
async fn dropping_a_call_sends_exactly_one_cancel_and_the_late_reply_is_dropped() {
    let (peer, mut rx) = peer(Lsp);
    let call = peer.request("slow", ());
    sent(&mut rx);
    drop(call);
    assert_eq!(
        sent(&mut rx),
        json!({ "jsonrpc": "2.0", "method": "$/cancelRequest", "params": { "id": 0 } })
    );
    nothing_sent(&mut rx);
    assert_eq!(peer.stats().pending, 0);
    let cancelled = ErrorObject::new(-32800, "Request cancelled");
    assert!(!peer.dispatch_response(Response::error(Some(0.into()), cancelled)));
    assert_eq!(peer.stats().late_replies, 1);
}

#[tokio::test(start_paused = true)]
async fn an_lsp_timeout_sends_the_cancel_and_waits_for_the_peers_answer() {
    let (peer, mut rx) = peer(Lsp);
    let mut call = task::spawn(peer.request("slow", ()).timeout(Duration::from_millis(100)));
    sent(&mut rx);
    assert_pending!(call.poll());
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_pending!(call.poll(), "LSP keeps waiting after the cancel");
    assert_eq!(sent(&mut rx)["method"], "$/cancelRequest");
    let cancelled = ErrorObject::new(-32800, "Request cancelled");
    peer.dispatch_response(Response::error(Some(0.into()), cancelled.clone()));
    assert_eq!(
        assert_ready!(call.poll()),
        Err(PeerError::Rejected(cancelled))
    );
    drop(call);
    nothing_sent(&mut rx);
    assert_eq!(peer.stats().pending, 0);
}

#[tokio::test(start_paused = true)]
async fn an_mcp_timeout_stops_waiting_at_once_and_says_why() {
    let (peer, mut rx) = peer(Mcp);
    let mut call = task::spawn(
        peer.request("tools/call", ())
            .timeout(Duration::from_millis(100)),
    );
    sent(&mut rx);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(assert_ready!(call.poll()), Err(PeerError::TimedOut));
    assert_eq!(
        sent(&mut rx),
        json!({ "jsonrpc": "2.0", "method": "notifications/cancelled", "params": { "requestId": 0, "reason": "timed out" } })
    );
    drop(call);
    nothing_sent(&mut rx);
    assert_eq!(peer.stats().pending, 0);
    assert!(!peer.dispatch_response(Response::ok(0.into(), json!({}))));
    assert_eq!(peer.stats().late_replies, 1);
}

#[tokio::test]
async fn a_token_cancels_and_stop_waiting_overrides_the_dialect() {
    let (peer, mut rx) = peer(Lsp);
    let token = CancellationToken::new();
    let mut call = task::spawn(
        peer.request("slow", ())
            .cancel_on(token.clone())
            .wait_after_cancel(false),
    );
    sent(&mut rx);
    assert_pending!(call.poll());
    token.cancel();
    assert_eq!(assert_ready!(call.poll()), Err(PeerError::Cancelled));
    assert_eq!(sent(&mut rx)["method"], "$/cancelRequest");
    drop(call);
    nothing_sent(&mut rx);
    assert_eq!(peer.stats().pending, 0);
}

#[tokio::test]
async fn initialize_and_detached_calls_are_never_cancelled() {
    let (peer, mut rx) = peer(Lsp);
    drop(peer.request("initialize", json!({})));
    sent(&mut rx);
    nothing_sent(&mut rx);
    drop(peer.request("build", ()).detach());
    sent(&mut rx);
    nothing_sent(&mut rx);
    assert_eq!(peer.stats().pending, 0);
    assert_eq!(peer.stats().cancels_sent, 0);
}

#[tokio::test]
async fn the_acp_draft_sends_cancels_only_to_a_peer_that_declared_them() {
    let (peer, mut rx) = peer(AcpDraft::new());
    let mut init = task::spawn(peer.request("initialize", json!({ "protocolVersion": 1 })));
    sent(&mut rx);
    peer.dispatch_response(Response::ok(
        0.into(),
        json!({ "protocolVersion": 1, "agentCapabilities": {} }),
    ));
    assert!(assert_ready!(init.poll()).is_ok());
    drop(peer.request("session/prompt", ()));
    sent(&mut rx);
    nothing_sent(&mut rx);

    let (peer, mut rx) = self::peer(AcpDraft::new());
    let mut init = task::spawn(peer.request("initialize", json!({ "protocolVersion": 1 })));
    sent(&mut rx);
    peer.dispatch_response(Response::ok(
        0.into(),
        json!({ "agentCapabilities": { "cancellation": { "request": true } } }),
    ));
    assert!(assert_ready!(init.poll()).is_ok());
    drop(peer.request("session/prompt", ()));
    sent(&mut rx);
    assert_eq!(
        sent(&mut rx),
        json!({ "jsonrpc": "2.0", "method": "$/cancelRequest", "params": { "id": 1 } })
    );
}

#[tokio::test]
async fn closing_fails_pending_calls_and_later_ones() {
    let (peer, mut rx) = peer(Lsp);
    let mut call = task::spawn(peer.request("slow", ()));
    sent(&mut rx);
    assert_pending!(call.poll());
    peer.close();
    assert_eq!(assert_ready!(call.poll()), Err(PeerError::Closed));
    let mut later = task::spawn(peer.request("more", ()));
    assert_eq!(assert_ready!(later.poll()), Err(PeerError::Closed));
    drop((call, later));
    nothing_sent(&mut rx);
    assert_eq!(peer.stats().pending, 0);
    assert!(!peer.dispatch_response(Response::ok(Id::from(0), Value::Null)));
}

/// A call made on one thread while another closes the connection ends `Closed` whichever comes first: refused by
/// the closed peer, or in the table when `close` empties it. Put in the table after the clear, it would wait for a
/// reply no one will ever read. A bounded stress on real threads; the loom model `loom_a_peer_call_racing_close`
/// explores every interleaving of the same race.
#[test]
fn a_call_racing_close_on_another_thread_is_never_left_waiting() {
    const ROUNDS: usize = 50_000;
    let race = Arc::new(Race::default());
    let closer = std::thread::spawn({
        let race = race.clone();
        move || {
            for round in 1..=ROUNDS {
                spin_until(&race.offered, round);
                let peer = race.peer.lock().unwrap().take().unwrap();
                race.armed.store(round, Ordering::Release);
                spin_until(&race.go, round);
                // A different head start each round, so that the close lands on every step of the call.
                for _ in 0..round % 256 {
                    std::hint::spin_loop();
                }
                peer.close();
                race.closed.store(round, Ordering::Release);
            }
        }
    });
    let mut left_waiting = 0;
    for round in 1..=ROUNDS {
        // The receiver lives through the round: a send that fails would end the call for another reason.
        let (peer, _rx) = peer(Lsp);
        *race.peer.lock().unwrap() = Some(peer.clone());
        race.offered.store(round, Ordering::Release);
        spin_until(&race.armed, round);
        race.go.store(round, Ordering::Release);
        let call = peer.request("workspace/symbol", ());
        spin_until(&race.closed, round);
        let mut call = pin!(call);
        match call
            .as_mut()
            .poll(&mut Context::from_waker(noop_waker_ref()))
        {
            Poll::Ready(outcome) => {
                assert_eq!(outcome, Err(PeerError::Closed));
                assert_eq!(peer.stats().pending, 0, "the table is empty after close");
            }
            Poll::Pending => {
                assert_eq!(peer.stats().pending, 1, "left waiting in the table");
                left_waiting += 1;
            }
        }
    }
    closer.join().unwrap();
    assert_eq!(
        left_waiting, 0,
        "{left_waiting} of {ROUNDS} calls made while the connection closed were left waiting forever"
    );
}

/// The two threads of the race above, in lockstep: the peer handed over, then both released at once.
#[derive(Default)]
struct Race {
    peer: Mutex<Option<Peer>>,
    offered: AtomicUsize,
    armed: AtomicUsize,
    go: AtomicUsize,
    closed: AtomicUsize,
}

/// Wait for `flag` to reach `round`, spinning (a sleeping thread would wake too late to race) but yielding now
/// and then, for a machine with fewer cores than threads.
fn spin_until(flag: &AtomicUsize, round: usize) {
    let mut spins = 0u32;
    while flag.load(Ordering::Acquire) < round {
        spins += 1;
        if spins % 1024 == 0 {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

#[tokio::test]
async fn a_childs_calls_are_cancelled_with_their_parent() {
    let (peer, mut rx) = peer(Mcp);
    let parent = CancellationToken::new();
    let child = peer.child_of(parent.clone());
    let mut nested = task::spawn(child.request("sampling/createMessage", ()));
    let mut unrelated = task::spawn(peer.request("roots/list", ()));
    sent(&mut rx);
    sent(&mut rx);
    assert_pending!(nested.poll());
    parent.cancel();
    assert_eq!(assert_ready!(nested.poll()), Err(PeerError::Cancelled));
    assert_eq!(
        sent(&mut rx),
        json!({ "jsonrpc": "2.0", "method": "notifications/cancelled", "params": { "requestId": 0, "reason": "parent request cancelled" } })
    );
    assert_pending!(unrelated.poll(), "a call of the parent peer is not a child");
    nothing_sent(&mut rx);
    assert_eq!(peer.stats().pending, 1);
}

fn progress(token: i64, progress: u32) -> tower_cancel::Request {
    tower_cancel::Request::notification(
        "notifications/progress",
        json!({ "progressToken": token, "progress": progress, "total": 10 }),
    )
}

#[tokio::test(start_paused = true)]
async fn progress_pushes_an_idle_timeout_back_but_never_past_the_maximum() {
    let (peer, mut rx) = peer(Mcp);
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    let mut call = task::spawn(
        peer.request_with_progress("tools/call", json!({ "name": "index" }), move |update| {
            log.lock().unwrap().push(update.progress)
        })
        .timeout(Duration::from_millis(100))
        .reset_on_progress(Duration::from_millis(250)),
    );
    assert_eq!(
        sent(&mut rx),
        json!({ "jsonrpc": "2.0", "id": 0, "method": "tools/call",
                "params": { "name": "index", "_meta": { "progressToken": 0 } } })
    );
    for (at, step) in [(80, 1), (160, 2), (240, 3)] {
        tokio::time::sleep_until(tokio::time::Instant::now() + Duration::from_millis(80)).await;
        assert!(peer.dispatch_progress(&progress(0, step)), "at {at} ms");
        assert_pending!(call.poll(), "still running at {at} ms");
    }
    assert!(
        !peer.dispatch_progress(&progress(7, 1)),
        "an unknown token is not consumed"
    );
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(
        assert_ready!(call.poll()),
        Err(PeerError::TimedOut),
        "cut at the 250 ms maximum"
    );
    assert_eq!(sent(&mut rx)["method"], "notifications/cancelled");
    assert_eq!(*seen.lock().unwrap(), vec![1.0, 2.0, 3.0]);
    drop(call);
    assert_eq!(peer.stats().pending, 0);
    assert!(!peer.dispatch_progress(&progress(0, 4)), "the call is gone");
}

#[tokio::test(start_paused = true)]
async fn without_progress_an_idle_timeout_fires_on_time() {
    let (peer, mut rx) = peer(Mcp);
    let mut call = task::spawn(
        peer.request_with_progress("tools/call", json!({}), |_| {})
            .timeout(Duration::from_millis(100))
            .reset_on_progress(Duration::from_secs(10)),
    );
    sent(&mut rx);
    tokio::time::sleep(Duration::from_millis(99)).await;
    assert_pending!(call.poll());
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(assert_ready!(call.poll()), Err(PeerError::TimedOut));
}

#[tokio::test]
async fn lsp_asks_for_progress_with_a_work_done_token() {
    let (peer, mut rx) = peer(Lsp);
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    let _call = peer.request_with_progress("workspace/symbol", json!({ "query": "x" }), move |u| {
        log.lock().unwrap().push((u.progress, u.message))
    });
    assert_eq!(
        sent(&mut rx)["params"],
        json!({ "query": "x", "workDoneToken": 0 })
    );
    let report = tower_cancel::Request::notification(
        "$/progress",
        json!({ "token": 0, "value": { "kind": "report", "percentage": 40, "message": "half" } }),
    );
    assert!(peer.dispatch_progress(&report));
    assert_eq!(*seen.lock().unwrap(), vec![(40.0, Some("half".to_owned()))]);
}

#[tokio::test(start_paused = true)]
async fn a_panicking_progress_callback_loses_its_report_not_the_call() {
    let (peer, mut rx) = peer(Mcp);
    let mut call = task::spawn(
        peer.request_with_progress("tools/call", json!({}), |_| {
            panic!("the progress callback panics on purpose")
        })
        .timeout(Duration::from_millis(100))
        .reset_on_progress(Duration::from_secs(10)),
    );
    sent(&mut rx);
    tokio::time::sleep(Duration::from_millis(80)).await;
    assert!(
        peer.dispatch_progress(&progress(0, 1)),
        "consumed, though its callback panicked"
    );
    assert!(peer.dispatch_progress(&progress(0, 2)), "and the next one");
    tokio::time::sleep(Duration::from_millis(70)).await;
    assert_pending!(
        call.poll(),
        "the reports still pushed the idle timeout back to 180 ms"
    );
    assert!(peer.dispatch_response(Response::ok(0.into(), json!("done"))));
    assert_eq!(assert_ready!(call.poll()), Ok(json!("done")));
    drop(call);
    nothing_sent(&mut rx);
    assert_eq!(peer.stats().pending, 0);
}

#[tokio::test(start_paused = true)]
async fn an_idle_timeout_is_the_same_whichever_builder_comes_first() {
    let (peer, mut rx) = peer(Mcp);
    let mut call = task::spawn(
        peer.request_with_progress("tools/call", json!({}), |_| {})
            .reset_on_progress(Duration::from_millis(150))
            .timeout(Duration::from_millis(100)),
    );
    sent(&mut rx);
    tokio::time::sleep(Duration::from_millis(90)).await;
    assert!(peer.dispatch_progress(&progress(0, 1)));
    tokio::time::sleep(Duration::from_millis(59)).await;
    assert_pending!(call.poll(), "pushed back from 100 ms");
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(
        assert_ready!(call.poll()),
        Err(PeerError::TimedOut),
        "cut at the 150 ms maximum"
    );
}

#[tokio::test]
async fn mcp_cancels_say_why_the_call_stopped() {
    let (peer, mut rx) = peer(Mcp);
    let token = CancellationToken::new();
    let mut call = task::spawn(peer.request("tools/call", ()).cancel_on(token.clone()));
    sent(&mut rx);
    assert_pending!(call.poll());
    token.cancel();
    assert_eq!(assert_ready!(call.poll()), Err(PeerError::Cancelled));
    assert_eq!(
        sent(&mut rx),
        json!({ "jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": { "requestId": 0, "reason": "cancelled locally: cancelled by the caller" } })
    );
    drop(peer.request("tools/call", ()));
    sent(&mut rx);
    assert_eq!(
        sent(&mut rx),
        json!({ "jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": { "requestId": 1, "reason": "cancelled locally: caller went away" } })
    );
    nothing_sent(&mut rx);
    assert_eq!(peer.stats().pending, 0);
}

#[tokio::test(start_paused = true)]
async fn a_handler_gives_its_deadline_to_another_connections_peer() {
    use tower::{service_fn, ServiceBuilder, ServiceExt};
    use tower_cancel::{timeout::TimeoutLayer, BoxError, CancelStack, Request};

    // A proxy: its MCP handler calls a language server on another connection, with a long timeout of its own.
    let (other, mut rx) = peer(Lsp);
    let outcome = Arc::new(Mutex::new(None));
    let seen = outcome.clone();
    let proxy = other.clone();
    let service = ServiceBuilder::new()
        .layer(CancelStack::mcp().timeouts(TimeoutLayer::none().from_meta("timeoutMs")))
        .service(service_fn(move |req: Request| {
            let (proxy, seen) = (proxy.clone(), seen.clone());
            async move {
                let ctx = req.context().expect("behind a CancelLayer");
                let call = proxy
                    .child_of_context(ctx)
                    .request("textDocument/hover", json!({ "line": 1 }))
                    .timeout(Duration::from_secs(10));
                let result = call.await;
                *seen.lock().unwrap() = Some(result.clone());
                Ok::<_, BoxError>(json!(format!("{result:?}")))
            }
        }));
    let start = tokio::time::Instant::now();
    let request = Request::new(1, "tools/call", json!({ "_meta": { "timeoutMs": 250 } }));
    let reply = service.oneshot(request).await.unwrap().unwrap();

    assert_eq!(start.elapsed(), Duration::from_millis(250));
    assert_eq!(
        reply.outcome.unwrap_err(),
        ErrorObject::new(-32001, "Request timed out")
    );
    assert_eq!(
        sent(&mut rx),
        json!({ "jsonrpc": "2.0", "id": 0, "method": "textDocument/hover",
                "params": { "line": 1, "_meta": { "timeoutMs": 250 } } })
    );
    assert_eq!(
        sent(&mut rx),
        json!({ "jsonrpc": "2.0", "method": "$/cancelRequest", "params": { "id": 0 } })
    );
    nothing_sent(&mut rx);
    // LSP waits for the answer to its cancel: the handler was stopped waiting, at the deadline.
    assert_eq!(*outcome.lock().unwrap(), None);
    assert_eq!(other.stats().pending, 0);
}

#[tokio::test]
async fn a_handle_without_a_deadline_sends_the_params_as_they_are() {
    let (peer, mut rx) = peer(Mcp);
    let child = peer.child_of(CancellationToken::new());
    drop(child.request("tools/list", json!(null)).detach());
    assert_eq!(
        sent(&mut rx),
        json!({ "jsonrpc": "2.0", "id": 0, "method": "tools/list" })
    );
}
