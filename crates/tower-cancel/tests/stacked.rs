//! The presets' service (`Stacked`: the four layers in one, without the error map's future) answers reply for
//! reply as the four layers stacked by hand: an answer, a handler's error, a panic in the handler's future and in
//! its service's `call`, a duplicate id, a cancel consumed and the cancelled request's reply, a timeout, a
//! notification, a request without a connection; rendered in the dialect of the request's scope. (Announced ends,
//! `initialize`, cooperative grace and group results go through the presets in the suites of their features.)

use std::{future::Future, time::Duration};

use serde_json::{json, Value};
use tower::{service_fn, Layer, Service, ServiceBuilder, ServiceExt};
use tower_cancel::{
    dialect::{Lsp, Mcp},
    BoxError, CancelLayer, CancelStack, CascadeLayer, Connection, ErrorMapLayer, ErrorObject,
    Incoming, Message, Outbox, Request, Response, Scope, TimeoutLayer,
};

/// Answers `ok`, fails `fail` with -32601, panics on `panic`, and never answers `hang`.
async fn handler(req: Request) -> Result<Value, BoxError> {
    match req.method() {
        "ok" => Ok(json!({"answered": req.id().map(ToString::to_string)})),
        "fail" => Err(ErrorObject::method_not_found("fail").into()),
        "panic" => panic!("the handler gave up"),
        "hang" => std::future::pending().await,
        _ => Ok(Value::Null),
    }
}

/// The handler, behind a service whose `call` itself panics for `panic_in_call`.
fn service(req: Request) -> impl Future<Output = Result<Value, BoxError>> {
    assert!(req.method() != "panic_in_call", "the service gave up");
    handler(req)
}

fn receive(connection: &Connection, message: Value) -> Request {
    let bytes = serde_json::to_vec(&message).unwrap();
    match connection.receive(Message::from_slice(&bytes).unwrap()) {
        Incoming::Request(request) => request,
        other => panic!("not a request: {other:?}"),
    }
}

fn wire(reply: Option<Response>) -> Option<Value> {
    reply.map(|reply| serde_json::to_value(reply).unwrap())
}

/// Every kind of outcome through `service` on a connection of a scope speaking LSP: what the peer reads, in order,
/// and whether the scope's table was left empty.
async fn replies<S>(service: S) -> (Vec<Option<Value>>, bool)
where
    S: Service<Request, Response = Option<Response>, Error = std::convert::Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
{
    let connection = Scope::with_dialect(Lsp).connect(Outbox::closed());
    let mut read = Vec::new();
    for (id, method) in [(1, "ok"), (2, "fail"), (3, "panic"), (5, "panic_in_call")] {
        let request = receive(
            &connection,
            json!({"jsonrpc": "2.0", "id": id, "method": method}),
        );
        read.push(wire(service.clone().oneshot(request).await.unwrap()));
    }
    let held = receive(
        &connection,
        json!({"jsonrpc": "2.0", "id": 4, "method": "hang"}),
    );
    let held = tokio::spawn(service.clone().oneshot(held));
    tokio::task::yield_now().await;
    let duplicate = receive(
        &connection,
        json!({"jsonrpc": "2.0", "id": 4, "method": "ok"}),
    );
    read.push(wire(service.clone().oneshot(duplicate).await.unwrap()));
    let cancel = receive(
        &connection,
        json!({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": 4}}),
    );
    read.push(wire(service.clone().oneshot(cancel).await.unwrap()));
    read.push(wire(held.await.unwrap().unwrap()));
    let notification = receive(
        &connection,
        json!({"jsonrpc": "2.0", "method": "ok", "params": {}}),
    );
    read.push(wire(service.clone().oneshot(notification).await.unwrap()));
    // Nothing cancels it: the stack's timeout does (the runtime's clock, paused, jumps to its deadline).
    let timed_out = receive(
        &connection,
        json!({"jsonrpc": "2.0", "id": 6, "method": "hang"}),
    );
    read.push(wire(service.clone().oneshot(timed_out).await.unwrap()));
    // Without a connection: the layer's own scope, which speaks no dialect.
    let alone = Request::new(7, "ok", ());
    read.push(wire(service.clone().oneshot(alone).await.unwrap()));
    let alone = Request::new(8, "hang", ());
    read.push(wire(service.oneshot(alone).await.unwrap()));
    (read, connection.registry().is_empty())
}

#[tokio::test(start_paused = true)]
async fn the_preset_answers_as_the_four_layers_stacked_by_hand() {
    // Built for MCP, on a scope that speaks LSP: the scope's dialect renders every reply.
    let timeout = Duration::from_secs(30);
    let preset = CancelStack::mcp()
        .timeout(timeout)
        .layer(service_fn(service));
    let by_hand = ServiceBuilder::new()
        .layer(ErrorMapLayer::new(Mcp))
        .layer(CancelLayer::new(Mcp))
        .layer(TimeoutLayer::new(timeout))
        .layer(CascadeLayer::new())
        .service(service_fn(service));

    let (preset_read, preset_left_empty) = replies(preset).await;
    let (by_hand_read, by_hand_left_empty) = replies(by_hand).await;

    let expected = vec![
        Some(json!({"jsonrpc": "2.0", "id": 1, "result": {"answered": "1"}})),
        Some(
            json!({"jsonrpc": "2.0", "id": 2, "error": {"code": -32601, "message": "Method not found: fail"}}),
        ),
        Some(
            json!({"jsonrpc": "2.0", "id": 3, "error": {"code": -32603, "message": "Internal error: handler panicked"}}),
        ),
        Some(
            json!({"jsonrpc": "2.0", "id": 5, "error": {"code": -32603, "message": "Internal error: handler panicked"}}),
        ),
        Some(
            json!({"jsonrpc": "2.0", "id": 4, "error": {"code": -32600, "message": "Invalid Request: request id 4 is already in flight"}}),
        ),
        // The cancel, a notification: consumed, never answered.
        None,
        // LSP's reply to a request its peer cancelled, though the stack was built for MCP (which sends none).
        Some(
            json!({"jsonrpc": "2.0", "id": 4, "error": {"code": -32800, "message": "Request cancelled"}}),
        ),
        None,
        // Timed out: LSP's cancelled reply.
        Some(
            json!({"jsonrpc": "2.0", "id": 6, "error": {"code": -32800, "message": "Request cancelled"}}),
        ),
        Some(json!({"jsonrpc": "2.0", "id": 7, "result": {"answered": "7"}})),
        // Timed out without a connection: in the stack's own dialect, MCP's error for a request this side timed out.
        Some(
            json!({"jsonrpc": "2.0", "id": 8, "error": {"code": -32001, "message": "Request timed out"}}),
        ),
    ];
    assert_eq!(preset_read, expected);
    assert_eq!(by_hand_read, expected);
    assert!(preset_left_empty && by_hand_left_empty);
}
