//! `lsp_server` again, written on async-lsp 0.2's `Router` and served behind tower-cancel with
//! `tower-cancel-async-lsp`: the same methods, the same answers on the wire (tests/interop/CONTRACT.md).
//!
//! ```text
//! cargo run -p examples --bin lsp_server_async_lsp
//! cargo run -p examples --bin lsp_server_async_lsp -- --timeout-ms 5000   # requests time out after 5 s (-32800)
//! ```

use std::ops::ControlFlow;

use examples::{SleepParams, SleepStats};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tower_cancel::{CancelStack, Registry};
use tower_cancel_async_lsp::{
    async_lsp::{
        lsp_types::{
            notification::{Exit, Initialized},
            request::{Initialize, Request, Shutdown},
            InitializeResult, ServerCapabilities, ServerInfo,
        },
        router::Router,
        ResponseError,
    },
    AsyncLsp,
};
use tower_cancel_io::Server;

/// `demo/sleep {"ms"}`: `{"slept": ms}` after that long.
enum DemoSleep {}

#[derive(Serialize, Deserialize)]
struct DemoSleepParams {
    ms: u64,
}

impl Request for DemoSleep {
    type Params = DemoSleepParams;
    type Result = Value;
    const METHOD: &'static str = "demo/sleep";
}

/// `demo/stats`: the sleep handlers' counters.
enum DemoStats {}

impl Request for DemoStats {
    type Params = Value;
    type Result = Value;
    const METHOD: &'static str = "demo/stats";
}

struct State {
    stats: SleepStats,
    registry: Registry,
}

fn router(registry: Registry) -> Router<State> {
    let mut router = Router::new(State {
        stats: SleepStats::default(),
        registry,
    });
    router
        .request::<Initialize, _>(|_, _| async {
            Ok(InitializeResult {
                capabilities: ServerCapabilities::default(),
                server_info: Some(ServerInfo {
                    name: "tower-cancel-lsp-example".into(),
                    version: Some(env!("CARGO_PKG_VERSION").into()),
                }),
            })
        })
        .request::<Shutdown, _>(|_, ()| async { Ok::<_, ResponseError>(()) })
        .request::<DemoSleep, _>(|state, DemoSleepParams { ms }| {
            let stats = state.stats.clone();
            async move { Ok(examples::sleep(&stats, SleepParams { ms }).await) }
        })
        .request::<DemoStats, _>(|state, _| {
            // `inFlight` does not count the stats request itself, registered as it runs.
            let in_flight = state.registry.len().saturating_sub(1);
            let stats = state.stats.to_json_with(in_flight);
            async move { Ok(stats) }
        })
        .notification::<Initialized>(|_, _| ControlFlow::Continue(()))
        .notification::<Exit>(|_, ()| ControlFlow::Break(Ok(())));
    router
}

#[tokio::main]
async fn main() {
    examples::init_tracing();
    let registry = Registry::new();
    let lsp = AsyncLsp::new_server({
        let registry = registry.clone();
        |_client| router(registry)
    });
    let stack = CancelStack::lsp().timeouts(examples::timeouts_from_args());
    let server = Server::with_stack(stack, lsp.service()).with_registry(registry);
    let served = lsp.serve_stdio(server).await;
    // End the process here rather than by returning: tokio reads stdin on a blocking thread that only ends when
    // stdin closes, and dropping the runtime would wait for it.
    if let Err(error) = served {
        tracing::error!(%error, "connection failed");
        std::process::exit(1);
    }
    std::process::exit(0);
}
