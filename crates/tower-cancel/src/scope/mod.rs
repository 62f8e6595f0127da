//! Scopes and connections: what a cancel can reach, and the link every transport feeds requests through.
//!
//! A [`Scope`] is the unit a cancel can reach: a stream connection, an HTTP session, an authenticated principal.
//! It owns the [`Registry`] of requests in flight and the dialect its peers speak. A [`Connection`] is one link
//! of a scope through which requests arrive and replies leave: it owns the [`Outbox`] to the other side, the
//! [`Peer`](crate::Peer) that sends this side's own requests there, and the dialect's per-conversation
//! [`SessionState`]. A transport is a thin adapter around it:
//!
//! ```text
//! bytes / HTTP / WebSocket ──> transport ──> Connection::receive ──> the layers ──> handler
//!                                            │  a request: prepared (one field, no allocation)
//!                                            │  a reply or a progress report: to the Peer
//!                                            └─ Connection::close / refuse_new: disconnect, shutdown
//! ```
//!
//! # Sharing a scope
//!
//! Most transports give each connection a scope of its own ([`Scope::new`] then [`Scope::connect`]). Several
//! connections may share one (a principal's scope, an HTTP session's), and then:
//!
//! - ids are per connection: the same id in flight on two connections is two requests, and only a second one on
//!   the same connection is a duplicate (-32600);
//! - a peer's cancel message reaches the request of that id on its own connection ([`Connection::cancel`]),
//!   except on an [exchange](Scope::connect_exchange) (an HTTP request of a session), whose cancels reach the whole scope;
//!   [`Scope::cancel`] reaches every request of that id in the scope (a cancel for the whole scope, such as one
//!   an HTTP principal posts separately, or another replica's);
//! - closing or shutting down a connection ([`Connection::close`], [`Connection::refuse_new`]) touches only that
//!   connection's requests; [`Scope::close`] and [`Scope::refuse_new`] touch the whole scope;
//! - a cancel remembered for a connection (its request not yet arrived) applies to that connection's request
//!   only; one remembered for the scope applies to the next request of that id on any connection. A cancel for the
//!   whole scope that comes after its request completed is remembered the same way, so where the connections of a
//!   scope reuse ids, send whole-scope cancels only for ids that are unique in the scope (an MCP session's, a
//!   principal's own numbering);
//! - the window of remembered cancels is the scope's: one connection that floods it with cancels for ids it never
//!   sends pushes the others' remembered cancels out (the window stays bounded either way).
//!
//! # Example
//!
//! ```
//! use serde_json::json;
//! use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
//! use tower_cancel::{dialect::Lsp, scope::Scope, CancelStack, Incoming, Message, Outbox, Request};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let scope = Scope::with_dialect(Lsp);
//! let (outbox, _to_the_wire) = Outbox::new();
//! let connection = scope.connect(outbox);
//! let mut service = ServiceBuilder::new()
//!     .layer(CancelStack::lsp())
//!     .service(service_fn(|_req: Request| async {
//!         std::future::pending::<Result<serde_json::Value, tower_cancel::BoxError>>().await
//!     }));
//!
//! // What a transport does with each message it reads.
//! let message = Message::from_slice(br#"{"jsonrpc":"2.0","id":7,"method":"slow"}"#).unwrap();
//! let Incoming::Request(request) = connection.receive(message) else { unreachable!() };
//! let reply = tokio::spawn(service.ready().await.unwrap().call(request));
//! tokio::task::yield_now().await;
//! assert_eq!(connection.in_flight(), 1);
//!
//! // The peer hangs up: what the connection had in flight is cancelled and answered.
//! connection.close(tower_cancel::CancelReason::Disconnect);
//! let reply = reply.await.unwrap().unwrap().unwrap();
//! assert_eq!(reply.outcome.unwrap_err().code, -32800);
//! assert!(scope.registry().is_empty());
//! # }
//! ```

mod connection;

use std::{fmt, sync::Arc};

pub use self::connection::Connection;
pub use crate::session::SessionState;
use crate::{
    dialect::Dialect,
    message::Id,
    outbox::Outbox,
    outcome::{CancelAck, CancelOutcome},
    peer::Exchanges,
    reason::CancelReason,
    registry::{Registry, DEFAULT_FINISHED_BYTES, DEFAULT_FINISHED_CAPACITY, WHOLE_SCOPE},
};
pub(crate) use connection::{Cancels, Registration};

/// Where a scope sends its whole-scope cancels that find nothing in flight here: the other replicas of a cancel
/// bus (see [`bus`](crate::bus), whose attachment of a scope implements it). Declared here, so that the scope
/// needs nothing of the bus.
pub(crate) trait Publish: Send + Sync + fmt::Debug {
    /// Hand the cancel of `id` for `reason` to the other replicas.
    fn publish(&self, id: &Id, reason: &CancelReason);
}

/// What a cancel can reach: a registry of requests in flight, and the dialect its connections' peers speak.
/// Cloning gives another handle to the same scope.
#[derive(Clone, Default)]
pub struct Scope {
    registry: Registry,
    dialect: Option<Arc<dyn Dialect>>,
    // Set when the scope is attached to a replica of a cancel bus: its cancels that miss go to the other replicas.
    remote: Option<Arc<dyn Publish>>,
    // The calls of the peers of its exchanges: numbered together, answered on any exchange. Only a scope with a
    // dialect has peers.
    exchanges: Option<Arc<Exchanges>>,
}

impl Scope {
    /// A scope without a dialect: its connections have no [`Peer`](crate::Peer), replies from the other side
    /// are handed back to the transport ([`Incoming::Response`](crate::Incoming::Response)), and the layers read
    /// its requests in the stack's own dialect.
    pub fn new() -> Self {
        Self::default()
    }

    /// A scope that speaks `dialect`: the one owner of it. Its connections each have a [`Peer`](crate::Peer)
    /// speaking it, and every layer reads the scope's requests in it, whatever dialect the stack was built with
    /// (a stack's own stands in only for a scope that speaks none). [`CancelStack::scope`](crate::CancelStack::scope)
    /// makes one with the stack's. If the dialect acknowledges cancels ([`Dialect::acknowledges_cancels`]), the registry remembers how its last
    /// requests ended ([`Registry::remember_finished`], with the defaults); if it does not remember early cancels
    /// ([`Dialect::remembers_early_cancels`]: ABP), the registry keeps none ([`Registry::without_early_cancels`]).
    pub fn with_dialect<D: Dialect>(dialect: D) -> Self {
        let mut registry = if dialect.remembers_early_cancels() {
            Registry::new()
        } else {
            Registry::without_early_cancels()
        };
        if dialect.acknowledges_cancels() {
            registry =
                registry.remember_finished(DEFAULT_FINISHED_CAPACITY, DEFAULT_FINISHED_BYTES);
        }
        Self {
            registry,
            dialect: Some(Arc::new(dialect)),
            remote: None,
            exchanges: Some(Arc::default()),
        }
    }

    /// This scope with `registry` as its table (for registry limits of your own, or to watch it from outside).
    pub fn with_registry(mut self, registry: Registry) -> Self {
        self.registry = registry;
        self
    }

    /// The scope's registry.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// A new connection of this scope, sending through `outbox`. Its ids are its own: the peer's cancels sent on
    /// it reach its requests only.
    pub fn connect(&self, outbox: Outbox) -> Connection {
        Connection::new(self.clone(), outbox, Cancels::Own)
    }

    /// A new exchange of this scope, sending through `outbox`: one HTTP request of a session or a principal,
    /// whose ids are the scope's. Its peer's calls are numbered with those of the scope's other exchanges, and a
    /// reply to one arriving on any exchange of the scope reaches it (the client of an MCP session answers, on a
    /// later POST, a request that a handler sent on the stream of the POST it serves). A peer's cancel that arrives on it reaches the request of that id anywhere in
    /// the scope (usually on another exchange: the client POSTs its cancel separately), or is remembered for the
    /// scope when that request has not arrived yet. Closing it touches its own requests only, as for a
    /// connection: a client that hangs up on one HTTP request cancels what that request carried.
    pub fn connect_exchange(&self, outbox: Outbox) -> Connection {
        Connection::new(self.clone(), outbox, Cancels::Scope)
    }

    /// Cancel every request `id` in flight in the scope, on any connection, or remember the cancel for the
    /// scope (see [Sharing a scope](self#sharing-a-scope)).
    ///
    /// In a scope attached to a replica ([`Replica::scope`](crate::bus::Replica::scope)), a cancel that finds
    /// nothing in flight here is also published to the other replicas.
    pub fn cancel(&self, id: &Id, reason: CancelReason) -> CancelOutcome {
        self.cancel_in(WHOLE_SCOPE, id, reason)
    }

    /// Cancel the requests in flight in group `key` (an ACP session's turn) of every connection of the scope.
    /// Returns how many this call cancelled; see [`Registry::cancel_group`]. Not published to other replicas.
    pub fn cancel_group(&self, key: &Id, reason: CancelReason) -> usize {
        self.registry.cancel_group(key, reason)
    }

    /// Cancel the request `id` of connection `conn` (of any, for [`WHOLE_SCOPE`]); a whole-scope cancel that
    /// finds nothing in flight is published when the scope is attached to a replica. A connection's own ids never
    /// are: no other replica can hold them.
    pub(crate) fn cancel_in(&self, conn: u64, id: &Id, reason: CancelReason) -> CancelOutcome {
        let Some(remote) = self.remote.as_ref().filter(|_| conn == WHOLE_SCOPE) else {
            return self.registry.cancel_in(conn, id, reason);
        };
        let outcome = self.registry.cancel_in(conn, id, reason.clone());
        if matches!(outcome, CancelOutcome::Remembered | CancelOutcome::NotFound) {
            remote.publish(id, &reason);
        }
        outcome
    }

    pub(crate) fn attach(&mut self, remote: Arc<dyn Publish>) {
        self.remote = Some(remote);
    }

    /// Cancel every request `id` in flight in the scope and say what the cancel did (see [`CancelAck`]).
    pub fn acknowledge_cancel(&self, id: &Id, reason: CancelReason) -> CancelAck {
        self.registry.acknowledge(id, reason)
    }

    /// Cancel everything in flight in the scope with `reason`. Returns how many requests this cancelled.
    pub fn close(&self, reason: CancelReason) -> usize {
        self.registry.cancel_all(reason)
    }

    /// Stop taking work in the whole scope: requests registered from now on start out cancelled with `reason`.
    pub fn refuse_new(&self, reason: CancelReason) {
        self.registry.refuse_new(reason);
    }

    pub(crate) fn dialect(&self) -> Option<&Arc<dyn Dialect>> {
        self.dialect.as_ref()
    }

    pub(crate) fn exchanges(&self) -> Option<&Arc<Exchanges>> {
        self.exchanges.as_ref()
    }
}

impl fmt::Debug for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scope")
            .field("dialect", &self.dialect.as_ref().map(|d| d.name()))
            .field("registry", &self.registry)
            .field("remote", &self.remote)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dialect::{Abp, Acp, AcpDraft, Lsp, Mcp};

    #[test]
    fn a_scope_keeps_early_cancels_unless_its_dialect_delivers_cancels_in_order() {
        for (name, scope) in [
            ("lsp", Scope::with_dialect(Lsp)),
            ("acp", Scope::with_dialect(Acp)),
            ("acp draft", Scope::with_dialect(AcpDraft::default())),
            ("mcp", Scope::with_dialect(Mcp)),
            ("no dialect", Scope::new()),
        ] {
            assert!(scope.registry().remembers_early_cancels(), "{name}");
        }
        let abp = Scope::with_dialect(Abp);
        assert!(!abp.registry().remembers_early_cancels());
        assert!(abp.registry().remembers_finished(), "ABP answers cancels");
    }
}
