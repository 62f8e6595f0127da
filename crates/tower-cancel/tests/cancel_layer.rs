//! `CancelLayer` on its own, against a `tower-test` mock service.

use serde_json::{json, Value};
use tokio_test::{assert_pending, assert_ready, assert_ready_err, assert_ready_ok, task};
use tower_cancel::{
    dialect::Lsp, registry::DuplicateId, CancelLayer, CancelReason, Cancelled, Connection, Outbox,
    Registry, Request, Scope,
};
use tower_test::mock;

/// A connection of a scope of its own, as a transport makes one, and its scope's registry.
fn connection() -> (Connection, Registry) {
    let connection = Scope::new().connect(Outbox::closed());
    let registry = connection.registry().clone();
    (connection, registry)
}

fn in_scope(connection: &Connection, mut req: Request) -> Request {
    connection.prepare(&mut req);
    req
}

fn cancel(connection: &Connection, id: i64) -> Request {
    in_scope(
        connection,
        Request::notification("$/cancelRequest", json!({ "id": id })),
    )
}

#[tokio::test]
async fn always_ready_and_a_queued_request_is_cancelled_without_reaching_the_service() {
    let (mut service, mut handle) = mock::spawn_layer::<Request, Value, _>(CancelLayer::new(Lsp));
    let (connection, registry) = connection();
    // The inner service is saturated: it accepts nothing.
    handle.allow(0);

    assert_ready_ok!(service.poll_ready());
    let mut queued = task::spawn(service.call(in_scope(&connection, Request::new(1, "work", ()))));
    assert_pending!(queued.poll());
    assert_eq!(registry.len(), 1);

    // The cancel is not stuck behind the saturated service.
    assert_ready_ok!(service.poll_ready());
    let mut cancelled = task::spawn(service.call(cancel(&connection, 1)));
    assert_eq!(assert_ready_ok!(cancelled.poll()), Value::Null);

    let error = assert_ready_err!(queued.poll());
    let cancelled = error
        .downcast_ref::<Cancelled>()
        .expect("a Cancelled error");
    assert_eq!(cancelled.reason(), &CancelReason::Peer { reason: None });
    assert!(registry.is_empty());

    // Capacity comes back: the cancelled request never reaches the service.
    handle.allow(1);
    let mut next = task::spawn(handle.next_request());
    assert_pending!(next.poll());
    assert_eq!(registry.stats().cancelled, 1);
}

#[tokio::test]
async fn a_completion_is_the_one_outcome_and_the_entry_is_removed() {
    let (mut service, mut handle) = mock::spawn_layer::<Request, Value, _>(CancelLayer::new(Lsp));
    let (connection, registry) = connection();
    assert_ready_ok!(service.poll_ready());
    let mut response =
        task::spawn(service.call(in_scope(&connection, Request::new(2, "work", ()))));
    assert_pending!(response.poll());

    let (request, send) = handle
        .next_request()
        .await
        .expect("the request reached the service");
    let ctx = request
        .context()
        .expect("the request has a context")
        .clone();
    assert_eq!(ctx.id(), &2.into());
    send.send_response(json!("done"));
    assert_eq!(assert_ready_ok!(response.poll()), json!("done"));

    // A cancel that comes later changes nothing.
    assert_ready_ok!(service.poll_ready());
    assert_ready_ok!(task::spawn(service.call(cancel(&connection, 2))).poll());
    assert!(!ctx.is_cancelled());
    assert!(registry.is_empty());
    assert_eq!(registry.stats().completed, 1);
}

#[tokio::test]
async fn the_token_reports_cancellation_and_cancelling_it_does_not_cancel_the_request() {
    let (mut service, mut handle) = mock::spawn_layer::<Request, Value, _>(CancelLayer::new(Lsp));
    let (connection, registry) = connection();
    assert_ready_ok!(service.poll_ready());
    let mut response =
        task::spawn(service.call(in_scope(&connection, Request::new(3, "work", ()))));
    assert_pending!(response.poll());
    let (request, send) = handle.next_request().await.expect("reached the service");
    let ctx = request
        .context()
        .expect("the request has a context")
        .clone();

    // A sub-task holding the token must not settle the request by cancelling it: only ctx.cancel does.
    ctx.token().cancel();
    assert!(!response.is_woken());
    assert_pending!(response.poll());
    assert!(!ctx.is_cancelled());
    send.send_response(json!("done"));
    assert_eq!(assert_ready_ok!(response.poll()), json!("done"));
    assert!(registry.is_empty());

    // A real cancel fires a token handed out while the request was running.
    assert_ready_ok!(service.poll_ready());
    let mut second = task::spawn(service.call(in_scope(&connection, Request::new(4, "work", ()))));
    assert_pending!(second.poll());
    let (request, _send) = handle.next_request().await.expect("reached the service");
    let token = request.context().expect("a context").child_token();
    assert_ready_ok!(task::spawn(service.call(cancel(&connection, 4))).poll());
    assert!(second.is_woken(), "the cancel wakes the response future");
    assert_ready_err!(second.poll());
    assert!(token.is_cancelled());
    assert!(registry.is_empty());
}

#[tokio::test]
async fn a_cancel_before_its_request_means_the_request_starts_cancelled() {
    let (mut service, mut handle) = mock::spawn_layer::<Request, Value, _>(CancelLayer::new(Lsp));
    let (connection, registry) = connection();
    assert_ready_ok!(service.poll_ready());
    assert_ready_ok!(task::spawn(service.call(cancel(&connection, 3))).poll());

    assert_ready_ok!(service.poll_ready());
    let mut response =
        task::spawn(service.call(in_scope(&connection, Request::new(3, "work", ()))));
    assert_ready_err!(response.poll());
    let mut next = task::spawn(handle.next_request());
    assert_pending!(next.poll());
    assert!(registry.is_empty());
    assert_eq!(registry.stats().remembered, 0);
}

#[tokio::test]
async fn an_id_in_flight_is_refused() {
    let (mut service, _handle) = mock::spawn_layer::<Request, Value, _>(CancelLayer::new(Lsp));
    let (connection, registry) = connection();
    assert_ready_ok!(service.poll_ready());
    let mut first = task::spawn(service.call(in_scope(&connection, Request::new(4, "work", ()))));
    assert_pending!(first.poll());
    assert_ready_ok!(service.poll_ready());
    let mut second = task::spawn(service.call(in_scope(&connection, Request::new(4, "work", ()))));
    let error = assert_ready_err!(second.poll());
    assert_eq!(
        error.downcast_ref::<DuplicateId>(),
        Some(&DuplicateId(4.into()))
    );
    assert_eq!(registry.len(), 1, "the first request is untouched");
    drop(first);
    assert!(
        registry.is_empty(),
        "a dropped response future removes its entry"
    );
}

#[tokio::test]
async fn initialize_is_not_cancellable_and_notifications_pass_through() {
    let (mut service, mut handle) = mock::spawn_layer::<Request, Value, _>(CancelLayer::new(Lsp));
    let (connection, registry) = connection();
    assert_ready_ok!(service.poll_ready());
    let mut init =
        task::spawn(service.call(in_scope(&connection, Request::new(0, "initialize", ()))));
    assert_pending!(init.poll());
    assert_eq!(registry.len(), 1, "initialize holds its id");
    assert_eq!(registry.stats().registered, 0, "but is not counted");

    assert_ready_ok!(service.poll_ready());
    assert_ready_ok!(task::spawn(service.call(cancel(&connection, 0))).poll());
    let (_, send) = handle.next_request().await.unwrap();
    send.send_response(json!({ "capabilities": {} }));
    assert_eq!(assert_ready_ok!(init.poll()), json!({ "capabilities": {} }));
    assert!(connection.session().is_initialized());

    assert_ready_ok!(service.poll_ready());
    let mut note = task::spawn(service.call(in_scope(
        &connection,
        Request::notification("initialized", json!({})),
    )));
    // The layer hands the request over when its future is first polled.
    assert_pending!(note.poll());
    let (request, send) = handle.next_request().await.unwrap();
    assert_eq!(request.method(), "initialized");
    send.send_response(Value::Null);
    assert_ready!(note.poll()).unwrap();
}

/// A held request's future is what a server keeps for each request in flight (BENCHMARKS.md, figure 4: at most 192
/// bytes added per held request, of which this is the largest part). The default stack's layers add 80 bytes to
/// the handler's own future: the error map's id, flags and connection, the cancel layer's settlement and mode, and
/// the timeout layer's state; with the `metrics` feature, 16 more (the dialect's label, kept for the request's
/// counters). A field more in any of them shows here first.
#[tokio::test]
async fn the_default_stack_adds_at_most_80_bytes_to_a_held_requests_future() {
    use tower::{service_fn, Layer, Service};

    async fn held(req: Request) -> Result<Value, tower_cancel::BoxError> {
        std::future::pending::<()>().await;
        drop(req);
        Ok(Value::Null)
    }
    let mut bare = service_fn(held);
    let mut stack = tower_cancel::CancelStack::lsp().layer(service_fn(held));
    let bare_future = bare.call(Request::new(1, "work", ()));
    let stack_future = stack.call(Request::new(1, "work", ()));
    let added = std::mem::size_of_val(&stack_future) - std::mem::size_of_val(&bare_future);
    let limit = if cfg!(feature = "metrics") { 96 } else { 80 };
    assert!(
        added <= limit,
        "the stack adds {added} bytes to a held request's future (at most {limit})"
    );
}
