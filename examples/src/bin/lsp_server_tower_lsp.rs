//! The `lsp_server` example's contract, served by a tower-lsp-server `LanguageServer` under tower-cancel: the
//! server's code is tower-lsp's, the driver and the stack are tower-cancel's (crate `tower-cancel-tower-lsp`).
//!
//! ```text
//! cargo run -p examples --bin lsp_server_tower_lsp
//! cargo run -p examples --bin lsp_server_tower_lsp -- --timeout-ms 5000   # requests time out after 5 s (-32800)
//! ```
//!
//! Methods: `initialize`, `initialized`, `shutdown`, `exit`, and `demo/sleep {"ms"}` (answers `{"slept": ms}`
//! after that long; -32800 when cancelled) and `demo/stats` (the sleep handlers' counters; `inFlight`: the
//! requests in tower-cancel's registry other than this one).

use examples::{SleepParams, SleepStats};
use serde_json::Value;
use tower_cancel::{CancelStack, Registry};
use tower_cancel_io::{Framing, Server};
use tower_cancel_tower_lsp::LspAdapter;
use tower_lsp_server::{
    jsonrpc::Result,
    ls_types::{InitializeParams, InitializeResult, ServerCapabilities, ServerInfo},
    LanguageServer, LspService,
};

/// The language server, as a tower-lsp user writes it.
struct Demo {
    stats: SleepStats,
    registry: Registry,
}

impl LanguageServer for Demo {
    async fn initialize(&self, _: InitializeParams) -> Result<InitializeResult> {
        Ok(InitializeResult {
            capabilities: ServerCapabilities::default(),
            server_info: Some(ServerInfo {
                name: "tower-cancel-lsp-example".into(),
                version: Some(env!("CARGO_PKG_VERSION").into()),
            }),
            ..InitializeResult::default()
        })
    }

    async fn shutdown(&self) -> Result<()> {
        Ok(())
    }
}

impl Demo {
    /// `demo/sleep`: cancelling the request drops this future (counted by `SleepStats`).
    async fn sleep(&self, params: SleepParams) -> Result<Value> {
        Ok(examples::sleep(&self.stats, params).await)
    }

    /// `demo/stats`: this request is in the registry too, so it is not counted. Its params (`{}`) are ignored;
    /// tower-lsp refuses params given to a method declared without any.
    async fn stats(&self, _params: Value) -> Result<Value> {
        Ok(self
            .stats
            .to_json_with(self.registry.len().saturating_sub(1)))
    }
}

#[tokio::main]
async fn main() {
    examples::init_tracing();
    let stack = CancelStack::lsp().timeouts(examples::timeouts_from_args());
    let scope = stack.scope();
    let registry = scope.registry().clone();
    let service = LspService::build(|_client| Demo {
        stats: SleepStats::default(),
        registry,
    })
    .custom_method("demo/sleep", Demo::sleep)
    .custom_method("demo/stats", Demo::stats)
    .finish();
    let adapter = LspAdapter::new(service);
    let exited = adapter.exited();
    let server = Server::with_stack(stack, adapter).in_scope(scope);
    let served = tokio::select! {
        served = server.serve_stdio(Framing::ContentLength) => served,
        () = exited.cancelled() => Ok(()),
    };
    // End the process here rather than by returning: tokio reads stdin on a blocking thread that only ends when
    // stdin closes, and dropping the runtime would wait for it. Replies are flushed as they are written.
    if let Err(error) = served {
        tracing::error!(%error, "connection failed");
        std::process::exit(1);
    }
    std::process::exit(0);
}
