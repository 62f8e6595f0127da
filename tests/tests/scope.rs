//! Connections sharing one scope (`Server::with_registry` / `Server::in_scope`): a principal's or a session's scope
//! served over several connections. Each connection keeps its own ids and its own requests: closing or shutting
//! down one touches only its requests, the same id on two connections is two requests, and a peer's cancel reaches
//! only its own connection's request; a cancel for the whole scope reaches every connection's.

use serde_json::json;
use tests::{ms, Conn, Counts, End, Ended, Probe};
use tower::ServiceBuilder;
use tower_cancel::{dialect::AcpDraft, CancelReason, CancelStack, Registry, Scope};
use tower_cancel_io::{Framing, Server};

/// Two connections of one scope, each with its own probe, serving `stack`.
fn two_connections<D: tests::Spoken>(
    stack: CancelStack<D>,
    shared: &Registry,
) -> ((Conn, Probe), (Conn, Probe)) {
    let connect = || {
        let probe = Probe::new();
        let service = ServiceBuilder::new()
            .layer(stack.clone())
            .service(probe.service());
        let server = Server::new(service).with_registry(shared.clone());
        (Conn::start(server, D::FRAMING), probe)
    };
    (connect(), connect())
}

#[tokio::test(start_paused = true)]
async fn closing_one_connection_leaves_the_others_requests_running() {
    let shared = Registry::new();
    let ((mut a, probe_a), (mut b, probe_b)) = two_connections(CancelStack::mcp(), &shared);
    a.send(r#"{"jsonrpc":"2.0","id":1,"method":"hang"}"#).await;
    probe_a.wait_started(1).await;
    b.send(r#"{"jsonrpc":"2.0","id":2,"method":"sleep","params":{"ms":1000}}"#)
        .await;
    probe_b.wait_started(2).await;

    // Client A hangs up while B still waits for request 2.
    a.close();
    tokio::time::sleep(ms(10)).await;
    assert_eq!(
        probe_a.ended_of(1),
        Some(Ended::stopped(1, "hang", Some(CancelReason::Disconnect)))
    );
    assert_eq!(probe_b.ended_of(2), None, "B's request runs on");
    b.expect(r#"{"jsonrpc":"2.0","id":2,"result":{"slept":1000}}"#)
        .await;
    assert_eq!(probe_b.ended_of(2), Some(Ended::finished(2, "sleep", None)));
    // (Each `finish` checks the shared registry is empty: A's too, once B's request is done.)
    b.finish_quiet().await;
    a.finish_quiet().await;
    assert_eq!(Counts::of(&shared), Counts::new(2, 1, 1));
}

#[tokio::test(start_paused = true)]
async fn shutting_down_one_connection_does_not_refuse_the_others_requests() {
    let shared = Registry::new();
    let probe_a = Probe::new();
    let service_a = ServiceBuilder::new()
        .layer(CancelStack::lsp())
        .service(probe_a.service());
    let server_a = Server::new(service_a).with_registry(shared.clone());
    let shutdown_a = server_a.shutdown_handle();
    let a = Conn::start(server_a, Framing::ContentLength);
    let probe_b = Probe::new();
    let service_b = ServiceBuilder::new()
        .layer(CancelStack::lsp())
        .service(probe_b.service());
    let mut b = Conn::start(
        Server::new(service_b).with_registry(shared.clone()),
        Framing::ContentLength,
    );

    shutdown_a.shutdown();
    assert_eq!(a.closed_by_server().await, Vec::<String>::new());
    // After A's shutdown, B still takes work, now and later.
    b.send(r#"{"jsonrpc":"2.0","id":5,"method":"echo","params":"b"}"#)
        .await;
    b.expect(r#"{"jsonrpc":"2.0","id":5,"result":"b"}"#).await;
    tokio::time::sleep(ms(10_000)).await;
    b.send(r#"{"jsonrpc":"2.0","id":6,"method":"echo","params":"later"}"#)
        .await;
    b.expect(r#"{"jsonrpc":"2.0","id":6,"result":"later"}"#)
        .await;
    assert_eq!(probe_b.started(), 2);
    b.finish_quiet().await;
}

#[tokio::test(start_paused = true)]
async fn the_same_id_on_two_connections_is_two_requests_and_a_peers_cancel_reaches_only_its_own() {
    let shared = Registry::new();
    let ((mut a, probe_a), (mut b, probe_b)) = two_connections(CancelStack::lsp(), &shared);
    // Every client numbers its requests from the same start.
    a.send(r#"{"jsonrpc":"2.0","id":1,"method":"hang"}"#).await;
    probe_a.wait_started(1).await;
    b.send(r#"{"jsonrpc":"2.0","id":1,"method":"hang"}"#).await;
    probe_b.wait_started(1).await;
    assert_eq!(shared.len(), 2);

    // B cancels its request 1: A's request 1 is not touched.
    b.send(r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":1}}"#)
        .await;
    b.expect(r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32800,"message":"Request cancelled"}}"#)
        .await;
    assert_eq!(probe_a.ended_of(1), None, "A's request 1 runs on");
    // A duplicate is still one on the same connection.
    a.send(r#"{"jsonrpc":"2.0","id":1,"method":"echo","params":"again"}"#)
        .await;
    a.expect(r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32600,"message":"Invalid Request: request id 1 is already in flight"}}"#)
        .await;
    // B's cancel of an id it has no request for is remembered for B only: A's next request 2 runs.
    b.send(r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":2}}"#)
        .await;
    a.send(r#"{"jsonrpc":"2.0","id":2,"method":"echo","params":"a"}"#)
        .await;
    a.expect(r#"{"jsonrpc":"2.0","id":2,"result":"a"}"#).await;

    a.send(r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":1}}"#)
        .await;
    a.expect(r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32800,"message":"Request cancelled"}}"#)
        .await;
    a.finish_quiet().await;
    b.finish_quiet().await;
    assert_eq!(Counts::of(&shared), Counts::new(3, 1, 2).early(1, 1));
}

#[tokio::test(start_paused = true)]
async fn a_cancel_for_the_whole_scope_reaches_every_connection() {
    let shared = Registry::new();
    let ((mut a, probe_a), (mut b, probe_b)) = two_connections(CancelStack::lsp(), &shared);
    a.send(r#"{"jsonrpc":"2.0","id":7,"method":"hang"}"#).await;
    probe_a.wait_started(7).await;
    b.send(r#"{"jsonrpc":"2.0","id":7,"method":"hang"}"#).await;
    probe_b.wait_started(7).await;

    let scope = Scope::new().with_registry(shared.clone());
    scope.cancel(&7.into(), CancelReason::Shutdown);
    let cancelled =
        r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32800,"message":"Request cancelled"}}"#;
    a.expect(cancelled).await;
    b.expect(cancelled).await;
    for probe in [&probe_a, &probe_b] {
        assert_eq!(probe.ended_of(7).map(|e| e.end), Some(End::Stopped));
    }
    a.finish_quiet().await;
    b.finish_quiet().await;
}

#[tokio::test(start_paused = true)]
async fn each_connection_of_a_shared_scope_has_its_own_session() {
    // The ACP draft's rules depend on the conversation: one connection's `initialize` does not make the other's
    // requests cancellable.
    let shared = Registry::new();
    let stack = CancelStack::new(AcpDraft::new());
    let ((mut a, _probe_a), (mut b, probe_b)) = two_connections(stack, &shared);
    let (initialize, initialized) = tests::ACP_DRAFT_INITIALIZE;
    a.send(initialize).await;
    a.expect(initialized).await;
    assert!(a.session().is_initialized());
    assert!(!b.session().is_initialized());

    // On B, nothing is cancellable yet: its cancel reaches the handler as an ordinary notification.
    b.send(r#"{"jsonrpc":"2.0","id":1,"method":"sleep","params":{"ms":100}}"#)
        .await;
    probe_b.wait_started(1).await;
    b.send(r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":1}}"#)
        .await;
    assert_eq!(probe_b.wait_notification().await.1, json!({ "id": 1 }));
    b.expect(r#"{"jsonrpc":"2.0","id":1,"result":{"slept":100}}"#)
        .await;
    a.finish_quiet().await;
    b.finish_quiet().await;
}
