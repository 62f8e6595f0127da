//! Cancels across replicas: a request running on one replica, its cancel landing on another.
//!
//! When a server runs as several replicas behind a load balancer, the POST that carries a cancel (an MCP
//! session's `notifications/cancelled`, a RAP `/cancel_tool_call`, a principal's `$/cancelRequest`) may reach a
//! replica that is not running the request. This module is the seam that carries such a cancel to the others; the
//! transport is a [`CancelBus`] (in process: [`LocalBus`]; over Redis: the `tower-cancel-redis` crate).
//!
//! ```text
//! replica B                                          replica A
//! Scope "session:S" ── cancel(7) ──> registry: not here        Replica::apply ──> Scope "session:S" of A
//!                        └─ Remembered ──> CancelBus::publish ──> ... ──────┘      └─ registry.cancel(7): the
//!                                                                                    same lifecycle, same reply
//! ```
//!
//! - A scope takes part through [`Replica::scope`], under a key that names it the same way on every replica
//!   (`"session:<id>"`, `"principal:<name>"`). Scopes never cross: a cancel published for one key reaches that
//!   key's scope on each replica and nothing else.
//! - Only a cancel that *misses* locally is published ([`Scope::cancel`](crate::Scope::cancel), or a peer's cancel
//!   on an [exchange](crate::Scope::connect_exchange), that finds no request in flight): a request that is never
//!   cancelled costs nothing, nor does one cancelled where it runs. A cancel that arrives from the bus is applied
//!   as a local one (the same lifecycle, so the same reply rules; its reason kept) and never published again.
//! - A remote cancel for an id not in flight is remembered in the scope's early-cancel window, as a local one is,
//!   so a cancel that overtakes its request across replicas still works. One for a key with no scope on this
//!   replica yet is kept in a window of the replica's ([`PENDING_CAPACITY`], [`PENDING_BYTES`] overall, and
//!   [`PENDING_PER_SCOPE`] per key) and handed to the scope when one is made under that key.
//! - Publishing never blocks a request: a bus queues (boundedly) and counts what it drops.
//!
//! # Example
//!
//! ```
//! use tower_cancel::{bus::LocalBus, CancelReason, Id, Scope};
//!
//! let bus = LocalBus::new();
//! let (a, b) = (bus.replica("a"), bus.replica("b"));
//! let on_a = a.scope("session:S", Scope::new());
//! let on_b = b.scope("session:S", Scope::new());
//!
//! // The cancel lands on B, where nothing of that id runs: B publishes it, A remembers it for its scope.
//! on_b.cancel(&Id::Number(7), CancelReason::peer(Some("user stopped it".into())));
//! assert_eq!(a.stats().applied, 1);
//! assert_eq!(on_a.registry().stats().early_cancels, 1);
//! ```

mod local;
mod pending;
mod remote;
mod replica;

pub use self::{
    local::LocalBus,
    pending::{PENDING_BYTES, PENDING_CAPACITY, PENDING_PER_SCOPE},
    remote::RemoteCancel,
    replica::{Applied, Replica, ReplicaStats},
};

/// Carries cancels that missed locally to the other replicas, and theirs to this one.
///
/// [`publish`](Self::publish) is called on the request path (by the scope whose cancel missed): it must not block
/// or fail the caller. A transport queues the cancel (boundedly), sends it in the background, and counts what it
/// could not send. What arrives from other replicas goes to [`Replica::apply`] of each local replica.
pub trait CancelBus: Send + Sync + 'static {
    /// Hand `cancel` to the other replicas.
    fn publish(&self, cancel: RemoteCancel);
}
