//! Cancels across replicas on the in-process bus: a request runs on replica A, its cancel arrives on replica B
//! through the same stack a server uses. Each test ends with the tables empty.

mod support;

use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
use tower_cancel::{
    bus::{Applied, LocalBus, RemoteCancel},
    dialect::{Lsp, Mcp},
    registry::CancelOutcome,
    BoxError, CancelReason, CancelStack, Connection, Id, Outbox, Request, Response, Scope,
};

/// The request `json` on `connection`, through `CancelStack::mcp()` over a handler that never finishes.
async fn run(connection: &Connection, json: &str) -> tokio::task::JoinHandle<Option<Response>> {
    support::hang(CancelStack::mcp(), connection, json).await
}

const CANCEL_7: &str = r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7,"reason":"user stopped it"}}"#;

#[tokio::test(flavor = "current_thread")]
async fn a_cancel_posted_to_another_replica_stops_the_request_with_the_dialects_reply() {
    let bus = LocalBus::new();
    let (a, b) = (bus.replica("a"), bus.replica("b"));
    let on_a = a.scope("session:S", Scope::with_dialect(Mcp));
    let on_b = b.scope("session:S", Scope::with_dialect(Mcp));

    let exchange_a = on_a.connect_exchange(Outbox::closed());
    let reply = run(
        &exchange_a,
        r#"{"jsonrpc":"2.0","id":7,"method":"tools/call"}"#,
    )
    .await;
    assert_eq!(on_a.registry().len(), 1);

    // The cancel is POSTed to B: nothing of id 7 runs there, so B publishes it; A applies it.
    let exchange_b = on_b.connect_exchange(Outbox::closed());
    let cancel = run(&exchange_b, CANCEL_7).await;
    assert!(
        cancel.await.unwrap().is_none(),
        "a notification is not answered"
    );

    // MCP: a request the client cancelled gets no reply at all, wherever it ran.
    assert!(reply.await.unwrap().is_none());
    assert_eq!((b.stats().published, a.stats().applied), (1, 1));
    assert_eq!(on_a.registry().stats().cancelled, 1);
    assert!(on_a.registry().is_empty() && on_b.registry().is_empty());
}

#[tokio::test(flavor = "current_thread")]
async fn the_peers_reason_and_the_canceller_travel_with_the_cancel() {
    let bus = LocalBus::new();
    let (a, b) = (bus.replica("a"), bus.replica("b"));
    let on_b = b.scope_owned("principal:alice", Some("alice".into()), Scope::new());
    on_b.cancel(
        &Id::Number(7),
        CancelReason::peer(Some("user stopped it".into())),
    );

    // A has no scope of that key yet: the cancel waits for it; here is what came.
    let seen = a.stats();
    assert_eq!((seen.received, seen.pending), (1, 1));
    let on_a = a.scope("principal:alice", Scope::with_dialect(Lsp));
    let exchange = on_a.connect_exchange(Outbox::closed());
    let mut service = ServiceBuilder::new()
        .layer(CancelStack::lsp())
        .service(service_fn(|req: Request| async move {
            Ok::<_, BoxError>(serde_json::json!({ "ran": req.method() }))
        }));
    let late = support::request(&exchange, r#"{"jsonrpc":"2.0","id":7,"method":"slow"}"#);
    let reply = service.ready().await.unwrap().call(late).await.unwrap();
    assert_eq!(
        reply.unwrap().outcome.unwrap_err().code,
        -32800,
        "it never ran"
    );
    assert_eq!(on_a.registry().stats().cancelled, 1);
    assert_eq!(a.stats().pending, 0);
    assert!(on_a.registry().is_empty());

    // What a transport hands the bus, field by field.
    let (probe_bus, sent) = Recording::new();
    let c = tower_cancel::bus::Replica::new("c", std::sync::Arc::new(probe_bus));
    let on_c = c.scope_owned("principal:alice", Some("alice".into()), Scope::new());
    on_c.cancel(
        &Id::String("x".into()),
        CancelReason::peer(Some("why".into())),
    );
    let cancel = sent.lock().unwrap().pop().expect("published");
    assert_eq!(cancel.scope, "principal:alice");
    assert_eq!(cancel.id, Id::String("x".into()));
    assert_eq!(cancel.reason, CancelReason::peer(Some("why".into())));
    assert_eq!(cancel.canceller.as_deref(), Some("alice"));
    assert_eq!(cancel.origin, "c");
    assert!(cancel.sent_at <= std::time::SystemTime::now());
}

#[tokio::test(flavor = "current_thread")]
async fn a_cancel_that_overtakes_its_request_across_replicas_still_cancels_it() {
    let bus = LocalBus::new();
    let (a, b) = (bus.replica("a"), bus.replica("b"));
    let on_a = a.scope("session:S", Scope::with_dialect(Mcp));
    let on_b = b.scope("session:S", Scope::with_dialect(Mcp));
    // The cancel lands on B before the request reaches A: A remembers it in the scope's early-cancel window.
    assert_eq!(
        on_b.cancel(&Id::Number(7), CancelReason::peer(None)),
        CancelOutcome::Remembered
    );
    assert_eq!(on_a.registry().stats().early_cancels, 1);

    let reply = run(
        &on_a.connect_exchange(Outbox::closed()),
        r#"{"jsonrpc":"2.0","id":7,"method":"tools/call"}"#,
    )
    .await;
    assert!(
        reply.await.unwrap().is_none(),
        "cancelled on arrival: no reply (MCP)"
    );
    assert!(on_a.registry().is_empty());
}

#[tokio::test(flavor = "current_thread")]
async fn scopes_never_cross_and_a_cancel_that_hits_locally_is_not_published() {
    let bus = LocalBus::new();
    let (a, b) = (bus.replica("a"), bus.replica("b"));
    let s_on_a = a.scope("session:S", Scope::with_dialect(Mcp));
    let t_on_a = a.scope("session:T", Scope::with_dialect(Mcp));
    let s_on_b = b.scope("session:S", Scope::with_dialect(Mcp));
    let in_s = run(
        &s_on_a.connect_exchange(Outbox::closed()),
        r#"{"jsonrpc":"2.0","id":7,"method":"x"}"#,
    )
    .await;
    let in_t = run(
        &t_on_a.connect_exchange(Outbox::closed()),
        r#"{"jsonrpc":"2.0","id":7,"method":"x"}"#,
    )
    .await;

    // S's cancel on A finds its request there: nothing is published.
    assert_eq!(
        s_on_a.cancel(&Id::Number(7), CancelReason::peer(None)),
        CancelOutcome::Cancelled
    );
    assert_eq!(a.stats().published, 0);
    assert!(in_s.await.unwrap().is_none());

    // A cancel for S that misses on B reaches S on A only: T's request of the same id runs on.
    s_on_b.cancel(&Id::Number(7), CancelReason::peer(None));
    assert_eq!(b.stats().published, 1);
    assert_eq!(t_on_a.registry().len(), 1);
    assert!(!in_t.is_finished());
    t_on_a.close(CancelReason::Shutdown);
    in_t.await.unwrap();
    assert!(s_on_a.registry().is_empty() && t_on_a.registry().is_empty());
}

#[tokio::test(flavor = "current_thread")]
async fn a_stream_connections_cancel_is_never_published() {
    let bus = LocalBus::new();
    let (a, b) = (bus.replica("a"), bus.replica("b"));
    let on_a = a.scope("k", Scope::with_dialect(Mcp));
    let _on_b = b.scope("k", Scope::with_dialect(Mcp));
    // A connection's ids are its own: a miss there is an early cancel for that connection, no other replica's.
    let connection = on_a.connect(Outbox::closed());
    connection.cancel(&Id::Number(1), CancelReason::peer(None));
    assert_eq!((a.stats().published, b.stats().received), (0, 0));
}

#[test]
fn a_replica_ignores_its_own_cancels_and_forgets_dropped_scopes() {
    let bus = LocalBus::new();
    let a = bus.replica("a");
    let scope = a.scope("session:S", Scope::new());
    let own = RemoteCancel::new("session:S", Id::Number(1), CancelReason::peer(None), "a");
    assert_eq!(a.apply(own), Applied::Own);
    assert!(scope.registry().stats().early_cancels == 0);

    assert_eq!(a.stats().scopes, 1);
    let clone = scope.clone();
    drop(scope);
    assert_eq!(a.stats().scopes, 1, "a handle is left");
    drop(clone);
    assert_eq!(
        a.stats().scopes,
        0,
        "the key goes with the scope's last handle"
    );
    let later = RemoteCancel::new("session:S", Id::Number(1), CancelReason::peer(None), "b");
    assert_eq!(a.apply(later), Applied::Pending);
}

/// A bus that keeps what it is handed.
struct Recording(std::sync::Arc<std::sync::Mutex<Vec<RemoteCancel>>>);

impl Recording {
    fn new() -> (Self, std::sync::Arc<std::sync::Mutex<Vec<RemoteCancel>>>) {
        let sent = std::sync::Arc::default();
        (Self(std::sync::Arc::clone(&sent)), sent)
    }
}

impl tower_cancel::bus::CancelBus for Recording {
    fn publish(&self, cancel: RemoteCancel) {
        self.0.lock().unwrap().push(cancel);
    }
}

#[test]
fn a_forwarding_scope_publishes_but_neither_receives_nor_takes_what_is_kept_for_its_key() {
    let bus = LocalBus::new();
    let (a, b) = (bus.replica("a"), bus.replica("b"));
    // B keeps a cancel from A for a session B does not hold.
    let on_a = a.scope("session:S", Scope::new());
    on_a.cancel(&Id::Number(1), CancelReason::peer(None));
    assert_eq!(b.stats().pending, 1);

    // A cancel POSTed to B for that session goes out through a forwarding scope...
    let forwarding = b.forwarding("session:S", Scope::new());
    assert_eq!(b.stats().scopes, 0, "not B's scope of the key");
    forwarding.cancel(&Id::Number(2), CancelReason::peer(None));
    assert_eq!(b.stats().published, 1);
    assert_eq!(
        on_a.registry().stats().early_cancels,
        2,
        "A remembers both its own and B's"
    );
    // ...and leaves what B kept for the key where it was.
    assert_eq!(
        forwarding.registry().stats().early_cancels,
        1,
        "only its own miss"
    );
    assert_eq!(b.stats().pending, 1);
}
