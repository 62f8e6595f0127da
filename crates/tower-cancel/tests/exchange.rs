//! Exchanges: the HTTP requests of one session (or one principal) are exchanges of its scope. A cancel the client
//! POSTs on one of them reaches the request it names on another, or waits for it when it has not arrived yet;
//! closing one (its client hung up) touches its own requests only.

mod support;

use tower_cancel::{CancelReason, CancelStack, Connection, Outbox, Response, Scope};

/// The request `json` on `connection`, through `CancelStack::lsp()` over a handler that never finishes.
async fn send(connection: &Connection, json: &str) -> tokio::task::JoinHandle<Option<Response>> {
    support::hang(CancelStack::lsp(), connection, json).await
}

fn code(reply: Option<Response>) -> i64 {
    reply.expect("a reply").outcome.unwrap_err().code
}

#[tokio::test(flavor = "current_thread")]
async fn a_cancel_posted_on_another_exchange_reaches_the_request() {
    let scope = Scope::with_dialect(tower_cancel::dialect::Lsp);
    let first = scope.connect_exchange(Outbox::closed());
    let second = scope.connect_exchange(Outbox::closed());
    let reply = send(&first, r#"{"jsonrpc":"2.0","id":1,"method":"slow"}"#).await;
    assert_eq!(first.in_flight(), 1);

    let cancel = send(
        &second,
        r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":1}}"#,
    )
    .await;
    assert!(cancel.await.unwrap().is_none(), "a cancel is not answered");
    assert_eq!(code(reply.await.unwrap()), -32800);
    assert!(scope.registry().is_empty());
}

#[tokio::test(flavor = "current_thread")]
async fn a_cancel_posted_before_its_request_cancels_it_on_arrival() {
    let scope = Scope::with_dialect(tower_cancel::dialect::Lsp);
    let early = scope.connect_exchange(Outbox::closed());
    let cancel = send(
        &early,
        r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":"x"}}"#,
    )
    .await;
    assert!(cancel.await.unwrap().is_none());

    let late = scope.connect_exchange(Outbox::closed());
    let reply = send(&late, r#"{"jsonrpc":"2.0","id":"x","method":"slow"}"#).await;
    assert_eq!(code(reply.await.unwrap()), -32800);
    assert!(scope.registry().is_empty());
}

#[tokio::test(flavor = "current_thread")]
async fn closing_an_exchange_cancels_only_its_own_requests() {
    let scope = Scope::with_dialect(tower_cancel::dialect::Lsp);
    let gone = scope.connect_exchange(Outbox::closed());
    let staying = scope.connect_exchange(Outbox::closed());
    let lost = send(&gone, r#"{"jsonrpc":"2.0","id":1,"method":"slow"}"#).await;
    let kept = send(&staying, r#"{"jsonrpc":"2.0","id":2,"method":"slow"}"#).await;

    assert_eq!(gone.close(CancelReason::Disconnect), 1);
    assert_eq!(code(lost.await.unwrap()), -32800);
    assert_eq!(
        staying.in_flight(),
        1,
        "the other exchange's request runs on"
    );
    assert!(!kept.is_finished());

    scope.close(CancelReason::Shutdown);
    assert_eq!(code(kept.await.unwrap()), -32800);
    assert!(scope.registry().is_empty());
}

#[tokio::test(flavor = "current_thread")]
async fn a_connection_of_the_same_scope_keeps_its_cancels_to_itself() {
    // The contrast: a stream connection's ids are its own, so its cancel does not reach another connection's.
    let scope = Scope::with_dialect(tower_cancel::dialect::Lsp);
    let one = scope.connect(Outbox::closed());
    let other = scope.connect(Outbox::closed());
    let reply = send(&one, r#"{"jsonrpc":"2.0","id":1,"method":"slow"}"#).await;
    let cancel = send(
        &other,
        r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":1}}"#,
    )
    .await;
    assert!(cancel.await.unwrap().is_none());
    assert_eq!(one.in_flight(), 1);
    one.close(CancelReason::Disconnect);
    assert_eq!(code(reply.await.unwrap()), -32800);
}
