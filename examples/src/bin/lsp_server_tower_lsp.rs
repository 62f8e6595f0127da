//! The `lsp_server` example's contract, served by a tower-lsp-server `LanguageServer` under tower-cancel: the
//! server's code is tower-lsp's, the driver and the stack are tower-cancel's (crate `tower-cancel-tower-lsp`).
//!
//! ```text
//! cargo run -p examples --bin lsp_server_tower_lsp
//! cargo run -p examples --bin lsp_server_tower_lsp -- --timeout-ms 5000   # requests time out after 5 s (-32800)
//! ```
//!
//! Methods: `initialize`, `initialized`, `shutdown`, `exit`, and `demo/sleep {"ms"}` (answers `{"slept": ms}`
//! after that long; -32800 when cancelled), `demo/progress {"steps", "intervalMs"}` (progress under a token it
//! creates with tower-lsp's `Client`; the client's `window/workDoneProgress/cancel` stops it with -32800) and
//! `demo/stats` (the sleep and progress handlers' counters; `inFlight`: the requests in tower-cancel's registry
//! other than this one).

use std::sync::atomic::{AtomicU64, Ordering};

use examples::{
    lsp_progress::{self, ProgressParams},
    SleepParams, SleepStats,
};
use futures_util::FutureExt;
use serde_json::Value;
use tower_cancel::{CancelStack, Registry};
use tower_cancel_io::{Framing, Server};
use tower_cancel_tower_lsp::LspAdapter;
use tower_lsp_server::{
    jsonrpc::Result,
    ls_types::{InitializeParams, InitializeResult, ProgressToken, ServerCapabilities, ServerInfo},
    Bounded, Cancellable, Client, LanguageServer, LspService, OngoingProgress,
};

/// The language server, as a tower-lsp user writes it.
struct Demo {
    client: Client,
    stats: SleepStats,
    registry: Registry,
    next_token: AtomicU64,
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

    /// `demo/progress`: tower-lsp's `Client` creates the token (`window/workDoneProgress/create`, sent through the
    /// handler's child peer, which binds the token to this request) and reports under it. The client's cancel of
    /// the token drops this future; the [`EndOnDrop`] guard then ends the progress, before the -32800.
    async fn progress(&self, params: ProgressParams) -> Result<Value> {
        let run = self.stats.start();
        let n = self.next_token.fetch_add(1, Ordering::Relaxed);
        let token = ProgressToken::String(format!("tower-lsp-progress-{n}"));
        let progress = match self.client.create_work_done_progress(token.clone()).await {
            Ok(()) => {
                let begun = self
                    .client
                    .progress(token, lsp_progress::TITLE)
                    .with_percentage(0)
                    .with_cancel_button()
                    .begin()
                    .await;
                Some(EndOnDrop(Some(begun)))
            }
            // LSP: no progress under a token the client refused.
            Err(error) => {
                tracing::info!(%error, "the client refused the progress token: working without progress");
                None
            }
        };
        for step in 1..=params.steps {
            tokio::time::sleep(params.interval()).await;
            if let Some(EndOnDrop(Some(progress))) = &progress {
                let (message, percentage) = (params.message(step), params.percentage(step));
                progress
                    .report_with_message(message, percentage, None)
                    .await;
            }
        }
        if let Some(mut progress) = progress {
            if let Some(progress) = progress.0.take() {
                progress.finish().await;
            }
        }
        run.finish();
        Ok(params.answer())
    }

    /// `demo/stats`: this request is in the registry too, so it is not counted. Its params (`{}`) are ignored;
    /// tower-lsp refuses params given to a method declared without any.
    async fn stats(&self, _params: Value) -> Result<Value> {
        Ok(self
            .stats
            .to_json_with(self.registry.len().saturating_sub(1)))
    }
}

/// Ends a progress whose handler is dropped before it ended it (the request was cancelled). tower-lsp's `Client`
/// sends asynchronously; its channel takes one message from each fresh sender at once, so the `end` is in it
/// when the drop returns, and the adapter sends it on before the stack writes the cancelled reply.
struct EndOnDrop(Option<OngoingProgress<Bounded, Cancellable>>);

impl Drop for EndOnDrop {
    fn drop(&mut self) {
        if let Some(progress) = self.0.take() {
            let _ = progress.finish().now_or_never();
        }
    }
}

#[tokio::main]
async fn main() {
    examples::init_tracing();
    let stack = CancelStack::lsp().timeouts(examples::timeouts_from_args());
    let scope = stack.scope();
    let registry = scope.registry().clone();
    let service = LspService::build(|client| Demo {
        client,
        stats: SleepStats::default(),
        registry,
        next_token: AtomicU64::new(1),
    })
    .custom_method("demo/sleep", Demo::sleep)
    .custom_method("demo/progress", Demo::progress)
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
