//! Give requests a deadline.
//!
//! [`TimeoutLayer`] goes just inside the [`CancelLayer`](crate::CancelLayer). A request's limit is its method's
//! ([`TimeoutLayer::method`]) or else the default; a request may carry its own, shorter timeout in
//! `params._meta.<field>` ([`TimeoutLayer::from_meta`]) or, set by its transport, in a [`RequestedTimeout`]
//! extension (ABP's `options.timeout`), never a longer one than that limit. The deadline is visible in the request's
//! [`RequestContext::deadline`](crate::RequestContext::deadline).
//!
//! # Expiry is a cancellation
//!
//! When the deadline passes, the request is cancelled with [`CancelReason::Timeout`](crate::CancelReason::Timeout)
//! through its lifecycle, exactly like a peer's cancel: one outcome, the entry removed, the dialect's reply
//! (-32800 for LSP and ACP, -32001 for MCP, see each dialect). Without a cancel layer above, the future ends
//! itself with a [`Cancelled`](crate::Cancelled) error.
//!
//! A timeout is a cancellation, so a request its dialect never lets be cancelled (`initialize`; in the ACP draft,
//! everything before initialization) gets no deadline.
//!
//! # Idle timeouts
//!
//! With [`TimeoutLayer::reset_on_progress`], each progress report pushes the deadline back to a full timeout from
//! now, never past the maximum total.
//!
//! # Backpressure
//!
//! The service is always ready, and the deadline is armed when the request arrives: a request queued behind a
//! saturated `ConcurrencyLimit` below waits for the inner service's readiness inside its own future, and times out
//! there like any other (it is then never called). Like the cancel layer's, this needs the inner service to be
//! `Clone`: each request takes a clone of it to wait on. A layer without any rule (`TimeoutLayer::none()`, what
//! the stack has unless you set a timeout) is transparent instead: it forwards readiness and calls, and costs
//! nothing.
//!
//! # Timers
//!
//! A request with a cancel layer above (the stack's, always) gets no timer of its own: its deadline goes on a queue
//! the layer's requests share, and one task per queue sleeps until the earliest deadline and cancels what has passed.
//! A layer has a queue for each worker thread it is used from (at most 8), so that workers do not take turns on one
//! lock; a queue's task is spawned, on the runtime of the request that needs it, when the queue's first deadline
//! arrives, and ends when the layer and its last request are gone (or its runtime shuts down: the next request starts
//! another). A layer shared by two runtimes may have one time the other's requests: a runtime that is not being
//! driven (a `current_thread` runtime outside its `block_on`) times nothing meanwhile. A request that ends first
//! leaves nothing behind. Without a cancel layer above, a request's future sleeps on a tokio timer of its own, as it
//! must end itself; so does a request whose only limit is its transport's [`RequestedTimeout`] under a layer without
//! rules (that layer keeps nothing, queues included).
//!
//! tower's own `tower::timeout::TimeoutLayer` also works below the stack: the cancel layer turns its `Elapsed`
//! error into the same Timeout cancellation (for a request that can be cancelled; `initialize` timing out that
//! way is an ordinary failure, -32603).
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use tower::{service_fn, ServiceBuilder, ServiceExt};
//! use tower_cancel::{timeout::TimeoutLayer, CancelStack, Request};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
//! let timeouts = TimeoutLayer::new(Duration::from_secs(30)).method("workspace/symbol", Duration::from_secs(5));
//! let service = ServiceBuilder::new()
//!     .layer(CancelStack::lsp().timeouts(timeouts))
//!     .service(service_fn(|_req: Request| async {
//!         tokio::time::sleep(Duration::from_secs(60)).await;
//!         Ok::<_, tower_cancel::BoxError>(serde_json::Value::Null)
//!     }));
//! let reply = service.oneshot(Request::new(1, "workspace/symbol", ())).await.unwrap().unwrap();
//! assert_eq!(reply.outcome.unwrap_err().code, -32800);
//! # }
//! ```

mod expiry;
mod future;
mod layer;

use std::{
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use serde::Deserialize;
use tokio::time::Instant;
use tower_service::Service;

pub use self::{future::ResponseFuture, layer::TimeoutLayer};
pub use crate::lifecycle::{Deadline, DEADLINE_FIELD};
use crate::{lifecycle::after, outcome::BoxError, request::Request};
use layer::Config;

/// A timeout the peer asked for in a place the params do not hold (ABP's `options.timeout`), put on the
/// [`Request`]'s extensions by the transport. Every [`TimeoutLayer`] honours it, even one without rules of its
/// own; like `params._meta`'s, it can shorten the server's limit, never extend it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestedTimeout(pub Duration);

/// The service built by [`TimeoutLayer`].
#[derive(Clone, Debug)]
pub struct Timeout<S> {
    inner: S,
    // `None` for a layer configured with nothing at all (the stack's default): the cancel layer clones this
    // service for every request, and an `Arc` would cost each one an atomic increment and decrement.
    config: Option<Arc<Config>>,
}

impl<S> Timeout<S> {
    pub(crate) fn new(inner: S, config: Arc<Config>) -> Self {
        let empty = !config.has_rules() && config.max_total.is_none();
        Self {
            inner,
            config: (!empty).then_some(config),
        }
    }

    fn has_rules(&self) -> bool {
        self.config.as_deref().is_some_and(Config::has_rules)
    }

    fn meta_field(&self) -> Option<&Arc<str>> {
        self.config.as_deref()?.meta_field.as_ref()
    }

    fn max_total(&self) -> Option<Duration> {
        self.config.as_deref().and_then(|config| config.max_total)
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Consume this, giving the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }

    fn timeout_for(&self, req: &Request) -> Option<Duration> {
        let config = self.config.as_deref();
        let configured = config.and_then(|config| {
            config
                .per_method
                .get(req.method())
                .copied()
                .or(config.default)
        });
        let own = req
            .extensions()
            .get::<RequestedTimeout>()
            .map(|requested| requested.0)
            .or_else(|| {
                config
                    .and_then(|config| config.meta_field.as_deref())
                    .and_then(|field| meta_millis(req, field))
            });
        match (own, configured) {
            // A request may ask for less time than the server allows, never for more: the server's limits
            // protect it from its peers.
            (Some(own), Some(limit)) => Some(own.min(limit)),
            (own, configured) => own.or(configured),
        }
    }
}

fn meta_millis(req: &Request, field: &str) -> Option<Duration> {
    #[derive(Deserialize)]
    struct WithMeta {
        #[serde(rename = "_meta")]
        meta: Option<serde_json::Map<String, serde_json::Value>>,
    }
    let meta = req.params_as::<WithMeta>().ok()?.meta?;
    meta.get(field)?.as_u64().map(Duration::from_millis)
}

impl<S> Service<Request> for Timeout<S>
where
    S: Service<Request> + Clone,
    S::Error: Into<BoxError>,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = ResponseFuture<S>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // A layer that gives no request a deadline (`TimeoutLayer::none()`, the stack's default) is transparent:
        // readiness is the inner service's, and each request is handed straight on.
        if !self.has_rules() {
            return self.inner.poll_ready(cx).map_err(Into::into);
        }
        // Always ready, so that the deadline is armed when the request arrives: the request waits for the inner
        // service's readiness inside its own future, where its deadline (and any cancel) can still reach it.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request) -> Self::Future {
        let transparent = !self.has_rules();
        if transparent && req.extensions().get::<RequestedTimeout>().is_none() {
            return ResponseFuture::direct(self.inner.call(req));
        }
        // Notifications are never answered, so they have nothing to time out.
        let timeout = if req.is_notification() {
            None
        } else {
            self.timeout_for(&req)
        };
        // The clone takes the readiness-free copy of the inner service into the request's own future. A transparent
        // layer forwarded the inner service's readiness: the service made ready goes into the future instead (it
        // may hold a permit), and the clone stays.
        let inner = if transparent {
            let clone = self.inner.clone();
            std::mem::replace(&mut self.inner, clone)
        } else {
            self.inner.clone()
        };
        let Some(timeout) = timeout else {
            return ResponseFuture::new(inner, req, None, None);
        };
        let now = Instant::now();
        let Some(context) = req.context().cloned() else {
            // No cancel layer above: this future ends itself at the deadline.
            let sleep = tokio::time::sleep_until(after(now, timeout));
            return ResponseFuture::new(inner, req, Some(sleep), None);
        };
        // A timeout is a cancellation: a request that cannot be cancelled (`initialize`) takes no deadline. An
        // outer timeout layer may have set one already; the first one set counts, and it is the one slept on.
        let taken = context.set_deadline(Deadline::new(now, timeout, self.max_total()));
        if let (true, Some(field)) = (taken, self.meta_field()) {
            context.lifecycle().set_deadline_field(field.clone());
        }
        let Some(deadline) = context.deadline() else {
            return ResponseFuture::new(inner, req, None, None);
        };
        // The layer's queue of deadlines cancels the request when it passes; a timer of the request's own only
        // where there is no queue (a layer without rules honouring a transport's `RequestedTimeout`).
        match self.config.as_deref() {
            Some(config) => {
                ResponseFuture::watched(inner, req, config.expiry.deadline(deadline), context)
            }
            None => {
                let sleep = tokio::time::sleep_until(deadline);
                ResponseFuture::new(inner, req, Some(sleep), Some(context))
            }
        }
    }
}

#[cfg(test)]
mod tests;
