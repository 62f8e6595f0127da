//! Two replicas of a jsonrpsee server sharing one real Redis (a private `redis-server`): a principal's call runs
//! on A, its cancel is POSTed to B.

mod support;

use serde_json::json;
use support::{
    cancel, cancelled_reply, next, post, send, sleep_call, start, wait_until, ws, User, LONG_MS,
};
use tower_cancel::CancelReason;
use tower_cancel_jsonrpsee::CancelRpcLayer;
use tower_cancel_redis::{testing::RedisServer, Config, RedisBus};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_principals_cancel_posted_to_another_replica_stops_its_call() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let url = redis.url();
    let bus = |id| RedisBus::start(&url, id, Config::new().stream("jsonrpsee"));
    let (bus_a, bus_b) = (bus("a").await.unwrap(), bus("b").await.unwrap());
    let layer = |bus: &RedisBus| {
        CancelRpcLayer::new()
            .cancel_messages(true)
            .scope_by_principal_on::<User>(bus.replica().clone())
    };
    let a = start(layer(&bus_a)).await;
    let b = start(layer(&bus_b)).await;

    let mut alice = ws(a.addr, Some("alice")).await;
    send(&mut alice, sleep_call(json!(1), LONG_MS)).await;
    wait_until("started on A", || a.probe.started() == 1).await;
    // Bob's cancel on B reaches nothing of alice's.
    assert_eq!(post(b.addr, Some("bob"), cancel(json!(1))).await.0, 200);
    // Alice's, on B, stops her call on A as a cancel sent to A would.
    assert_eq!(post(b.addr, Some("alice"), cancel(json!(1))).await.0, 200);
    assert_eq!(next(&mut alice).await, cancelled_reply(json!(1)));
    assert_eq!(
        a.probe.stopped(),
        [("1".to_owned(), Some(CancelReason::peer(None)))]
    );
    assert_eq!(
        bus_a.replica().stats().applied,
        1,
        "bob's cancel applied to no call"
    );
    wait_until("nothing left", || {
        a.layer.in_flight() == 0 && b.layer.in_flight() == 0
    })
    .await;
}
