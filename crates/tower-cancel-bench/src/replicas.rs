//! Figure 9: a cancel across replicas. A request hangs on replica A; its cancel is made on replica B, where it
//! misses and is published; the time is from B's cancel call until A's response future has resolved (the handler
//! dropped, the reply settled). Over a private `redis-server` on loopback (`tower-cancel-redis`), and in process
//! (`LocalBus`) for comparison. One sample at a time, so each is the latency of a lone cancel.

use std::{
    convert::Infallible,
    time::{Duration, Instant},
};

use serde_json::Value;
use tower::{service_fn, Layer, ServiceExt};
use tower_cancel::{
    bus::{LocalBus, Replica},
    dialect::Mcp,
    BoxError, CancelReason, CancelStack, Id, Incoming, Message, Outbox, Request, Scope,
};
use tower_cancel_redis::{testing::RedisServer, Config, RedisBus};

/// The samples, sorted, of `samples` cancels from B to A over `a` and `b`.
async fn measure(a: &Replica, b: &Replica, samples: usize) -> Result<Vec<Duration>, String> {
    let on_a = a.scope("bench:session", Scope::with_dialect(Mcp));
    let on_b = b.scope("bench:session", Scope::with_dialect(Mcp));
    let exchange = on_a.connect_exchange(Outbox::closed());
    let stack = CancelStack::mcp();
    let mut times = Vec::with_capacity(samples);
    for id in 0..samples as i64 {
        let json = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call"}}"#);
        let message = Message::from_slice(json.as_bytes()).map_err(|e| e.to_string())?;
        let Incoming::Request(request) = exchange.receive(message) else {
            return Err("not a request".into());
        };
        let hang = service_fn(|_: Request| std::future::pending::<Result<Value, BoxError>>());
        let reply = tokio::spawn(stack.layer(hang).oneshot(request));
        while on_a.registry().is_empty() {
            tokio::task::yield_now().await;
        }
        let sent = Instant::now();
        on_b.cancel(&Id::Number(id), CancelReason::peer(None));
        let reply: Result<_, Infallible> = tokio::time::timeout(Duration::from_secs(10), reply)
            .await
            .map_err(|_| format!("cancel {id} did not reach replica A within 10 s"))?
            .map_err(|e| e.to_string())?;
        times.push(sent.elapsed());
        if reply.map_err(|e| e.to_string())?.is_some() {
            return Err("a cancelled MCP request got a reply".into());
        }
    }
    times.sort_unstable();
    Ok(times)
}

/// Cross-replica cancels over Redis (`None` when `redis-server` is not installed) and in process.
#[derive(Debug)]
pub struct Figures {
    /// Over Redis, each round's times sorted.
    pub redis: Option<Vec<Vec<Duration>>>,
    /// In process, each round's times sorted.
    pub local: Vec<Vec<Duration>>,
}

/// Measure both, `samples` cancels each per round, `rounds` rounds, the two buses alternating within each round
/// (each set up once, before the first).
pub fn run(samples: usize, rounds: usize) -> Result<Figures, String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let bus = LocalBus::new();
        let (local_a, local_b) = (bus.replica("a"), bus.replica("b"));
        // No redis-server: the figure says so rather than failing the whole run.
        let server = RedisServer::start();
        let redis = match &server {
            Some(server) => {
                let config = Config::new().stream("bench");
                let a = RedisBus::start(&server.url(), "a", config.clone())
                    .await
                    .map_err(|e| e.to_string())?;
                let b = RedisBus::start(&server.url(), "b", config)
                    .await
                    .map_err(|e| e.to_string())?;
                Some((a, b))
            }
            None => None,
        };
        let mut figures = Figures {
            redis: redis.as_ref().map(|_| Vec::new()),
            local: Vec::new(),
        };
        for _ in 0..rounds {
            figures
                .local
                .push(measure(&local_a, &local_b, samples).await?);
            if let (Some((a, b)), Some(rounds)) = (&redis, &mut figures.redis) {
                rounds.push(measure(a.replica(), b.replica(), samples).await?);
            }
        }
        Ok(figures)
    })
}

/// The `q` quantile of sorted `times` (nearest rank).
pub fn quantile(times: &[Duration], q: f64) -> Duration {
    let rank = ((times.len() as f64 * q).ceil() as usize).clamp(1, times.len());
    times[rank - 1]
}
