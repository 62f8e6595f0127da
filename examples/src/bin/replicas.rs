//! A cancel across replicas: two replicas of the RAP tool server (`rap_tool_server`'s tools) in one process, on
//! two ports, sharing one Redis. A long `sleep` is invoked on replica A; the runtime's cancel is POSTed to replica
//! B, which never saw the call; A stops it.
//!
//! ```text
//! cargo run -p examples --bin replicas -- --redis redis://127.0.0.1:6379
//! cargo run -p examples --bin replicas                      # starts a private redis-server if one is installed
//! cargo run -p examples --bin replicas -- --cancels 1000    # and the latency over 1000 cancels
//! ```
//!
//! It prints one line, `cross-replica cancel: stopped in N ms` (N: from the cancel's POST to B until the handler on
//! A is stopped), and exits 0. With `--cancels K` it then repeats that K times and prints
//! `over K cancels: p50 X ms, p99 Y ms, max Z ms`. Exits 1 if Redis cannot be reached (or, without `--redis`, if
//! `redis-server` is not installed), or if a cancel does not stop its call within 10 s.

use std::{
    process::ExitCode,
    time::{Duration, Instant},
};

use axum::{routing::post, Router};
use serde_json::json;
use tower_cancel_redis::{testing::RedisServer, Config, RedisBus};

const TOKEN: &str = "replicas-example";

#[tokio::main]
async fn main() -> ExitCode {
    examples::init_tracing();
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(why) => {
            eprintln!("replicas: {why}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), String> {
    let (url, _own_redis) = match examples::string_arg("--redis") {
        Some(url) => (url, None),
        None => {
            let server = std::panic::catch_unwind(RedisServer::start)
                .ok()
                .flatten()
                .ok_or(
                    "no --redis given and no redis-server installed (apt-get install redis-server)",
                )?;
            (server.url(), Some(server))
        }
    };
    // One stream for every run: a replica reads from the end it finds at start, so earlier runs' entries are not
    // replayed, and a shared Redis keeps one bounded key for the example.
    let config = Config::new().stream("tower-cancel:replicas-example");
    let bus_a = RedisBus::start(&url, "a", config.clone())
        .await
        .map_err(|e| format!("{url}: {e}"))?;
    let bus_b = RedisBus::start(&url, "b", config)
        .await
        .map_err(|e| format!("{url}: {e}"))?;
    let a = Replica::start(&bus_a).await?;
    let b = Replica::start(&bus_b).await?;
    let callback = callback_url().await?;
    let http = reqwest::Client::new();

    let first = cancel_across(&http, &a, &b, &callback, 0).await?;
    println!("cross-replica cancel: stopped in {:.2} ms", millis(first));

    let rounds = examples::number_arg("--cancels", 0);
    if rounds > 0 {
        let mut times = Vec::with_capacity(rounds as usize);
        for round in 1..=rounds {
            times.push(cancel_across(&http, &a, &b, &callback, round).await?);
        }
        times.sort_unstable();
        let at =
            |q: f64| times[((times.len() as f64 * q).ceil() as usize).clamp(1, times.len()) - 1];
        println!(
            "over {rounds} cancels: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            millis(at(0.50)),
            millis(at(0.99)),
            millis(at(1.0)),
        );
    }
    Ok(())
}

/// One replica: the example's tool server on a port of its own, attached to its bus.
struct Replica {
    base: String,
    server: examples::rap::Server,
}

impl Replica {
    async fn start(bus: &RedisBus) -> Result<Self, String> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| e.to_string())?;
        let base = format!(
            "http://{}",
            listener.local_addr().map_err(|e| e.to_string())?
        );
        // Both replicas and the callback are on this host: private callbacks are allowed.
        let server = examples::rap::Server::with_options(
            &base,
            examples::rap::Options {
                replica: Some(bus.replica().clone()),
                allow_private_callbacks: true,
                ..Default::default()
            },
        );
        let router = server.router(TOKEN);
        tokio::spawn(async move { tower_cancel_http::serve(listener, router).await });
        Ok(Self { base, server })
    }

    async fn post(
        &self,
        http: &reqwest::Client,
        path: &str,
        body: serde_json::Value,
    ) -> Result<(), String> {
        let response = http
            .post(format!("{}{path}", self.base))
            .bearer_auth(TOKEN)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .map_err(|e| format!("{path}: {e}"))?;
        if !response.status().is_success() {
            return Err(format!("{path}: {}", response.status()));
        }
        Ok(())
    }
}

/// Invoke a long sleep on A, wait until it runs, POST its cancel to B, and time until A's handler is stopped.
async fn cancel_across(
    http: &reqwest::Client,
    a: &Replica,
    b: &Replica,
    callback: &str,
    round: u64,
) -> Result<Duration, String> {
    let (thread, call) = (format!("thread-{round}"), format!("call-{round}"));
    let before = a.server.sleeps();
    let invocation = json!({
        "operation": "sleep", "arguments": {"ms": 60_000}, "id": call,
        "callback_url": callback, "group_id": thread,
    });
    a.post(http, "/invoke", invocation).await?;
    wait("the sleep to start on A", || {
        a.server.sleeps().started > before.started
    })
    .await?;

    let sent = Instant::now();
    let cancel = json!({"thread_id": thread, "tool_call_id": call});
    b.post(http, "/cancel_tool_call", cancel).await?;
    wait("the cancel to stop the sleep on A", || {
        a.server.sleeps().cancelled > before.cancelled
    })
    .await?;
    Ok(sent.elapsed())
}

/// Poll `done` (yielding, not sleeping: a timer's millisecond would blur what is measured), for 10 s at most.
async fn wait(what: &str, mut done: impl FnMut() -> bool) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        if Instant::now() > deadline {
            return Err(format!("timed out waiting for {what}"));
        }
        tokio::task::yield_now().await;
    }
    Ok(())
}

/// Where results would go: a cancelled call sends none, so this endpoint only answers.
async fn callback_url() -> Result<String, String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let router = Router::new().route("/results", post(|| async { "" }));
    tokio::spawn(async move { tower_cancel_http::serve(listener, router).await });
    Ok(format!("http://{addr}/results"))
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
