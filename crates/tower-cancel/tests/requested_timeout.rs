//! A timeout the transport read from outside the params (ABP's `options.timeout`): honoured by every timeout
//! layer, even one without rules, never longer than the layer's own limit.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::time::Instant;
use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
use tower_cancel::{
    dialect::abp,
    timeout::{RequestedTimeout, TimeoutLayer},
    BoxError, CancelStack, Request,
};

fn asking(ms: u64) -> Request {
    let mut request = Request::new("call-1", "hang", json!({}));
    request
        .extensions_mut()
        .insert(RequestedTimeout(Duration::from_millis(ms)));
    request
}

async fn hang(req: Request) -> Result<Value, BoxError> {
    let deadline = req.context().and_then(|ctx| ctx.deadline());
    tokio::time::sleep(Duration::from_secs(3600)).await;
    Ok(json!({ "deadline": deadline.is_some() }))
}

#[tokio::test(start_paused = true)]
async fn a_stack_without_timeout_rules_still_honours_a_requested_timeout() {
    let service = ServiceBuilder::new()
        .layer(CancelStack::abp())
        .service(service_fn(hang));
    let started = Instant::now();
    let reply = service.oneshot(asking(50)).await.unwrap().unwrap();
    assert_eq!(started.elapsed(), Duration::from_millis(50));
    let error = abp::read_error(&reply.outcome.unwrap_err());
    assert_eq!((error.code.as_str(), error.cancelled), (abp::TIMEOUT, true));
}

#[tokio::test(start_paused = true)]
async fn a_requested_timeout_never_extends_the_servers_limit() {
    let service = ServiceBuilder::new()
        .layer(CancelStack::abp().timeout(Duration::from_millis(100)))
        .service(service_fn(hang));
    let started = Instant::now();
    let reply = service.oneshot(asking(10_000)).await.unwrap().unwrap();
    assert_eq!(
        started.elapsed(),
        Duration::from_millis(100),
        "capped at the stack's"
    );
    assert!(reply.outcome.is_err());
}

#[tokio::test(start_paused = true)]
async fn a_transparent_layer_hands_the_ready_service_to_the_timed_request() {
    // One permit below, and the layer kept across calls as a server keeps it: the permit its readiness took must
    // go with the request. Were it kept by the layer, the request would wait for a second permit until its own
    // timeout.
    let mut service = ServiceBuilder::new()
        .layer(TimeoutLayer::none())
        .concurrency_limit(1)
        .service(service_fn(|_req: Request| async {
            Ok::<_, BoxError>(json!("done"))
        }));
    for _ in 0..3 {
        let reply = service.ready().await.unwrap().call(asking(1000)).await;
        assert_eq!(reply.unwrap(), json!("done"));
    }
}
