//! `lsp_server` again, written on async-lsp 0.2's `Router` and served behind tower-cancel with
//! `tower-cancel-async-lsp`: the same methods, the same answers on the wire (tests/interop/CONTRACT.md).
//! `demo/progress` reports through async-lsp's `ClientSocket`, whose messages go out through async-lsp's main
//! loop: the `end` of a cancelled run follows the -32800 instead of coming before it.
//!
//! ```text
//! cargo run -p examples --bin lsp_server_async_lsp
//! cargo run -p examples --bin lsp_server_async_lsp -- --timeout-ms 5000   # requests time out after 5 s (-32800)
//! ```

use std::{
    ops::ControlFlow,
    sync::atomic::{AtomicU64, Ordering},
};

use examples::{
    lsp_progress::{self, ProgressParams},
    SleepParams, SleepStats,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tower_cancel::{CancelStack, Registry};
use tower_cancel_async_lsp::{
    async_lsp::{
        lsp_types::{
            self as lsp,
            notification::{Exit, Initialized, Progress, WorkDoneProgressCancel},
            request::{Initialize, Request, Shutdown, WorkDoneProgressCreate},
            InitializeResult, NumberOrString, ServerCapabilities, ServerInfo, WorkDoneProgress,
            WorkDoneProgressBegin, WorkDoneProgressCreateParams, WorkDoneProgressEnd,
            WorkDoneProgressReport,
        },
        router::Router,
        ClientSocket, ResponseError,
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

/// `demo/progress {"steps", "intervalMs"}`: `{"steps": N}`, with progress under a token the server creates.
enum DemoProgress {}

impl Request for DemoProgress {
    type Params = ProgressParams;
    type Result = Value;
    const METHOD: &'static str = "demo/progress";
}

struct State {
    client: ClientSocket,
    stats: SleepStats,
    registry: Registry,
}

/// The token of each `demo/progress`: unique on the connection (vscode-jsonrpc refuses a token it knows).
static NEXT_TOKEN: AtomicU64 = AtomicU64::new(1);

/// A progress token the client accepted, reported under with async-lsp's `ClientSocket`; ended when dropped (the
/// handler finished, or its request was cancelled and its future dropped).
struct Reporting {
    client: ClientSocket,
    token: NumberOrString,
}

impl Reporting {
    fn send(&self, value: WorkDoneProgress) {
        let params = lsp::ProgressParams {
            token: self.token.clone(),
            value: lsp::ProgressParamsValue::WorkDone(value),
        };
        // Fails only when the main loop is gone: then the connection is too.
        let _ = self.client.notify::<Progress>(params);
    }
}

impl Drop for Reporting {
    fn drop(&mut self) {
        self.send(WorkDoneProgress::End(WorkDoneProgressEnd { message: None }));
    }
}

/// `demo/progress`, on async-lsp: `window/workDoneProgress/create` through the `ClientSocket` (the adapter sends
/// it through the handler's child peer, which binds the token to this request), then `begin`, a `report` per
/// step, `end`. The client's `window/workDoneProgress/cancel` of the token drops this future.
async fn progress(client: ClientSocket, stats: SleepStats, params: ProgressParams) -> Value {
    let run = stats.start();
    let token = NumberOrString::String(format!(
        "async-lsp-progress-{}",
        NEXT_TOKEN.fetch_add(1, Ordering::Relaxed)
    ));
    let created = client
        .request::<WorkDoneProgressCreate>(WorkDoneProgressCreateParams {
            token: token.clone(),
        })
        .await;
    let reporting = match created {
        Ok(()) => {
            let reporting = Reporting { client, token };
            reporting.send(WorkDoneProgress::Begin(WorkDoneProgressBegin {
                title: lsp_progress::TITLE.into(),
                cancellable: Some(true),
                message: None,
                percentage: Some(0),
            }));
            Some(reporting)
        }
        // LSP: no progress under a token the client refused.
        Err(error) => {
            tracing::info!(%error, "the client refused the progress token: working without progress");
            None
        }
    };
    for step in 1..=params.steps {
        tokio::time::sleep(params.interval()).await;
        if let Some(reporting) = &reporting {
            reporting.send(WorkDoneProgress::Report(WorkDoneProgressReport {
                cancellable: None,
                message: Some(params.message(step)),
                percentage: Some(params.percentage(step)),
            }));
        }
    }
    drop(reporting);
    run.finish();
    params.answer()
}

fn router(client: ClientSocket, registry: Registry) -> Router<State> {
    let mut router = Router::new(State {
        client,
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
        .request::<DemoProgress, _>(|state, params| {
            let (client, stats) = (state.client.clone(), state.stats.clone());
            async move { Ok::<_, ResponseError>(progress(client, stats, params).await) }
        })
        .request::<DemoStats, _>(|state, _| {
            // `inFlight` does not count the stats request itself, registered as it runs.
            let in_flight = state.registry.len().saturating_sub(1);
            let stats = state.stats.to_json_with(in_flight);
            async move { Ok(stats) }
        })
        .notification::<Initialized>(|_, _| ControlFlow::Continue(()))
        // The stack acts on it (the request of the token is cancelled) and passes it on: async-lsp's `Router`
        // needs a handler for every notification that is not a `$/` one.
        .notification::<WorkDoneProgressCancel>(|_, _| ControlFlow::Continue(()))
        .notification::<Exit>(|_, ()| ControlFlow::Break(Ok(())));
    router
}

#[tokio::main]
async fn main() {
    examples::init_tracing();
    let registry = Registry::new();
    let lsp = AsyncLsp::new_server({
        let registry = registry.clone();
        |client| router(client, registry)
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
