//! The timeout layer's service on its own, with a context as a cancel layer above would give it: what goes on the
//! layer's queue of deadlines, and when.

use std::{future::Future, task::Poll, time::Duration};

use futures_util::{future::BoxFuture, FutureExt};
use tokio::time::advance;
use tower::{service_fn, Layer, Service};

use super::TimeoutLayer;
use crate::{
    context::RequestContext,
    lifecycle::{Lifecycle, SharedLifecycle},
    message::Id,
    outcome::BoxError,
    reason::CancelReason,
    request::Request,
};

fn request_with_context(id: i64, method: &str) -> (Request, SharedLifecycle) {
    let lifecycle = SharedLifecycle::new(Lifecycle::new(Id::from(id), 1));
    let mut request = Request::new(id, method, ());
    request.set_context(RequestContext::new(lifecycle.clone(), None));
    (request, lifecycle)
}

fn handler(req: Request) -> BoxFuture<'static, Result<serde_json::Value, BoxError>> {
    async move {
        if req.method() == "wait" {
            std::future::pending::<()>().await;
        }
        Ok(serde_json::Value::Null)
    }
    .boxed()
}

/// Let the queues' tasks run until they wait again (they sleep on the runtime's paused clock).
pub(super) async fn settle() {
    for _ in 0..4 {
        tokio::task::yield_now().await;
    }
}

fn poll_once<F: Future>(future: std::pin::Pin<&mut F>) -> Poll<F::Output> {
    future.poll(&mut std::task::Context::from_waker(
        futures_util::task::noop_waker_ref(),
    ))
}

#[tokio::test(start_paused = true)]
async fn a_request_answered_on_its_first_poll_never_goes_on_the_queue() {
    let layer = TimeoutLayer::new(Duration::from_secs(30));
    let mut service = layer.layer(service_fn(handler));
    for id in 0..100 {
        let (request, _) = request_with_context(id, "work");
        let mut future = std::pin::pin!(service.call(request));
        let polled = poll_once(future.as_mut());
        assert!(matches!(polled, Poll::Ready(Ok(serde_json::Value::Null))));
    }
    let expiry = layer.expiry();
    assert_eq!((expiry.watched(), expiry.entries()), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn a_waiting_request_is_on_the_queue_until_it_ends_and_cancelled_at_its_deadline() {
    let layer = TimeoutLayer::new(Duration::from_secs(30));
    let mut service = layer.layer(service_fn(handler));
    let expiry = layer.expiry();

    let (request, dropped) = request_with_context(1, "wait");
    let mut future = Box::pin(service.call(request));
    assert!(poll_once(future.as_mut()).is_pending());
    assert_eq!(expiry.watched(), 1, "on the queue once it waits");
    drop(future);
    assert_eq!(expiry.watched(), 0, "off it when its future is dropped");
    assert!(!dropped.is_cancelled());

    let (request, timed_out) = request_with_context(2, "wait");
    let mut future = Box::pin(service.call(request));
    assert!(poll_once(future.as_mut()).is_pending());
    advance(Duration::from_secs(31)).await;
    settle().await;
    assert_eq!(timed_out.reason(), Some(&CancelReason::Timeout));
}
