//! [`CancelRpcLayer`]: the configuration, and the handle on what it serves (its calls in flight, its shutdown).

use std::{future::Future, sync::Arc, time::Duration};

use jsonrpsee::server::middleware::rpc::{MethodResponse, RpcServiceT};
use tower_cancel::{
    bus::Replica, cancel::Cancel, dialect::Lsp, timeout::Timeout, CancelLayer, Mode, Outbox, Scope,
    TimeoutLayer,
};
use tower_cancel_http::front::{Front, FrontStats, OnHangUp, ScopesByPrincipal, TooManyPrincipals};
use tower_layer::Layer;

use crate::{
    bridge::Bridge,
    service::{CancelRpc, Opened},
};

/// The stack every call goes through: tower-cancel's cancel layer (LSP's cancel message and -32800), over its
/// timeout layer, over the jsonrpsee service below.
pub(crate) type Stack = Cancel<Timeout<Bridge>, Lsp>;

/// The largest batch reply, by default: jsonrpsee's own default `max_response_body_size` (10 MiB).
pub const DEFAULT_MAX_BATCH_REPLY_BYTES: usize = 10 * 1024 * 1024;

/// A jsonrpsee RPC middleware that makes every call cancellable: mount it with
/// `RpcServiceBuilder::new().layer(layer)` in `Server::builder().set_rpc_middleware(..)` (or a
/// `to_service_builder()`). See the [crate docs](crate).
///
/// Clones share what they serve: [`in_flight`](Self::in_flight), [`stats`](Self::stats) and
/// [`shutdown`](Self::shutdown) see every connection of every clone. Configure it before mounting it.
#[derive(Clone, Debug)]
pub struct CancelRpcLayer {
    config: Arc<Config>,
}

/// What every connection's middleware shares.
#[derive(Clone, Debug)]
pub(crate) struct Config {
    pub(crate) front: Front,
    cancel: CancelLayer<Lsp>,
    timeouts: TimeoutLayer,
    pub(crate) stack: Stack,
    pub(crate) cancel_messages: bool,
    pub(crate) max_batch_reply_bytes: usize,
    principals: Option<Arc<ScopesByPrincipal>>,
}

impl Config {
    /// The link of a connection (a WebSocket, or one HTTP request), in the front's table (a shutdown reaches it),
    /// whose drop cancels what it still runs: an exchange of the scope of the principal its HTTP request's
    /// `extensions` name, or of a scope of its own.
    pub(crate) fn open(&self, extensions: &http::Extensions) -> Result<Opened, TooManyPrincipals> {
        let principal = match self.principals.as_ref().and_then(|p| p.lease(extensions)) {
            Some(leased) => Some(leased?),
            None => None,
        };
        let connection = match &principal {
            Some(principal) => principal.scope().connect_exchange(Outbox::closed()),
            None => Scope::new().connect_exchange(Outbox::closed()),
        };
        Ok(Opened::new(
            self.front.link(connection, OnHangUp::Cancel),
            principal,
        ))
    }
}

impl CancelRpcLayer {
    /// Every call cancellable: by its WebSocket closing, its HTTP client hanging up, or a shutdown; no timeout, no
    /// cancel message (turn them on with [`timeout`](Self::timeout) and [`cancel_messages`](Self::cancel_messages)).
    pub fn new() -> Self {
        let cancel = CancelLayer::new(Lsp);
        let timeouts = TimeoutLayer::none();
        Self {
            config: Arc::new(Config {
                front: Front::new(),
                stack: build(&cancel, &timeouts),
                cancel,
                timeouts,
                cancel_messages: false,
                max_batch_reply_bytes: DEFAULT_MAX_BATCH_REPLY_BYTES,
                principals: None,
            }),
        }
    }

    /// Take the client's `$/cancelRequest {"id": ..}` notifications (the LSP shape), off by default: one sent on a
    /// WebSocket stops the call of that id on the same WebSocket, which is answered -32800 `Request cancelled`; one
    /// that comes before its call is remembered (a bounded window), and the call is answered so without running.
    /// The notification never reaches jsonrpsee. Off, it goes to jsonrpsee as any notification does.
    pub fn cancel_messages(self, take: bool) -> Self {
        self.configure(|config| config.cancel_messages = take)
    }

    /// A server-side timeout for every call: one running past it is stopped and answered -32800.
    pub fn timeout(self, timeout: Duration) -> Self {
        self.timeouts(TimeoutLayer::new(timeout))
    }

    /// Server-side timeouts, per method if you like ([`TimeoutLayer::method`]).
    pub fn timeouts(self, timeouts: TimeoutLayer) -> Self {
        self.configure(|config| config.timeouts = timeouts)
    }

    /// How a cancelled handler is stopped: its future dropped at once ([`Mode::Abort`], the default), or its
    /// [`RequestContext`](tower_cancel::RequestContext)'s token fired and a grace to answer in
    /// ([`Mode::Cooperative`]).
    pub fn mode(self, mode: Mode) -> Self {
        self.configure(|config| config.cancel = config.cancel.clone().mode(mode))
    }

    /// The largest batch reply ([`DEFAULT_MAX_BATCH_REPLY_BYTES`], jsonrpsee's own default): past it the batch is
    /// answered with jsonrpsee's -32011 error, as jsonrpsee answers it.
    pub fn max_batch_reply_bytes(self, bytes: usize) -> Self {
        self.configure(|config| config.max_batch_reply_bytes = bytes)
    }

    /// The most calls running at once over every connection ([`DEFAULT_MAX_IN_FLIGHT`](tower_cancel_http::front::DEFAULT_MAX_IN_FLIGHT),
    /// 10 000, by default). A call past it is answered jsonrpsee's -32009 `Server is busy, try again later` and
    /// never runs; a cancel message is never refused. jsonrpsee itself bounds connections, not calls: a WebSocket
    /// client may send calls without end, each on a task of its own.
    pub fn max_in_flight(self, calls: usize) -> Self {
        self.configure(|config| config.front = Front::with_max_in_flight(calls))
    }

    /// Scope cancels by principal: the connections whose HTTP request (a WebSocket's upgrade, a POST) carries the
    /// same `P` in its extensions (put there by an HTTP middleware: `set_http_middleware`) share a scope, so that
    /// a `$/cancelRequest` one of them sends reaches the principal's call of that id on any of them (a cancel
    /// POSTed over HTTP included), and never another principal's. A connection without a `P` is a scope of its
    /// own.
    ///
    /// A principal's scope is kept for a minute after its last call, so that a cancel sent a little before its
    /// call finds it. Each principal runs at most
    /// [`DEFAULT_MAX_IN_FLIGHT_PER_SCOPE`](tower_cancel_http::front::DEFAULT_MAX_IN_FLIGHT_PER_SCOPE) calls at
    /// once, and at most 100 000 principals' scopes are kept; a call past either is answered -32009.
    pub fn scope_by_principal<P>(self) -> Self
    where
        P: Clone + Eq + std::hash::Hash + Send + Sync + 'static,
    {
        self.configure(|config| config.principals = Some(Arc::new(ScopesByPrincipal::new::<P>())))
    }

    /// [`scope_by_principal`](Self::scope_by_principal) as one replica of several sharing `replica`'s bus (over
    /// Redis: `tower-cancel-redis`): each principal's scope is attached under the key
    /// `jsonrpc:principal:<principal>` (its `Display`, the key of tower-cancel-http's `JsonRpc` too), so that a
    /// cancel the principal sends to this replica for a call running on another reaches it there.
    pub fn scope_by_principal_on<P>(self, replica: Replica) -> Self
    where
        P: Clone + Eq + std::hash::Hash + std::fmt::Display + Send + Sync + 'static,
    {
        self.configure(|config| {
            config.principals = Some(Arc::new(ScopesByPrincipal::on::<P>(replica)))
        })
    }

    /// How many calls run now, over every connection. Zero means no call holds a registry entry.
    pub fn in_flight(&self) -> usize {
        self.config.front.in_flight()
    }

    /// The counters: calls in flight, calls and notifications taken, calls refused busy, connections open (a
    /// WebSocket, an HTTP request being answered).
    pub fn stats(&self) -> FrontStats {
        self.config.front.stats()
    }

    /// Shut down: every call in flight is cancelled (reason `Shutdown`) and answered -32800, and so is every call
    /// that comes after, without running. Returns how many calls this cancelled. Stop jsonrpsee's server after
    /// (`ServerHandle::stop`): it waits for its calls, which now end at once.
    pub fn shutdown(&self) -> usize {
        self.config.front.shutdown()
    }

    /// Resolves once no call runs and no connection is open.
    pub fn drained(&self) -> impl Future<Output = ()> + Send + 'static {
        self.config.front.drained()
    }

    /// The skeleton's handle (tower-cancel-http's [`Front`]) these calls are counted in.
    pub fn front(&self) -> Front {
        self.config.front.clone()
    }

    fn configure(mut self, change: impl FnOnce(&mut Config)) -> Self {
        let config = Arc::make_mut(&mut self.config);
        change(config);
        config.stack = build(&config.cancel, &config.timeouts);
        self
    }
}

impl Default for CancelRpcLayer {
    fn default() -> Self {
        Self::new()
    }
}

fn build(cancel: &CancelLayer<Lsp>, timeouts: &TimeoutLayer) -> Stack {
    cancel.layer(timeouts.layer(Bridge))
}

impl<S> Layer<S> for CancelRpcLayer
where
    S: RpcServiceT<
            MethodResponse = MethodResponse,
            NotificationResponse = MethodResponse,
            BatchResponse = MethodResponse,
        > + Send
        + Sync
        + 'static,
{
    type Service = CancelRpc<S>;

    fn layer(&self, inner: S) -> CancelRpc<S> {
        CancelRpc::new(inner, self.config.clone())
    }
}
