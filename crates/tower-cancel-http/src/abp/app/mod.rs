//! The app side of ABP: a WebSocket route that serves a stack of capability calls. See [`AbpApp`].

mod render;
mod session;

use std::{
    fmt,
    sync::{
        atomic::{AtomicU64, AtomicUsize, Ordering},
        Arc,
    },
};

use axum::{extract::WebSocketUpgrade, response::Response as HttpResponse, routing::get, Router};
use tokio_util::sync::CancellationToken;

use super::wire::{AppInfo, Capability};
use crate::call::{RpcService, Running};

/// The largest WebSocket message an app reads by default: an envelope past it closes the connection (as a
/// protocol error: one envelope is one frame).
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 1024 * 1024;

/// How many calls one session may have running at once by default; a call past it is answered `RATE_LIMITED`
/// (retryable) without running.
pub const DEFAULT_MAX_CALLS_PER_SESSION: usize = 1024;

/// An ABP app: serves a stack (a [`CancelStack`](tower_cancel::CancelStack) of the
/// [`Abp`](tower_cancel::dialect::Abp) dialect over your capabilities) over WebSocket, each connection one session.
///
/// A `capabilities/call` becomes a [`Request`](tower_cancel::Request): its method the capability, its params the
/// call's, its id the `callId` (a [`String`](tower_cancel::Id::String) id), with `options.timeout` as a
/// [`RequestedTimeout`](tower_cancel::timeout::RequestedTimeout) and `options.progressToken` in
/// [`CallOptions`](tower_cancel::dialect::abp::CallOptions). The handler sees a
/// [`RequestContext`](tower_cancel::RequestContext) as any JSON-RPC handler does; its result is the call's `data`,
/// its error the call's `error` (return [`abp::error`](tower_cancel::dialect::abp::error) to choose the ABP code).
///
/// # Sessions
///
/// | the agent sends | the app answers |
/// |---|---|
/// | `initialize` | `initialize-result {sessionId, protocolVersion, app, capabilities, features}` |
/// | `initialize` again | an `error` envelope `ALREADY_INITIALIZED` with the `initialize`'s id |
/// | a call before `initialize` | `call-result {success: false, error: {code: NOT_INITIALIZED, retryable: true}}` |
/// | a cancel before `initialize` | `cancel-result {callId, cancelled: false, error: {code: NOT_INITIALIZED}}` |
/// | a call with a `callId` in flight in the session | `call-result {success: false, error: {code: INVALID_PARAMS}}`; the running call is untouched |
/// | a call past the session's limit | `call-result {success: false, error: {code: RATE_LIMITED, retryable: true}}` |
/// | an envelope that is not one (not JSON, no `type`, an id over 256 bytes) | an `error` envelope `INVALID_MESSAGE` (an extension); the session goes on |
/// | an envelope of a type the app does not take | an `error` envelope `NOT_IMPLEMENTED` with its id |
/// | `shutdown`, or the socket closing | every call of the session cancelled (reason Disconnect), the socket closed |
///
/// # Cancels
///
/// A `capabilities/cancel` goes to the session's [`Connection::acknowledge_cancel`](tower_cancel::Connection::acknowledge_cancel),
/// and its `cancel-result` says what the call's lifecycle decided, atomically with the race against completion
/// (the table of [`Abp`](tower_cancel::dialect::Abp)). The `cancel-result` is sent before the cancelled call's
/// `call-result`. A cancel whose call the app has not seen is answered "Operation not found" and remembered: the
/// call, if it comes after all, never runs and is answered `cancelled: true`. The session remembers how its last
/// 4096 calls ended (1 MiB of ids at most); a cancel of a call forgotten there is answered as one of an unknown call.
///
/// # Example
///
/// ```no_run
/// use tower::{service_fn, ServiceBuilder};
/// use tower_cancel::{CancelStack, Request};
/// use tower_cancel_http::abp::{wire::AppInfo, AbpApp};
///
/// # #[tokio::main] async fn main() {
/// let stack = ServiceBuilder::new().layer(CancelStack::abp()).service(service_fn(|req: Request| async move {
///     let ctx = req.context().expect("set by the stack").clone();
///     tokio::select! {
///         _ = ctx.token().cancelled() => Err(tower_cancel::ErrorObject::internal_error("stopped")),
///         _ = tokio::time::sleep(std::time::Duration::from_secs(5)) => Ok(serde_json::json!({ "done": true })),
///     }
/// }));
/// let app = AbpApp::new(stack).app(AppInfo { id: "demo".into(), name: "Demo".into(), version: "1.0.0".into() })
///     .capabilities(["render"]);
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
/// axum::serve(listener, app.router()).await.unwrap();
/// # }
/// ```
pub struct AbpApp<S> {
    shared: Arc<Shared<S>>,
}

pub(crate) struct Shared<S> {
    pub(crate) service: S,
    pub(crate) info: AppInfo,
    pub(crate) capabilities: Vec<Capability>,
    pub(crate) max_message_bytes: usize,
    pub(crate) max_calls_per_session: usize,
    pub(crate) shutdown: CancellationToken,
    pub(crate) running: Running,
    pub(crate) counters: Counters,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) sessions: AtomicUsize,
    pub(crate) calls: AtomicU64,
    pub(crate) cancels: AtomicU64,
    pub(crate) bad_envelopes: AtomicU64,
}

/// What an app has seen, for logs and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AppStats {
    /// WebSocket sessions open now.
    pub sessions: usize,
    /// Calls running now, in every session (each on a task of its own).
    pub in_flight: usize,
    /// Calls taken so far.
    pub calls: u64,
    /// Cancels acknowledged so far.
    pub cancels: u64,
    /// Frames that were not envelopes, or envelopes of a type the app does not take.
    pub bad_envelopes: u64,
}

impl<S> Clone for AbpApp<S> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl<S> fmt::Debug for AbpApp<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AbpApp")
            .field("app", &self.shared.info)
            .field("stats", &self.stats())
            .finish()
    }
}

impl<S> AbpApp<S> {
    /// Stop: every session's calls are cancelled (answered `cancelled: true`, reason Shutdown), calls that come
    /// later are answered the same without running, and the sessions are closed once their results are sent.
    pub fn shutdown(&self) {
        self.shared.shutdown.cancel();
    }

    /// Calls running now, in every session.
    pub fn in_flight(&self) -> usize {
        self.shared.running.get()
    }

    /// The counters.
    pub fn stats(&self) -> AppStats {
        let counters = &self.shared.counters;
        AppStats {
            sessions: counters.sessions.load(Ordering::Acquire),
            in_flight: self.shared.running.get(),
            calls: counters.calls.load(Ordering::Relaxed),
            cancels: counters.cancels.load(Ordering::Relaxed),
            bad_envelopes: counters.bad_envelopes.load(Ordering::Relaxed),
        }
    }
}

impl<S: RpcService> AbpApp<S> {
    /// An app serving `service`, with no capabilities listed and an app id of `tower-cancel`.
    pub fn new(service: S) -> Self {
        Self {
            shared: Arc::new(Shared {
                service,
                info: AppInfo {
                    id: "tower-cancel".into(),
                    name: "tower-cancel".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                },
                capabilities: Vec::new(),
                max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
                max_calls_per_session: DEFAULT_MAX_CALLS_PER_SESSION,
                shutdown: CancellationToken::new(),
                running: Running::default(),
                counters: Counters::default(),
            }),
        }
    }

    /// Who the app says it is in `initialize-result`.
    pub fn app(self, info: AppInfo) -> Self {
        self.configure(|shared| shared.info = info)
    }

    /// The capabilities listed in `initialize-result` (all available). Calls of others still reach the service,
    /// which answers them as it will (a service that does not know a method answers -32601:
    /// `UNKNOWN_CAPABILITY`).
    pub fn capabilities<I: IntoIterator<Item = N>, N: Into<String>>(self, names: I) -> Self {
        let capabilities = names
            .into_iter()
            .map(|name| Capability {
                name: name.into(),
                available: true,
            })
            .collect();
        self.configure(|shared| shared.capabilities = capabilities)
    }

    /// The largest WebSocket message read ([`DEFAULT_MAX_MESSAGE_BYTES`] by default).
    pub fn max_message_bytes(self, bytes: usize) -> Self {
        self.configure(|shared| shared.max_message_bytes = bytes)
    }

    /// How many calls one session may have running ([`DEFAULT_MAX_CALLS_PER_SESSION`] by default).
    pub fn max_calls_per_session(self, calls: usize) -> Self {
        self.configure(|shared| shared.max_calls_per_session = calls)
    }

    fn configure(self, change: impl FnOnce(&mut Shared<S>)) -> Self {
        let mut shared = Arc::try_unwrap(self.shared).unwrap_or_else(|_| {
            panic!("configure an AbpApp before it serves (it has been cloned)")
        });
        change(&mut shared);
        Self {
            shared: Arc::new(shared),
        }
    }

    /// A `Router` serving ABP at `/abp` (merge it into yours, or nest it).
    pub fn router(&self) -> Router {
        self.router_at("/abp")
    }

    /// A `Router` serving ABP at `path`.
    pub fn router_at(&self, path: &str) -> Router {
        let shared = self.shared.clone();
        Router::new().route(
            path,
            get(move |upgrade: WebSocketUpgrade| upgrade_to_session(upgrade, shared)),
        )
    }
}

async fn upgrade_to_session<S: RpcService>(
    upgrade: WebSocketUpgrade,
    shared: Arc<Shared<S>>,
) -> HttpResponse {
    upgrade
        .max_message_size(shared.max_message_bytes)
        .max_frame_size(shared.max_message_bytes)
        .on_upgrade(move |socket| session::run(socket, shared))
}
