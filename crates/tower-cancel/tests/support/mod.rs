//! What the tests of scopes shared by exchanges and replicas have in common: requests read from a connection, and
//! run through a stack over a handler that never finishes (only a cancel ends them).

use std::time::Duration;

use serde_json::Value;
use tower::{service_fn, Layer, ServiceExt};
use tower_cancel::{
    BoxError, CancelStack, Connection, Dialect, Incoming, Message, Request, Response,
};

/// The request `json`, as `connection` reads it.
pub(crate) fn request(connection: &Connection, json: &str) -> Request {
    match connection.receive(Message::from_slice(json.as_bytes()).unwrap()) {
        Incoming::Request(request) => request,
        other => panic!("not a request: {other:?}"),
    }
}

/// The request `json` on `connection`, through `stack` over a handler that never finishes, on a task; the handle
/// resolves to its reply once a cancel ends it. A request still running after 10 s fails the test (nothing
/// stopped it) rather than hanging it.
pub(crate) async fn hang<D: Dialect + Clone>(
    stack: CancelStack<D>,
    connection: &Connection,
    json: &str,
) -> tokio::task::JoinHandle<Option<Response>> {
    let handler = service_fn(|_: Request| std::future::pending::<Result<Value, BoxError>>());
    let reply = tokio::spawn(stack.layer(handler).oneshot(request(connection, json)));
    tokio::task::yield_now().await;
    tokio::spawn(async move {
        let reply = tokio::time::timeout(Duration::from_secs(10), reply).await;
        reply
            .expect("the request was not stopped")
            .unwrap()
            .unwrap()
    })
}
