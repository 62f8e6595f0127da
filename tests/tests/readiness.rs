//! A service that fails readiness: one policy wherever it is seen (below the cancel layer, below the error map alone,
//! or a bare service under the driver). The request that waited for it is answered -32603 `service unavailable`
//! (the service's error stays in the log), the service is not called for it, and the connection goes on.

use std::{
    future::{ready, Ready},
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    task::{Context, Poll},
};

use serde_json::{json, Value};
use tests::{Conn, Counts};
use tower::{Service, ServiceBuilder};
use tower_cancel::{dialect::Lsp, BoxError, CancelStack, ErrorMapLayer, Request, Response};
use tower_cancel_io::{Framing, Server};

const UNAVAILABLE_1: &str = r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"Internal error: service unavailable"}}"#;

/// Fails readiness once (the first time it is asked), then serves `echo`; counts its calls.
#[derive(Clone, Default)]
struct FailsOnce {
    asked: Arc<AtomicUsize>,
    calls: Arc<AtomicUsize>,
}

impl Service<Request> for FailsOnce {
    type Response = Value;
    type Error = BoxError;
    type Future = Ready<Result<Value, BoxError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        if self.asked.fetch_add(1, Ordering::SeqCst) == 0 {
            return Poll::Ready(Err("the backend is down".into()));
        }
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request) -> Self::Future {
        ready(Ok(self.answer(&req)))
    }
}

impl FailsOnce {
    fn answer(&self, req: &Request) -> Value {
        self.calls.fetch_add(1, Ordering::SeqCst);
        json!({ "echo": req.method() })
    }
}

/// Request 1 meets the failure, request 2 is served: the same replies whatever stack sees the failure.
async fn fails_once_then_serves(mut conn: Conn, service: &FailsOnce) {
    conn.send(r#"{"jsonrpc":"2.0","id":1,"method":"first"}"#)
        .await;
    conn.expect(UNAVAILABLE_1).await;
    conn.send(r#"{"jsonrpc":"2.0","id":2,"method":"second"}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":2,"result":{"echo":"second"}}"#)
        .await;
    assert_eq!(
        service.calls.load(Ordering::SeqCst),
        1,
        "request 1 never reached it"
    );
    conn.finish_quiet().await;
}

#[tokio::test(start_paused = true)]
async fn below_the_cancel_layer() {
    let service = FailsOnce::default();
    let stack = ServiceBuilder::new()
        .layer(CancelStack::lsp())
        .service(service.clone());
    let conn = Conn::start(Server::new(stack), Framing::ContentLength);
    let registry = conn.registry().clone();
    fails_once_then_serves(conn, &service).await;
    assert_eq!(Counts::of(&registry), Counts::new(2, 2, 0));
}

#[tokio::test(start_paused = true)]
async fn below_the_error_map_alone() {
    let service = FailsOnce::default();
    let stack = ServiceBuilder::new()
        .layer(ErrorMapLayer::new(Lsp))
        .service(service.clone());
    fails_once_then_serves(
        Conn::start(Server::new(stack), Framing::ContentLength),
        &service,
    )
    .await;
}

/// A bare service (no layer of ours) answering `Option<Response>` itself.
#[derive(Clone, Default)]
struct Bare(FailsOnce);

impl Service<Request> for Bare {
    type Response = Option<Response>;
    type Error = BoxError;
    type Future = Ready<Result<Option<Response>, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        let value = self.0.answer(&req);
        ready(Ok(req.id().cloned().map(|id| Response::ok(id, value))))
    }
}

#[tokio::test(start_paused = true)]
async fn under_the_driver_with_no_layer_of_ours() {
    let service = Bare::default();
    let conn = Conn::start(Server::new(service.clone()), Framing::ContentLength);
    fails_once_then_serves(conn, &service.0).await;
}
