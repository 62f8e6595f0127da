//! Loom models of a request's lifecycle: the real cancel layer (its response future, the registry, the lifecycle)
//! raced against every source of cancellation, under every interleaving loom finds within its preemption bound.
//!
//! Each model runs one request of the LSP dialect through [`Cancel`] on one loom thread and the sources that race
//! it on others: a peer's cancel (through the registry, as the driver delivers it), a timeout (the lifecycle
//! cancelled through the request's context, as the timeout layer does), a closed connection (`cancel_all`) and
//! the response future being dropped. After every interleaving it checks the invariants of ARCHITECTURE.md:
//!
//! - exactly one outcome: the handler's result with the request settled completed, or the cancelled error with
//!   the reason of the one source whose cancel won; no two sources both win;
//! - the registry entry removed, the counters add up to one settlement;
//! - the token fired if and only if the request ended cancelled, whenever the handler asked for it.
//!
//! One more model races a [`Peer`] call being made against the connection closing on another thread: the call ends
//! `Closed` or waits while the connection is open, the pending table is empty once closed, and no call is left
//! waiting for a reply that can no longer come.
//!
//! `LOOM_MAX_PREEMPTIONS` sets the preemption bound (default [`DEFAULT_PREEMPTIONS`]). Each model prints how many
//! interleavings it explored; run with `--nocapture` to see them.

use std::{
    future::Future,
    pin::pin,
    sync::{
        atomic::{AtomicBool, AtomicUsize, Ordering},
        Arc, Mutex as StdMutex,
    },
    task::{Context, Poll},
};

use futures_util::task::noop_waker_ref;
use loom::thread;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;
use tower::{service_fn, Layer, Service};

use crate::{
    cancel::Cancel,
    dialect::Lsp,
    lifecycle::{Lifecycle, SharedLifecycle},
    reason::CancelReason,
    registry::{CancelAck, CancelOutcome, Registry},
    BoxError, CancelLayer, Cancelled, Id, Outbox, Peer, PeerError, Request, RequestContext,
};

/// The preemption bound when `LOOM_MAX_PREEMPTIONS` is not set: small enough for CI, large enough that every
/// pair of sources can interleave at every step of the request.
const DEFAULT_PREEMPTIONS: usize = 3;

const ID: i64 = 1;

/// Run `model` under loom and report how many interleavings it took.
fn explore(name: &str, model: impl Fn() + Sync + Send + 'static) {
    let runs = Arc::new(AtomicUsize::new(0));
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(DEFAULT_PREEMPTIONS);
    }
    let bound = builder.preemption_bound;
    let counter = runs.clone();
    builder.check(move || {
        counter.fetch_add(1, Ordering::Relaxed);
        model();
    });
    println!(
        "loom: {name}: {} interleavings explored (preemption bound {bound:?})",
        runs.load(Ordering::Relaxed)
    );
}

/// What the handler does once called.
#[derive(Clone, Copy)]
enum Handler {
    /// Asks for its token, then answers at once.
    Answers,
    /// Asks for its token, then never answers: only having its future dropped ends it.
    Hangs,
}

/// What the handler left behind for the checks: its context (for the timeout source), its token, and whether its
/// future was dropped before it answered.
#[derive(Default)]
struct Seen {
    // Handed over through loom's lock, as a real timeout layer receives the context with the request: loom then
    // knows the lifecycle was made before the timeout's thread touches it.
    context: loom::sync::Mutex<Option<RequestContext>>,
    token: StdMutex<Option<CancellationToken>>,
    stopped: AtomicBool,
}

impl Seen {
    fn context(&self) -> Option<RequestContext> {
        self.context.lock().unwrap().clone()
    }

    fn token(&self) -> Option<CancellationToken> {
        self.token.lock().unwrap().clone()
    }
}

struct StopGuard(Arc<Seen>);

impl Drop for StopGuard {
    fn drop(&mut self) {
        self.0.stopped.store(true, Ordering::SeqCst);
    }
}

type Layered = Cancel<tower::util::BoxCloneService<Request, Value, BoxError>, Lsp>;

/// The cancel layer over a scripted handler, with its registry.
fn layered(handler: Handler, seen: &Arc<Seen>) -> (Layered, Registry) {
    let registry = Registry::new();
    let seen = seen.clone();
    let inner = service_fn(move |request: Request| {
        let context = request
            .context()
            .expect("the cancel layer gives a context")
            .clone();
        *seen.token.lock().unwrap() = Some(context.token().clone());
        *seen.context.lock().unwrap() = Some(context);
        // Moved into the future, so it is dropped with it even if the future never ran.
        let guard = matches!(handler, Handler::Hangs).then(|| StopGuard(seen.clone()));
        async move {
            let _guard = guard;
            match handler {
                Handler::Answers => Ok::<_, BoxError>(json!("answered")),
                Handler::Hangs => std::future::pending().await,
            }
        }
    });
    let service = CancelLayer::new(Lsp)
        .registry(registry.clone())
        .layer(tower::util::BoxCloneService::new(inner));
    (service, registry)
}

fn call(service: &mut Layered) -> impl Future<Output = Result<Value, BoxError>> {
    let mut cx = Context::from_waker(noop_waker_ref());
    assert!(
        service.poll_ready(&mut cx).is_ready(),
        "the cancel layer is always ready"
    );
    service.call(Request::new(ID, "textDocument/hover", json!({})))
}

/// A peer's cancel of the request, delivered as the driver delivers it: through the registry.
fn spawn_peer_cancel(registry: &Registry) -> thread::JoinHandle<(CancelReason, CancelOutcome)> {
    let registry = registry.clone();
    thread::spawn(move || {
        let reason = CancelReason::peer(None);
        (reason.clone(), registry.cancel(&Id::from(ID), reason))
    })
}

/// The reason a request ended cancelled with, or `None` if its handler's answer was the outcome.
fn cancelled_reason(result: &Result<Value, BoxError>) -> Option<CancelReason> {
    match result {
        Ok(value) => {
            assert_eq!(value, &json!("answered"), "only the handler's own answer");
            None
        }
        Err(error) => Some(
            error
                .downcast_ref::<Cancelled>()
                .unwrap_or_else(|| panic!("only a cancel can fail the request: {error}"))
                .reason()
                .clone(),
        ),
    }
}

/// The checks every model shares, given how the request ended (`None`: cancelled for that reason, or answered)
/// and which sources' cancels won.
fn check_one_outcome(
    ended: Option<CancelReason>,
    winners: &[CancelReason],
    registry: &Registry,
    seen: &Seen,
) {
    let stats = registry.stats();
    assert_eq!(stats.in_flight, 0, "the entry is removed");
    assert_eq!(stats.registered, 1);
    assert_eq!(
        stats.completed + stats.cancelled,
        1,
        "one settlement counted"
    );
    assert!(winners.len() <= 1, "two sources both won: {winners:?}");
    match &ended {
        None => {
            assert!(winners.is_empty(), "answered, yet {winners:?} won");
            assert_eq!(stats.completed, 1);
        }
        Some(reason) => {
            assert_eq!(stats.cancelled, 1);
            // A source that won is the reason; a request that started cancelled (its cancel was remembered) or
            // was dropped has no winner among the sources' return values.
            if let Some(winner) = winners.first() {
                assert_eq!(reason, winner, "the reply names the source that won");
            }
        }
    }
    if let Some(token) = seen.token() {
        assert_eq!(
            token.is_cancelled(),
            ended.is_some(),
            "the token fires if and only if the request ended cancelled"
        );
    }
}

fn winners(outcomes: impl IntoIterator<Item = (CancelReason, CancelOutcome)>) -> Vec<CancelReason> {
    outcomes
        .into_iter()
        .filter(|(_, outcome)| *outcome == CancelOutcome::Cancelled)
        .map(|(reason, _)| reason)
        .collect()
}

#[test]
fn loom_completion_against_a_peer_cancel() {
    explore("completion against a peer cancel", || {
        let seen = Arc::new(Seen::default());
        let (mut service, registry) = layered(Handler::Answers, &seen);
        let peer = spawn_peer_cancel(&registry);
        let result = loom::future::block_on(call(&mut service));
        let (reason, outcome) = peer.join().unwrap();
        let ended = cancelled_reason(&result);
        if outcome == CancelOutcome::Remembered && ended.is_none() {
            // The cancel came after the request had left the table: it is remembered, harmlessly.
            assert_eq!(registry.stats().remembered, 1);
        }
        if outcome == CancelOutcome::Remembered && ended.is_some() {
            assert_eq!(
                ended.as_ref(),
                Some(&reason),
                "an early cancel starts the request cancelled"
            );
        }
        check_one_outcome(ended, &winners([(reason, outcome)]), &registry, &seen);
    });
}

#[test]
fn loom_completion_against_a_timeout_and_a_peer_cancel() {
    explore("completion against a timeout and a peer cancel", || {
        let seen = Arc::new(Seen::default());
        let (mut service, registry) = layered(Handler::Answers, &seen);
        let peer = spawn_peer_cancel(&registry);
        // The timeout layer holds the request's context from the moment the request reaches it and, on expiry,
        // cancels the lifecycle with reason Timeout. A timer that fires before then has nothing to cancel.
        let timeout = thread::spawn({
            let seen = seen.clone();
            move || {
                let context = seen.context()?;
                let won = context.cancel_with(CancelReason::Timeout);
                Some((
                    CancelReason::Timeout,
                    if won {
                        CancelOutcome::Cancelled
                    } else {
                        CancelOutcome::AlreadySettled
                    },
                ))
            }
        });
        let result = loom::future::block_on(call(&mut service));
        let peer = peer.join().unwrap();
        let timeout = timeout.join().unwrap();
        let ended = cancelled_reason(&result);
        check_one_outcome(
            ended,
            &winners([peer].into_iter().chain(timeout)),
            &registry,
            &seen,
        );
    });
}

#[test]
fn loom_an_acknowledged_cancel_against_completion_and_a_timeout() {
    // ABP's cancel-result: the acknowledgment must say what the lifecycle decided. Cancelled: this cancel's reason
    // is the outcome; already cancelled: another source's is; already completed: the handler's answer is; not
    // found: the request had not arrived, and starts out cancelled by this cancel.
    explore(
        "an acknowledged cancel against completion and a timeout",
        || {
            let seen = Arc::new(Seen::default());
            let (mut service, registry) = layered(Handler::Answers, &seen);
            let registry = registry.remember_finished(16, 4096);
            let acknowledger = thread::spawn({
                let registry = registry.clone();
                move || registry.acknowledge(&Id::from(ID), CancelReason::peer(None))
            });
            let timeout = thread::spawn({
                let seen = seen.clone();
                move || {
                    seen.context()
                        .map(|context| context.cancel_with(CancelReason::Timeout))
                }
            });
            let result = loom::future::block_on(call(&mut service));
            let ack = acknowledger.join().unwrap();
            let timed_out = timeout.join().unwrap() == Some(true);
            let ended = cancelled_reason(&result);
            match ack {
                CancelAck::Cancelled | CancelAck::NotFound => {
                    assert_eq!(ended, Some(CancelReason::peer(None)), "{ack:?}");
                    assert!(!timed_out);
                }
                CancelAck::AlreadyCancelled => {
                    assert_eq!(ended, Some(CancelReason::Timeout));
                    assert!(timed_out);
                }
                CancelAck::AlreadyCompleted => assert_eq!(ended, None),
                other => panic!("{other:?}"),
            }
            let winners = if timed_out {
                vec![CancelReason::Timeout]
            } else if ack == CancelAck::Cancelled {
                vec![CancelReason::peer(None)]
            } else {
                vec![]
            };
            check_one_outcome(ended, &winners, &registry, &seen);
        },
    );
}

#[test]
fn loom_completion_against_a_closed_connection_and_a_peer_cancel() {
    explore(
        "completion against a closed connection and a peer cancel",
        || {
            let seen = Arc::new(Seen::default());
            let (mut service, registry) = layered(Handler::Answers, &seen);
            let peer = spawn_peer_cancel(&registry);
            let close = thread::spawn({
                let registry = registry.clone();
                move || {
                    let cancelled = registry.cancel_all(CancelReason::Disconnect);
                    assert!(cancelled <= 1);
                    let outcome = if cancelled == 1 {
                        CancelOutcome::Cancelled
                    } else {
                        CancelOutcome::AlreadySettled
                    };
                    (CancelReason::Disconnect, outcome)
                }
            });
            let result = loom::future::block_on(call(&mut service));
            let outcomes = [peer.join().unwrap(), close.join().unwrap()];
            let ended = cancelled_reason(&result);
            check_one_outcome(ended, &winners(outcomes), &registry, &seen);
        },
    );
}

#[test]
fn loom_a_hanging_handler_is_stopped_by_a_peer_cancel() {
    // The response future sleeps until the cancel wakes it: a wake lost between its check of the state and its
    // registration of the waker would leave it asleep forever, which loom reports as a deadlock.
    explore("a hanging handler stopped by a peer cancel", || {
        let seen = Arc::new(Seen::default());
        let (mut service, registry) = layered(Handler::Hangs, &seen);
        let peer = spawn_peer_cancel(&registry);
        let result = loom::future::block_on(call(&mut service));
        let (reason, outcome) = peer.join().unwrap();
        let ended = cancelled_reason(&result);
        assert_eq!(
            ended.as_ref(),
            Some(&reason),
            "only the peer's cancel can end it"
        );
        assert_ne!(outcome, CancelOutcome::AlreadySettled);
        if seen.token().is_some() {
            assert!(
                seen.stopped.load(Ordering::SeqCst),
                "a handler that was called is stopped"
            );
        }
        check_one_outcome(ended, &winners([(reason, outcome)]), &registry, &seen);
    });
}

#[test]
fn loom_a_dropped_response_future_against_a_peer_cancel() {
    explore("a dropped response future against a peer cancel", || {
        let seen = Arc::new(Seen::default());
        let (mut service, registry) = layered(Handler::Hangs, &seen);
        let peer = spawn_peer_cancel(&registry);
        {
            let mut future = pin!(call(&mut service));
            let polled = future
                .as_mut()
                .poll(&mut Context::from_waker(noop_waker_ref()));
            if let Poll::Ready(result) = polled {
                assert_eq!(cancelled_reason(&result), Some(CancelReason::peer(None)));
            }
            // Dropped here, whatever state it is in: the caller went away.
        }
        // Whichever came first (the cancel before the request, during it, or after the drop), the request ended
        // cancelled: dropped unsettled is settled as cancelled (reason Local), so its token fires too.
        let (_, outcome) = peer.join().unwrap();
        let stats = registry.stats();
        assert_eq!(
            (stats.in_flight, stats.cancelled, stats.completed),
            (0, 1, 0)
        );
        if outcome == CancelOutcome::Cancelled {
            assert!(stats.remembered == 0, "a cancel that won is not remembered");
        }
        if let Some(token) = seen.token() {
            assert!(
                seen.stopped.load(Ordering::SeqCst),
                "the handler is stopped with its future"
            );
            assert!(token.is_cancelled(), "the token of a dropped request fires");
        }
    });
}

#[test]
fn loom_the_token_fires_whenever_it_is_made() {
    // The fence pair of `Lifecycle::token` and `Lifecycle::cancel`: a token made while a cancel is under way is
    // fired by one of the two. Without both fences loom finds the interleaving where neither does.
    explore("a token made during a cancel", || {
        let lifecycle = SharedLifecycle::new(Lifecycle::new(Id::from(ID), 1));
        let handler = thread::spawn({
            let lifecycle = lifecycle.clone();
            move || lifecycle.token().clone()
        });
        assert!(lifecycle.cancel(CancelReason::Timeout));
        let token = handler.join().unwrap();
        assert!(token.is_cancelled(), "a token of a cancelled request fires");
        assert_eq!(
            lifecycle.reason(),
            Some(&CancelReason::Timeout),
            "whoever sees CANCELLED sees the reason"
        );
    });
}

#[test]
fn loom_a_completion_and_a_cancel_never_both_win() {
    explore("a completion against a cancel, at the lifecycle", || {
        let lifecycle = SharedLifecycle::new(Lifecycle::new(Id::from(ID), 1));
        let canceller = thread::spawn({
            let lifecycle = lifecycle.clone();
            move || lifecycle.cancel(CancelReason::Disconnect)
        });
        let completed = lifecycle.complete();
        let cancelled = canceller.join().unwrap();
        assert!(completed != cancelled, "exactly one settles the request");
        assert_eq!(lifecycle.is_cancelled(), cancelled);
        assert_eq!(lifecycle.token().is_cancelled(), cancelled);
        assert_eq!(lifecycle.reason().is_some(), cancelled);
    });
}

#[test]
fn loom_a_peer_call_racing_close() {
    // A call goes in the pending table only while the connection is open, checked in the same critical section
    // as the insert; `close` closes and empties the table in one. With the check made before the lock is taken,
    // loom finds the interleaving where the call goes in after the table was emptied: it waits for good.
    explore("a peer call racing close", || {
        let (outbox, mut wire) = Outbox::new();
        // No timeout: loom's executor has no tokio timer, and the race under test is the table's against the close.
        let peer = Peer::new(Lsp, outbox).without_default_timeout();
        let closer = thread::spawn({
            let peer = peer.clone();
            move || peer.close()
        });
        let mut call = pin!(peer.request("workspace/symbol", ()));
        let first = call
            .as_mut()
            .poll(&mut Context::from_waker(noop_waker_ref()));
        let (pending, closed) = peer.table_state();
        assert!(
            !closed || pending == 0,
            "a closed peer's table holds {pending} calls"
        );
        match first {
            Poll::Ready(outcome) => assert_eq!(outcome, Err(PeerError::Closed)),
            Poll::Pending => assert!(wire.try_recv().is_some(), "a waiting call was sent"),
        }
        closer.join().unwrap();
        assert_eq!(
            peer.table_state(),
            (0, true),
            "the table is empty after close"
        );
        // No reply will come: only the close can end the call. One that never ends leaves this thread parked
        // with nothing to wake it, which loom reports as a deadlock.
        assert_eq!(loom::future::block_on(call), Err(PeerError::Closed));
    });
}

#[test]
fn loom_a_close_in_turns_against_another_connections_requests_growing_the_table() {
    // A close walks the table a chunk at a time, letting go of the lock between chunks; meanwhile another
    // connection of the scope registers requests, enough to grow the table (which moves every entry) at any point
    // of the walk. Whatever the interleaving, the close cancels every request of its own connection, once, and
    // none of the other's.
    explore(
        "a close in turns against another connection's requests growing the table",
        || {
            let registry = Registry::new();
            let entry =
                |id: i64, conn: u64| SharedLifecycle::new(Lifecycle::new(Id::from(id), conn));
            let register = |registry: &Registry, lifecycle: &SharedLifecycle| {
                registry
                    .insert(lifecycle, &std::sync::OnceLock::new())
                    .unwrap();
            };
            // 4 requests: a table of 8 buckets, two chunks of the walk in this build, room for 3 more.
            let closing: Vec<_> = (0..4).map(|id| entry(id, 1)).collect();
            closing.iter().for_each(|l| register(&registry, l));
            let other = thread::spawn({
                let registry = registry.clone();
                move || {
                    // The 4th of these grows the table.
                    let others: Vec<_> = (0..4).map(|id| entry(id, 2)).collect();
                    others.iter().for_each(|l| register(&registry, l));
                    others
                }
            });
            let cancelled = loom::future::block_on(
                registry.cancel_connection_in_turns(1, CancelReason::Disconnect),
            );
            let others = other.join().unwrap();
            assert_eq!(cancelled, 4, "each of the closing connection's, once");
            assert!(closing
                .iter()
                .all(|l| l.reason() == Some(&CancelReason::Disconnect)));
            assert!(others.iter().all(|l| !l.is_cancelled()));
        },
    );
}
