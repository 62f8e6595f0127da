//! The ABP app of `abp_app`, built here so that tests can serve the very same one in-process: the capabilities
//! `sleep {"ms"}` and `stats` behind [`AbpApp`], at `ws://ADDR/abp`.
//!
//! # The capabilities
//!
//! - `sleep {"ms": N}` waits N milliseconds and answers the data `{"slept": N}`. A cancel (or the call's
//!   `options.timeout`, or `--timeout-ms`) stops it at once: the stack drops the handler's future at its
//!   `.await`, the agent gets `{success: false, cancelled: true, error: {code: "CANCELLED" | "TIMEOUT"}}`, and the
//!   run counts as `cancelled`. Without a whole `ms` it answers `INVALID_PARAMS` and runs nothing.
//! - `stats` answers the data `{"started","completed","cancelled","inFlight"}`: the `sleep` handlers' counters,
//!   and `inFlight` the `sleep` handlers running now (over every session).
//!
//! Any other capability is answered by the stack's method-not-found: `UNKNOWN_CAPABILITY`.
//!
//! # Example
//!
//! ```no_run
//! # #[tokio::main] async fn main() -> std::io::Result<()> {
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! let app = examples::abp::App::new(None);
//! println!("listening on ws://{}/abp", listener.local_addr()?);
//! tower_cancel_http::serve(listener, app.router()).await
//! # }
//! ```

use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use axum::Router;
use serde_json::{json, Value};
use tower::{Layer, Service};
use tower_cancel::{
    dialect::{abp, Abp},
    CancelStack, ErrorObject, Request,
};
use tower_cancel_http::abp::{wire::AppInfo, AbpApp};

use crate::{SleepParams, SleepStats, Snapshot};

/// The app's id in `initialize-result`.
pub const APP_ID: &str = "tower-cancel-abp-example";

/// The capabilities listed in `initialize-result`.
pub const CAPABILITIES: [&str; 2] = ["sleep", "stats"];

/// The service the app serves: the ABP stack over the capabilities.
pub type Stack = <CancelStack<Abp> as Layer<Capabilities>>::Service;

/// The example's ABP app, and the counters of its `sleep` handlers.
#[derive(Clone, Debug)]
pub struct App {
    app: AbpApp<Stack>,
    stats: SleepStats,
}

impl App {
    /// The app, every call stopped after `timeout` if one is given (a call's own `options.timeout` may ask for
    /// less, never for more).
    pub fn new(timeout: Option<Duration>) -> Self {
        let stats = SleepStats::default();
        let stack = match timeout {
            Some(timeout) => CancelStack::abp().timeout(timeout),
            None => CancelStack::abp(),
        };
        let capabilities = Capabilities {
            stats: stats.clone(),
        };
        let app = AbpApp::new(stack.layer(capabilities))
            .app(AppInfo {
                id: APP_ID.into(),
                name: "tower-cancel ABP example".into(),
                version: env!("CARGO_PKG_VERSION").into(),
            })
            .capabilities(CAPABILITIES);
        Self { app, stats }
    }

    /// ABP at `/abp`.
    pub fn router(&self) -> Router {
        self.app.router()
    }

    /// The ABP app (its `stats`, `in_flight`, `shutdown`).
    pub fn abp(&self) -> &AbpApp<Stack> {
        &self.app
    }

    /// The `sleep` handlers' counters now.
    pub fn sleeps(&self) -> Snapshot {
        self.stats.snapshot()
    }
}

/// The capabilities, as one tower `Service` (the stack above it routes nothing: the method is the capability).
#[derive(Clone, Debug)]
pub struct Capabilities {
    stats: SleepStats,
}

impl Service<Request> for Capabilities {
    type Response = Value;
    type Error = ErrorObject;
    type Future = Pin<Box<dyn Future<Output = Result<Value, ErrorObject>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request) -> Self::Future {
        let stats = self.stats.clone();
        Box::pin(async move {
            match req.method() {
                "sleep" => {
                    let params: SleepParams = req.params_as().map_err(|_| {
                        abp::error(
                            abp::INVALID_PARAMS,
                            "sleep takes {\"ms\": N}, N a whole number of milliseconds",
                            false,
                        )
                    })?;
                    // Cancelled, this future is dropped at the sleep's `.await`: the run counts as cancelled.
                    Ok(crate::sleep(&stats, params).await)
                }
                "stats" => Ok(stats_json(stats.snapshot())),
                other => Err(ErrorObject::method_not_found(other)),
            }
        })
    }
}

/// The counters as `stats` answers them; `inFlight` is the `sleep` handlers started and not yet ended.
fn stats_json(snapshot: Snapshot) -> Value {
    let Snapshot {
        started,
        completed,
        cancelled,
    } = snapshot;
    json!({
        "started": started,
        "completed": completed,
        "cancelled": cancelled,
        // A run may end between the reads of `started` and of the others: never below zero.
        "inFlight": started.saturating_sub(completed + cancelled),
    })
}
