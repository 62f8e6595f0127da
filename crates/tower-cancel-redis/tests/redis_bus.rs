//! Two replicas on one real Redis (a private `redis-server`): a request runs on A, its cancel lands on B. Also the
//! early cancel across replicas, scopes kept apart, Redis killed and restarted mid-run, and a malformed entry.

mod support;

use std::time::Duration;

use serde_json::Value;
use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
use tower_cancel::{
    dialect::Mcp, registry::CancelOutcome, BoxError, CancelReason, CancelStack, Connection, Id,
    Incoming, Message, Outbox, Request, Response, Scope,
};
use tower_cancel_redis::{Config, RedisBus};

use support::{until, RedisServer};

fn hang(
) -> impl Service<Request, Response = Option<Response>, Error = std::convert::Infallible, Future: Send>
       + Clone {
    ServiceBuilder::new()
        .layer(CancelStack::mcp())
        .service(service_fn(|_: Request| {
            std::future::pending::<Result<Value, BoxError>>()
        }))
}

/// The request on `connection`, on a task; the handle resolves to its reply, or fails the test if it is still
/// running after 10 s (nothing stopped it).
async fn run(connection: &Connection, id: i64) -> tokio::task::JoinHandle<Option<Response>> {
    let json = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call"}}"#);
    let Incoming::Request(request) =
        connection.receive(Message::from_slice(json.as_bytes()).unwrap())
    else {
        panic!("a request")
    };
    let before = connection.in_flight();
    let reply = tokio::spawn(hang().oneshot(request));
    // On a multi-thread runtime the task may run later: the request is "running" once it is registered.
    until("the request registered", || connection.in_flight() > before).await;
    tokio::spawn(async move {
        let reply = tokio::time::timeout(Duration::from_secs(10), reply).await;
        reply
            .expect("the request was not stopped")
            .unwrap()
            .unwrap()
    })
}

/// Two replicas of one deployment on `server`, each on a stream of the test's own.
async fn replicas(server: &RedisServer, stream: &str, config: Config) -> (RedisBus, RedisBus) {
    let config = config.stream(stream);
    let a = RedisBus::start(&server.url(), "a", config.clone())
        .await
        .unwrap();
    let b = RedisBus::start(&server.url(), "b", config).await.unwrap();
    (a, b)
}

fn user_cancel() -> CancelReason {
    CancelReason::peer(Some("user stopped it".into()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_on_b_stops_the_request_running_on_a() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let (a, b) = replicas(&server, "t:stop", Config::default()).await;
    let on_a = a.replica().scope("session:S", Scope::with_dialect(Mcp));
    let on_b = b.replica().scope("session:S", Scope::with_dialect(Mcp));

    let reply = run(&on_a.connect_exchange(Outbox::closed()), 7).await;
    assert_eq!(
        on_b.cancel(&Id::Number(7), user_cancel()),
        CancelOutcome::Remembered
    );

    // MCP: the cancelled request gets no reply, on whichever replica it ran.
    assert!(reply.await.unwrap().is_none());
    assert_eq!(on_a.registry().stats().cancelled, 1);
    assert_eq!(b.replica().stats().published, 1);
    // B's writer counts its XADD once Redis answers it, which may be after A has read the entry.
    until("B's XADD answered", || b.stats().published == 1).await;
    until("A read B's entry", || a.stats().received == 1).await;
    assert_eq!(a.replica().stats().applied, 1);
    assert!(on_a.registry().is_empty() && on_b.registry().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_that_overtakes_its_request_across_replicas_still_cancels_it() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let (a, b) = replicas(&server, "t:early", Config::default()).await;
    let on_a = a.replica().scope("session:S", Scope::with_dialect(Mcp));
    let on_b = b.replica().scope("session:S", Scope::with_dialect(Mcp));
    on_b.cancel(&Id::String("late".into()), user_cancel());
    until("A remembered the cancel", || {
        on_a.registry().stats().early_cancels == 1
    })
    .await;

    let json = r#"{"jsonrpc":"2.0","id":"late","method":"tools/call"}"#;
    let Incoming::Request(request) = on_a
        .connect_exchange(Outbox::closed())
        .receive(Message::from_slice(json.as_bytes()).unwrap())
    else {
        panic!("a request")
    };
    let started = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let ran = started.clone();
    let mut service = ServiceBuilder::new()
        .layer(CancelStack::mcp())
        .service(service_fn(move |_: Request| {
            ran.store(true, std::sync::atomic::Ordering::SeqCst);
            async { Ok::<_, BoxError>(Value::Null) }
        }));
    let reply = service.ready().await.unwrap().call(request).await.unwrap();
    assert!(reply.is_none(), "cancelled on arrival: no reply (MCP)");
    assert!(
        !started.load(std::sync::atomic::Ordering::SeqCst),
        "the handler never ran"
    );
    assert!(on_a.registry().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_for_one_scope_never_reaches_another() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let (a, b) = replicas(&server, "t:apart", Config::default()).await;
    let s_on_a = a.replica().scope("session:S", Scope::with_dialect(Mcp));
    let t_on_a = a.replica().scope("session:T", Scope::with_dialect(Mcp));
    let s_on_b = b.replica().scope("session:S", Scope::with_dialect(Mcp));
    let in_s = run(&s_on_a.connect_exchange(Outbox::closed()), 7).await;
    let in_t = run(&t_on_a.connect_exchange(Outbox::closed()), 7).await;

    s_on_b.cancel(&Id::Number(7), user_cancel());
    assert!(in_s.await.unwrap().is_none());
    assert_eq!(
        t_on_a.registry().len(),
        1,
        "T's request of the same id runs on"
    );
    assert!(!in_t.is_finished());
    t_on_a.close(CancelReason::Shutdown);
    in_t.await.unwrap();
    assert!(s_on_a.registry().is_empty() && t_on_a.registry().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_and_restarted_mid_run() {
    let Some(mut server) = RedisServer::start() else {
        return;
    };
    let config = Config::new()
        .queue(4)
        .timing(Duration::from_millis(200), Duration::from_millis(500))
        .backoff(Duration::from_millis(50), Duration::from_millis(200));
    let (a, b) = replicas(&server, "t:outage", config).await;
    let on_a = a.replica().scope("session:S", Scope::with_dialect(Mcp));
    let on_b = b.replica().scope("session:S", Scope::with_dialect(Mcp));
    let across = run(&on_a.connect_exchange(Outbox::closed()), 1).await;

    server.kill();
    // Redis is away: requests keep coming in, a local cancel works as ever, and nothing blocks.
    let local = run(&on_a.connect_exchange(Outbox::closed()), 2).await;
    assert_eq!(
        on_a.cancel(&Id::Number(2), user_cancel()),
        CancelOutcome::Cancelled
    );
    assert!(local.await.unwrap().is_none());
    // B's cancel for A's request waits in B's queue; past the queue's 4, cancels are dropped and counted.
    for id in [1, 101, 102, 103, 104, 105] {
        on_b.cancel(&Id::Number(id), user_cancel());
    }
    until("B's writer found Redis away", || {
        b.stats().publish_failures >= 1
    })
    .await;
    until("the queue overflowed", || b.stats().dropped >= 1).await;
    assert!(
        !across.is_finished(),
        "nothing reached A while Redis was away"
    );

    server.restart();
    // What was queued is written once Redis is back, and A reads it: the request stops.
    assert!(across.await.unwrap().is_none());
    until("both readers back", || {
        a.stats().reading && b.stats().reading
    })
    .await;
    // Each of B's six cancels is written once Redis is back, or was counted as lost when the queue was full.
    until("B's queue drained", || {
        let b = b.stats();
        b.published + b.dropped == 6
    })
    .await;
    let (a_stats, b_stats) = (a.stats(), b.stats());
    assert!(b_stats.dropped >= 1, "{b_stats:?}");
    assert!(a_stats.reconnects >= 1 && b_stats.reconnects >= 1);
    until("A read every entry written", || {
        a.stats().received == b.stats().published
    })
    .await;

    // After the reconnect, a cancel goes across as before.
    let after = run(&on_a.connect_exchange(Outbox::closed()), 3).await;
    on_b.cancel(&Id::Number(3), user_cancel());
    assert!(after.await.unwrap().is_none());
    assert!(on_a.registry().is_empty() && on_b.registry().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_that_is_not_a_cancel_is_counted_and_skipped() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let (a, b) = replicas(&server, "t:garbage", Config::default()).await;
    let client = redis::Client::open(server.url()).unwrap();
    let mut raw = client.get_multiplexed_async_connection().await.unwrap();
    let _: String = redis::cmd("XADD")
        .arg("t:garbage")
        .arg("*")
        .arg("id")
        .arg("{not an id")
        .query_async(&mut raw)
        .await
        .unwrap();
    until("A skipped it", || a.stats().malformed == 1).await;

    // And the stream goes on working after it.
    let on_a = a.replica().scope("k", Scope::with_dialect(Mcp));
    let on_b = b.replica().scope("k", Scope::with_dialect(Mcp));
    let reply = run(&on_a.connect_exchange(Outbox::closed()), 1).await;
    on_b.cancel(&Id::Number(1), user_cancel());
    assert!(reply.await.unwrap().is_none());
    assert!(on_a.registry().is_empty());
}
