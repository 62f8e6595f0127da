//! Shared pieces of the example servers: the sleep handler's counters, the LSP progress demo, the MCP tools, the
//! RAP tool server, the ABP app, the jsonrpsee server, logging, flags.

pub mod abp;
pub mod acp_sdk;
pub mod jsonrpsee_server;
pub mod lsp_progress;
pub mod mcp;
pub mod mcp_rmcp;
pub mod rap;

use std::{
    fmt,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, OnceLock,
    },
    time::Duration,
};

use serde_json::{json, Value};
use tower_cancel::{Request, TimeoutLayer};

/// Counters of the sleep handlers, shared by every request of a server.
#[derive(Clone, Debug, Default)]
pub struct SleepStats {
    inner: Arc<Counters>,
}

#[derive(Debug, Default)]
struct Counters {
    started: AtomicU64,
    completed: AtomicU64,
    cancelled: AtomicU64,
}

/// The sleep handlers' counters at one moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// Handlers that began running.
    pub started: u64,
    /// Handlers that finished normally.
    pub completed: u64,
    /// Handlers stopped before finishing.
    pub cancelled: u64,
}

/// Counts one run of a handler: `started` when made, `completed` on [`Run::finish`], `cancelled` if dropped
/// before that (the handler's future was dropped: it was stopped).
#[derive(Debug)]
pub struct Run {
    stats: SleepStats,
    finished: bool,
}

impl Run {
    /// The handler finished normally.
    pub fn finish(mut self) {
        self.finished = true;
        self.stats.inner.completed.fetch_add(1, Ordering::SeqCst);
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        if !self.finished {
            self.stats.inner.cancelled.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl SleepStats {
    /// Start counting a run.
    pub fn start(&self) -> Run {
        self.inner.started.fetch_add(1, Ordering::SeqCst);
        Run {
            stats: self.clone(),
            finished: false,
        }
    }

    /// The counters now.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            started: self.inner.started.load(Ordering::SeqCst),
            completed: self.inner.completed.load(Ordering::SeqCst),
            cancelled: self.inner.cancelled.load(Ordering::SeqCst),
        }
    }

    /// The counters as the examples answer them. `inFlight` counts the requests of the connection's registry
    /// other than `req` itself.
    pub fn to_json(&self, req: &Request) -> Value {
        let registry = req.connection().map(|connection| connection.registry());
        let in_flight = registry.map_or(0, |r| {
            let own = req.id().is_some_and(|id| r.contains(id));
            r.len() - usize::from(own)
        });
        self.to_json_with(in_flight)
    }

    /// The counters as the examples answer them, with `inFlight` counted by the caller.
    pub fn to_json_with(&self, in_flight: usize) -> Value {
        let Snapshot {
            started,
            completed,
            cancelled,
        } = self.snapshot();
        json!({
            "started": started,
            "completed": completed,
            "cancelled": cancelled,
            "inFlight": in_flight,
        })
    }
}

/// Where a server's `inFlight` comes from: the request's connection (a stream server, whose connection is the
/// whole conversation), or an HTTP endpoint's count of its running requests, over every session and POST.
#[derive(Clone, Debug, Default)]
pub struct InFlight {
    endpoint: Arc<OnceLock<EndpointCount>>,
}

/// An HTTP endpoint's count of running requests (`JsonRpc::in_flight`, `McpHttp::in_flight`).
struct EndpointCount(Box<dyn Fn() -> usize + Send + Sync>);

impl fmt::Debug for EndpointCount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("EndpointCount")
    }
}

impl InFlight {
    /// Count the endpoint's running requests with `count` from now on. The endpoint is built around the handler
    /// that holds this, so it can only be given once it exists.
    pub fn set_endpoint(&self, count: impl Fn() -> usize + Send + Sync + 'static) {
        let set = self.endpoint.set(EndpointCount(Box::new(count)));
        assert!(set.is_ok(), "the endpoint is set once");
    }

    /// The endpoint's count, once [`set_endpoint`](Self::set_endpoint) was called.
    pub fn endpoint_count(&self) -> Option<usize> {
        self.endpoint.get().map(|EndpointCount(count)| count())
    }

    /// The counters for `req`'s answer: `inFlight` not counting `req` itself.
    pub fn stats(&self, stats: &SleepStats, req: &Request) -> Value {
        match self.endpoint.get() {
            // The endpoint counts `req` too: it is running.
            Some(EndpointCount(count)) => stats.to_json_with(count().saturating_sub(1)),
            None => stats.to_json(req),
        }
    }
}

/// The params of the sleep handlers: `{"ms": N}`.
#[derive(Debug, serde::Deserialize)]
pub struct SleepParams {
    /// How long to sleep, in milliseconds.
    pub ms: u64,
}

/// The sleep handler: waits `ms` milliseconds and answers `{"slept": ms}`. Cancelling the request drops this
/// future at its `.await`, which the [`Run`] guard counts.
pub async fn sleep(stats: &SleepStats, SleepParams { ms }: SleepParams) -> Value {
    let run = stats.start();
    tokio::time::sleep(Duration::from_millis(ms)).await;
    run.finish();
    json!({ "slept": ms })
}

/// Log to standard error (standard output carries the protocol). `RUST_LOG` sets the level (default `info`).
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
}

/// The timeouts of `--timeout-ms T`: every request times out after `T` of inactivity (each progress report
/// pushes the deadline back), and after `10 * T` in all. Without the flag, no timeout.
pub fn timeouts_from_args() -> TimeoutLayer {
    match number_arg("--timeout-ms", 0) {
        0 => TimeoutLayer::none(),
        ms => TimeoutLayer::new(Duration::from_millis(ms))
            .reset_on_progress(Duration::from_millis(ms.saturating_mul(10))),
    }
}

/// When the MCP examples end each subscription by themselves: `--subscription-ms N` (never without it, or with 0).
pub fn subscription_end_from_args() -> Option<Duration> {
    match number_arg("--subscription-ms", 0) {
        0 => None,
        ms => Some(Duration::from_millis(ms)),
    }
}

/// Whether `--flag` was given.
pub fn flag(name: &str) -> bool {
    std::env::args().any(|a| a == name)
}

/// The value of `--name VALUE`, if given.
pub fn string_arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).map(|i| {
        args.get(i + 1)
            .unwrap_or_else(|| panic!("{name} takes a value"))
            .clone()
    })
}

/// The value of `--name N`, or `default`.
pub fn number_arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name} takes a number, got {v:?}"))
        })
        .unwrap_or(default)
}
