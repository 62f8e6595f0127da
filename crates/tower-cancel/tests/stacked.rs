//! The presets' service (`Stacked`: the four layers in one, one future per request) answers reply for reply as
//! the four layers stacked by hand: every outcome, rendered in the dialect of the request's scope.

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
    for (id, method) in [(1, "ok"), (2, "fail"), (3, "panic")] {
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
    read.push(wire(service.oneshot(notification).await.unwrap()));
    (read, connection.registry().is_empty())
}

#[tokio::test]
async fn the_preset_answers_as_the_four_layers_stacked_by_hand() {
    // Built for MCP, on a scope that speaks LSP: the scope's dialect renders every reply.
    let preset = CancelStack::mcp().layer(service_fn(handler));
    let by_hand = ServiceBuilder::new()
        .layer(ErrorMapLayer::new(Mcp))
        .layer(CancelLayer::new(Mcp))
        .layer(TimeoutLayer::none())
        .layer(CascadeLayer::new())
        .service(service_fn(handler));

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
            json!({"jsonrpc": "2.0", "id": 4, "error": {"code": -32600, "message": "Invalid Request: request id 4 is already in flight"}}),
        ),
        // The cancel, a notification: consumed, never answered.
        None,
        // LSP's reply to a request its peer cancelled, though the stack was built for MCP (which sends none).
        Some(
            json!({"jsonrpc": "2.0", "id": 4, "error": {"code": -32800, "message": "Request cancelled"}}),
        ),
        None,
    ];
    assert_eq!(preset_read, expected);
    assert_eq!(by_hand_read, expected);
    assert!(preset_left_empty && by_hand_left_empty);
}
