//! [`AcpService`]: an agent of the ACP SDK as the service under a [`CancelStack`](tower_cancel::CancelStack).

use std::{
    fmt,
    future::Future,
    pin::Pin,
    sync::{Arc, Mutex, MutexGuard},
    task::{Context, Poll},
};

use agent_client_protocol::{Client, ConnectTo};
use serde_json::Value;
use tower_cancel::{ErrorObject, Request, WireRequest};
use tower_service::Service;

use crate::{call, link::Link};

/// An agent of `agent-client-protocol` 5.2 (an `Agent.v1()` builder with its handlers, or any
/// `ConnectTo<Client>`) as a `tower::Service` of ACP requests, to put under
/// [`CancelStack::acp()`](tower_cancel::CancelStack::acp). See the [crate docs](crate).
///
/// It is made from a function that builds the agent, and runs the SDK's own connection for it over an in-memory
/// channel. Make one `AcpService` per client connection, as the SDK serves one agent per transport. A handler's
/// panic unwinds the SDK's whole connection: every request it was working on is answered -32603
/// `handler panicked`, and the next request is served by a fresh agent from the function, sent the client's
/// `initialize` first.
///
/// Cloning gives another handle to the same agent.
pub struct AcpService<F> {
    shared: Arc<Shared<F>>,
}

struct Shared<F> {
    agent: F,
    link: Mutex<Option<Link>>,
    /// The client's `initialize`, replayed to an agent that takes over from one that ended.
    initialize: Mutex<Option<WireRequest>>,
}

/// The sizes of an [`AcpService`]'s tables, for leak checks: all zero once nothing is in flight.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BridgeSizes {
    /// Requests handed to the SDK and not yet answered or cancelled.
    pub requests: usize,
    /// Prompts in flight, by session.
    pub prompts: usize,
    /// Requests the agent made to the client inside a prompt, still open.
    pub nested: usize,
    /// Requests the agent made to the client outside any prompt, still open.
    pub loose: usize,
}

impl<F, A> AcpService<F>
where
    F: Fn() -> A + Send + Sync + 'static,
    A: ConnectTo<Client>,
{
    /// Serve the agent `agent` builds (called once, and again only after a handler's panic ended the SDK's
    /// connection).
    pub fn new(agent: F) -> Self {
        Self {
            shared: Arc::new(Shared {
                agent,
                link: Mutex::new(None),
                initialize: Mutex::new(None),
            }),
        }
    }

    /// The sizes of the bridge's tables.
    pub fn sizes(&self) -> BridgeSizes {
        let link = self.shared.link();
        let Some(link) = link.as_ref() else {
            return BridgeSizes::default();
        };
        let (requests, prompts, nested, loose) = link.router().sizes();
        BridgeSizes {
            requests,
            prompts,
            nested,
            loose,
        }
    }

    /// The SDK connection serving `req`, started if there is none (or the last one ended).
    fn router_for(&self, req: &Request) -> Arc<crate::link::Router> {
        if req.method() == "initialize" {
            *lock(&self.shared.initialize) = Some(req.wire().clone());
        }
        let mut link = self.shared.link();
        match link.as_ref() {
            Some(current) if !current.router().has_ended() => current.router().clone(),
            _ => {
                let replay = match link.is_some() {
                    // Taking over: the new agent must be initialized as the client initialized the old one.
                    true if req.method() != "initialize" => lock(&self.shared.initialize).clone(),
                    _ => None,
                };
                if link.is_some() {
                    tracing::warn!("the agent's connection ended: a fresh agent takes over");
                }
                let started = Link::start((self.shared.agent)(), replay.as_ref());
                link.insert(started).router().clone()
            }
        }
    }
}

impl<F> Shared<F> {
    fn link(&self) -> MutexGuard<'_, Option<Link>> {
        lock(&self.link)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

impl<F> Clone for AcpService<F> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl<F> fmt::Debug for AcpService<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AcpService")
            .field("running", &self.shared.link().is_some())
            .finish_non_exhaustive()
    }
}

impl<F, A> Service<Request> for AcpService<F>
where
    F: Fn() -> A + Send + Sync + 'static,
    A: ConnectTo<Client>,
{
    type Response = Value;
    type Error = ErrorObject;
    type Future = Pin<Box<dyn Future<Output = Result<Value, ErrorObject>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), ErrorObject>> {
        // The SDK takes every frame at once (its channel is unbounded) and its handlers spawn their own work.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request) -> Self::Future {
        let router = self.router_for(&req);
        Box::pin(call::call(router, req))
    }
}
