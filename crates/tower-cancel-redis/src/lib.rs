//! Cancels across replicas for tower-cancel, over a Redis Stream.
//!
//! When a server runs as several replicas, a cancel may land on one that is not running the request (an MCP
//! session's `notifications/cancelled` POSTed without affinity, a RAP `/cancel_tool_call` sent to a base URL, a
//! principal's `$/cancelRequest`). [`tower_cancel::bus`] is the seam: a scope attached to a replica publishes the
//! cancels that miss locally, and each replica applies the others' to its own scope of the same key. This crate is
//! its transport: [`RedisBus`].
//!
//! # Why a stream, not pub/sub
//!
//! Pub/sub forgets what is published while a subscriber reconnects, and a plain subscriber can stay deaf after a
//! long outage until it sends a command. A stream (`XADD` with `MAXLEN ~`, every replica `XREAD`ing from the last
//! entry it saw, on a connection of its own) loses nothing across a reconnect, at about the same latency; each
//! read blocks for a bounded time, so the reader also finds out when its connection died without a word.
//!
//! # What Redis being away does
//!
//! Nothing blocks: local cancels work as before, cancels to publish wait in a bounded queue ([`Config::queue`]) and
//! are written once Redis is back (what overflows it is counted in [`BusStats::dropped`] and logged), and both
//! tasks reconnect with a growing backoff. A Redis that restarts empty starts a new stream: the readers carry on
//! from their last id, which the new entries (ids are times in milliseconds) come after.
//!
//! This crate asks for a newer Rust than the rest of the workspace (the `redis` crate's): it is its own crate so that
//! the core keeps its own.

mod bus;
mod config;
mod entry;
#[cfg(feature = "test-support")]
pub mod testing;

pub use self::{
    bus::{BusStats, RedisBus},
    config::{Config, DEFAULT_MAX_LEN, DEFAULT_QUEUE, DEFAULT_STREAM},
};
