//! The dialect has one owner: the scope. Every layer reads a request in its scope's dialect, the one the
//! connection's peer speaks, so a stack and its transport cannot disagree; the stack's own dialect stands in only
//! for a scope that speaks none.

use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use tower::{service_fn, Layer, ServiceExt};
use tower_cancel::{
    dialect::{Lsp, Mcp},
    BoxError, CancelStack, Connection, Incoming, Message, Outbox, Request, Response, Scope,
};

/// A handler that hangs on `hang` and records the methods of the notifications it is handed.
fn handler(
    notified: Arc<Mutex<Vec<String>>>,
) -> impl tower::Service<Request, Response = Value, Error = BoxError, Future = impl Send> + Clone {
    service_fn(move |req: Request| {
        let notified = notified.clone();
        async move {
            if req.is_notification() {
                notified.lock().unwrap().push(req.method().to_owned());
                return Ok(Value::Null);
            }
            std::future::pending::<()>().await;
            Ok::<_, BoxError>(Value::Null)
        }
    })
}

fn receive(connection: &Connection, message: Value) -> Request {
    let bytes = serde_json::to_vec(&message).unwrap();
    match connection.receive(Message::from_slice(&bytes).unwrap()) {
        Incoming::Request(request) => request,
        other => panic!("not a request: {other:?}"),
    }
}

/// Send `message` through `stack` on `connection` and give its reply (a spawned task for a request that hangs).
async fn call(
    stack: &CancelStack<Lsp>,
    notified: &Arc<Mutex<Vec<String>>>,
    connection: &Connection,
    message: Value,
) -> tokio::task::JoinHandle<Option<Response>> {
    let service = stack.layer(handler(notified.clone()));
    let request = receive(connection, message);
    let task = tokio::spawn(async move { service.oneshot(request).await.unwrap() });
    tokio::task::yield_now().await;
    task
}

#[tokio::test]
async fn a_stack_built_for_lsp_speaks_the_mcp_of_its_scope() {
    let stack = CancelStack::lsp();
    let notified = Arc::default();
    let (outbox, _wire) = Outbox::new();
    let connection = Scope::with_dialect(Mcp).connect(outbox);

    let held = call(
        &stack,
        &notified,
        &connection,
        json!({"jsonrpc": "2.0", "id": 7, "method": "hang"}),
    )
    .await;
    assert_eq!(connection.in_flight(), 1);

    // LSP's cancel is no cancel in MCP: the handler is handed it as any other notification, and 7 runs on.
    let lsp_cancel = json!({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": 7}});
    let passed_on = call(&stack, &notified, &connection, lsp_cancel).await;
    assert_eq!(passed_on.await.unwrap(), None);
    assert_eq!(*notified.lock().unwrap(), vec!["$/cancelRequest"]);
    assert_eq!(connection.in_flight(), 1);

    // MCP's cancel is the scope's: it stops 7, and a request the peer cancelled gets no reply at all (MCP).
    let mcp_cancel = json!({
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": 7, "reason": "user stopped it"}
    });
    let consumed = call(&stack, &notified, &connection, mcp_cancel).await;
    assert_eq!(consumed.await.unwrap(), None);
    assert_eq!(
        held.await.unwrap(),
        None,
        "MCP answers a cancelled request with nothing"
    );
    assert_eq!(*notified.lock().unwrap(), vec!["$/cancelRequest"]);
    assert!(connection.registry().is_empty());
}

#[tokio::test]
async fn a_scope_that_speaks_no_dialect_takes_the_stacks() {
    let stack = CancelStack::lsp();
    let notified = Arc::default();
    let connection = Scope::new().connect(Outbox::closed());

    let held = call(
        &stack,
        &notified,
        &connection,
        json!({"jsonrpc": "2.0", "id": 7, "method": "hang"}),
    )
    .await;
    let lsp_cancel = json!({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": 7}});
    let consumed = call(&stack, &notified, &connection, lsp_cancel).await;
    assert_eq!(consumed.await.unwrap(), None);

    let reply = held
        .await
        .unwrap()
        .expect("LSP answers a cancelled request");
    assert_eq!(reply.outcome.unwrap_err().code, -32800);
    assert!(
        notified.lock().unwrap().is_empty(),
        "the cancel was consumed"
    );
    assert!(connection.registry().is_empty());
}
