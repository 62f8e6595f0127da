//! [`RmcpService`]: an rmcp server as the service under a [`CancelStack`](tower_cancel::CancelStack).

use std::{
    collections::HashMap,
    fmt,
    future::Future,
    pin::Pin,
    sync::{Arc, Mutex, MutexGuard, OnceLock},
    task::{Context, Poll},
};

use rmcp::service::RoleServer;
use serde_json::Value;
use tower_cancel::{ErrorObject, Request};
use tower_cancel_http::mcp::Revision;
use tower_service::Service;

use crate::{call, link::Link};

/// An rmcp server (a [`ServerHandler`](rmcp::ServerHandler), or any `rmcp::Service<RoleServer>`) as a
/// `tower::Service` of MCP requests, to put under [`CancelStack::mcp()`](tower_cancel::CancelStack::mcp). See the
/// [crate docs](crate).
///
/// It runs one rmcp server (rmcp's own loop: its handshake state, its peer) per conversation:
///
/// - over a stream ([`tower_cancel_io::Server`](https://docs.rs/tower-cancel-io)), one for the service: make
///   one `RmcpService` per connection, as rmcp serves one handler per transport;
/// - behind [`McpHttp`](tower_cancel_http::McpHttp), one per session of the `2025-11-25` revision (ended by
///   [`end_session`](Self::end_session), which [`McpHttp::on_session_end`](tower_cancel_http::McpHttp::on_session_end)
///   calls), and one shared by every request of the stateless `2026-07-28` revision, which carries what it needs
///   in its own `_meta`.
///
/// Cloning gives another handle to the same servers.
pub struct RmcpService<S> {
    shared: Arc<Shared<S>>,
}

struct Shared<S> {
    service: S,
    own: OnceLock<Link>,
    stateless: OnceLock<Link>,
    sessions: Mutex<HashMap<String, Arc<Link>>>,
}

/// The sizes of an [`RmcpService`]'s tables, for leak checks: all zero once nothing is in flight.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BridgeSizes {
    /// Requests handed to rmcp and not yet answered or cancelled.
    pub requests: usize,
    /// Progress tokens of those requests.
    pub progress_tokens: usize,
    /// Requests the handlers made to the client, still open.
    pub nested: usize,
    /// rmcp servers running for sessions.
    pub sessions: usize,
}

impl<S> RmcpService<S>
where
    S: rmcp::Service<RoleServer> + Clone,
{
    /// Serve `service` (your `ServerHandler`, cloned for each rmcp server started).
    pub fn new(service: S) -> Self {
        Self {
            shared: Arc::new(Shared {
                service,
                own: OnceLock::new(),
                stateless: OnceLock::new(),
                sessions: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// The session `id` of [`McpHttp`](tower_cancel_http::McpHttp) ended: stop its rmcp server (every handler of it
    /// still running has its `ct` cancelled). Its requests in flight were already cancelled by the session's end.
    pub fn end_session(&self, id: &str) {
        let link = self.shared.sessions().remove(id);
        if link.is_some() {
            tracing::debug!(session = id, "session ended: its rmcp server stopped");
        }
    }

    /// The sizes of the bridge's tables, summed over its rmcp servers.
    pub fn sizes(&self) -> BridgeSizes {
        let mut links: Vec<Arc<Link>> = self.shared.sessions().values().cloned().collect();
        let sessions = links.len();
        let mut sizes = BridgeSizes {
            sessions,
            ..BridgeSizes::default()
        };
        let mut add = |link: &Link| {
            let (requests, tokens, nested) = link.router().sizes();
            sizes.requests += requests;
            sizes.progress_tokens += tokens;
            sizes.nested += nested;
        };
        for link in links.drain(..) {
            add(&link);
        }
        for link in [self.shared.own.get(), self.shared.stateless.get()]
            .into_iter()
            .flatten()
        {
            add(link);
        }
        sizes
    }

    /// The rmcp server for `req`'s conversation, started if need be.
    fn router_for(&self, req: &Request) -> Arc<crate::link::Router> {
        let shared = &self.shared;
        match req.extensions().get::<Revision>() {
            Some(Revision::Stateless { .. }) => shared
                .stateless
                .get_or_init(|| Link::start(shared.service.clone()))
                .router()
                .clone(),
            Some(Revision::Session { id: Some(id), .. }) => shared
                .sessions()
                .entry(id.clone())
                .or_insert_with(|| Arc::new(Link::start(shared.service.clone())))
                .router()
                .clone(),
            _ => shared
                .own
                .get_or_init(|| Link::start(shared.service.clone()))
                .router()
                .clone(),
        }
    }
}

impl<S> Shared<S> {
    fn sessions(&self) -> MutexGuard<'_, HashMap<String, Arc<Link>>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl<S> Clone for RmcpService<S> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl<S> fmt::Debug for RmcpService<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RmcpService")
            .field("sessions", &self.shared.sessions().len())
            .finish_non_exhaustive()
    }
}

impl<S> Service<Request> for RmcpService<S>
where
    S: rmcp::Service<RoleServer> + Clone,
{
    type Response = Value;
    type Error = ErrorObject;
    type Future = Pin<Box<dyn Future<Output = Result<Value, ErrorObject>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), ErrorObject>> {
        // rmcp runs every request on a task of its own: nothing to wait for.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request) -> Self::Future {
        let router = self.router_for(&req);
        Box::pin(call::call(router, req))
    }
}
