//! `ErrorMapLayer` on its own: every outcome of the inner service becomes the dialect's reply (with a `CancelLayer`
//! below where the outcome is a panic, which that layer catches).

use serde_json::{json, Value};
use tokio_test::{assert_ready_ok, task};
use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
use tower_cancel::{
    dialect::{Acp, AcpDraft, Lsp, Mcp},
    registry::DuplicateId,
    BoxError, CancelLayer, CancelReason, Cancelled, Dialect, ErrorMapLayer, ErrorObject, Request,
    Response,
};
use tower_test::mock;

async fn reply_for<D: Dialect + Clone>(
    dialect: D,
    outcome: Result<Value, BoxError>,
) -> Option<Response> {
    let (mut service, mut handle) =
        mock::spawn_layer::<Request, Value, _>(ErrorMapLayer::new(dialect));
    assert_ready_ok!(service.poll_ready());
    let mut response = task::spawn(service.call(Request::new(9, "m", ())));
    let (_, send) = handle.next_request().await.unwrap();
    match outcome {
        Ok(value) => send.send_response(value),
        Err(error) => send.send_error(error),
    }
    assert_ready_ok!(response.poll())
}

fn error_reply(code: i64, message: &str) -> Option<Response> {
    Some(Response::error(
        Some(9.into()),
        ErrorObject::new(code, message),
    ))
}

#[tokio::test]
async fn results_and_errors() {
    assert_eq!(
        reply_for(Lsp, Ok(json!([1]))).await,
        Some(Response::ok(9.into(), json!([1])))
    );
    let own = ErrorObject::new(-32001, "mine").with_data(json!({ "x": 1 }));
    assert_eq!(
        reply_for(Lsp, Err(Box::new(own.clone()))).await,
        Some(Response::error(Some(9.into()), own))
    );
    assert_eq!(
        reply_for(Lsp, Err(Box::new(DuplicateId(9.into())))).await,
        error_reply(-32600, "Invalid Request: request id 9 is already in flight")
    );
    assert_eq!(
        reply_for(Lsp, Err("disk on fire".into())).await,
        error_reply(-32603, "Internal error: disk on fire")
    );
}

#[tokio::test]
async fn cancellation_is_answered_as_each_dialect_says() {
    let cancelled = || -> Result<Value, BoxError> {
        Err(Box::new(Cancelled::new(CancelReason::peer(Some(
            "user".into(),
        )))))
    };
    assert_eq!(
        reply_for(Lsp, cancelled()).await,
        error_reply(-32800, "Request cancelled")
    );
    assert_eq!(
        reply_for(Acp, cancelled()).await,
        error_reply(-32800, "Request cancelled")
    );
    assert_eq!(
        reply_for(AcpDraft::new(), cancelled()).await,
        error_reply(-32800, "Cancelled")
    );
    assert_eq!(
        reply_for(Mcp, cancelled()).await,
        None,
        "MCP: no reply to a peer's cancel"
    );
}

#[tokio::test]
async fn internal_cancellation_is_answered_even_in_mcp() {
    let timed_out =
        || -> Result<Value, BoxError> { Err(Box::new(Cancelled::new(CancelReason::Timeout))) };
    assert_eq!(
        reply_for(Lsp, timed_out()).await,
        error_reply(-32800, "Request cancelled")
    );
    assert_eq!(
        reply_for(Mcp, timed_out()).await,
        error_reply(-32001, "Request timed out"),
        "the client is still waiting: a server-side timeout is answered"
    );
    assert_eq!(
        reply_for(Mcp, Err(Box::new(Cancelled::new(CancelReason::Shutdown)))).await,
        error_reply(
            -32603,
            "Internal error: request cancelled (server shutting down)"
        )
    );
    assert_eq!(
        reply_for(Mcp, Err(Box::new(Cancelled::new(CancelReason::Disconnect)))).await,
        None
    );
    // tower's Elapsed is a Timeout cancel only where the cancel layer decides so (it knows whether the request
    // can be cancelled); reaching this layer as it is, it is an ordinary failure.
    assert_eq!(
        reply_for(Acp, Err(Box::new(tower::timeout::error::Elapsed::new()))).await,
        error_reply(-32603, "Internal error: request timed out")
    );
}

#[tokio::test]
async fn lsp_server_cancellable_methods_get_server_cancelled_for_internal_cancels() {
    async fn reply(method: &'static str, reason: CancelReason) -> ErrorObject {
        let dialect = Lsp.server_cancellable(["textDocument/diagnostic"]);
        let (mut service, mut handle) =
            mock::spawn_layer::<Request, Value, _>(ErrorMapLayer::new(dialect));
        assert_ready_ok!(service.poll_ready());
        let mut response = task::spawn(service.call(Request::new(9, method, ())));
        let (_, send) = handle.next_request().await.unwrap();
        send.send_error(Cancelled::new(reason));
        assert_ready_ok!(response.poll())
            .unwrap()
            .outcome
            .unwrap_err()
    }
    assert_eq!(
        reply("textDocument/diagnostic", CancelReason::Timeout).await,
        ErrorObject::new(-32802, "Server cancelled the request")
            .with_data(json!({ "retriggerRequest": true }))
    );
    assert_eq!(
        reply("textDocument/diagnostic", CancelReason::Shutdown).await,
        ErrorObject::new(-32802, "Server cancelled the request")
            .with_data(json!({ "retriggerRequest": false }))
    );
    let by_peer = reply("textDocument/diagnostic", CancelReason::peer(None)).await;
    assert_eq!(by_peer.code, -32800, "a peer's cancel stays -32800");
    let other = reply("textDocument/hover", CancelReason::Timeout).await;
    assert_eq!(
        other.code, -32800,
        "methods that did not opt in stay -32800"
    );
}

#[tokio::test]
async fn panics_become_internal_errors_and_notifications_get_nothing() {
    // The cancel layer catches the panic where it decides the outcome; this layer renders it.
    let panicking = ServiceBuilder::new()
        .layer(ErrorMapLayer::new(Lsp))
        .layer(CancelLayer::new(Lsp))
        .service(service_fn(|req: Request| async move {
            if req.method() == "boom" {
                panic!("boom");
            }
            Err::<Value, BoxError>("failed".into())
        }));
    let reply = panicking
        .clone()
        .oneshot(Request::new(1, "boom", ()))
        .await
        .unwrap();
    assert_eq!(
        reply,
        Some(Response::error(
            Some(1.into()),
            ErrorObject::new(-32603, "Internal error: handler panicked")
        ))
    );
    let reply = panicking
        .oneshot(Request::notification("fails", ()))
        .await
        .unwrap();
    assert_eq!(reply, None);

    // A panic in `call` itself is caught too.
    #[derive(Clone)]
    struct PanicsInCall;
    impl Service<Request> for PanicsInCall {
        type Response = Value;
        type Error = BoxError;
        type Future = std::future::Ready<Result<Value, BoxError>>;
        fn poll_ready(
            &mut self,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Result<(), BoxError>> {
            std::task::Poll::Ready(Ok(()))
        }
        fn call(&mut self, _: Request) -> Self::Future {
            panic!("in call")
        }
    }
    let service = ServiceBuilder::new()
        .layer(ErrorMapLayer::new(Lsp))
        .layer(CancelLayer::new(Lsp))
        .service(PanicsInCall);
    let reply = service.oneshot(Request::new(2, "m", ())).await.unwrap();
    assert_eq!(
        reply,
        Some(Response::error(
            Some(2.into()),
            ErrorObject::new(-32603, "Internal error: handler panicked")
        ))
    );
}
