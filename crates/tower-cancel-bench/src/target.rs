//! A server under test: something that serves the benchmark workload over one connection.
//!
//! # The workload every target serves
//!
//! LSP targets (`Content-Length` framing):
//! - `initialize` (id 0) answers with any result, then the `initialized` notification arrives.
//! - `bench/work` with params `{"ms": u64, "tag": u64, "yields": bool}`: holds a [`Work`](crate::probe::Work) guard
//!   for `tag`, awaits once if `yields` (a handler that is not ready on its first poll), sleeps `ms` milliseconds
//!   (none for 0), then answers `"done"`. Other params (the 4 KiB `pad` of some workloads) are ignored.
//! - `$/cancelRequest` `{"id": n}` cancels request `n` the way the target does it (each peer's own mechanism).
//! - `bench/spin` with params `{"us": u64}` (tower-cancel's own targets only, for figure 6): computes for `us`
//!   microseconds without awaiting, then answers `"done"`.
//!
//! MCP targets (newline-delimited JSON):
//! - `initialize` (id 0) then `notifications/initialized`.
//! - `tools/call` with params `{"name": "work", "arguments": {"ms": u64, "tag": u64}}`: as `bench/work`, answering a
//!   `CallToolResult` with one text item.
//! - `notifications/cancelled` `{"requestId": n}` cancels request `n`; MCP sends no reply for it.

use std::{future::Future, pin::Pin};

use tokio::io::{AsyncRead, AsyncWrite};

/// The read half of a connection, as a target receives it.
pub type BoxRead = Pin<Box<dyn AsyncRead + Send>>;
/// The write half of a connection, as a target receives it.
pub type BoxWrite = Pin<Box<dyn AsyncWrite + Send>>;
/// A target serving one connection until the client closes it.
pub type ServeFuture = Pin<Box<dyn Future<Output = ()> + Send>>;
/// Serves one connection. The `usize` is the most requests the workload will ever have in flight at once on it: a
/// peer configured for the work's real need sets its concurrency limit to that (ours, which has no such limit, and
/// the peers at their default settings ignore it).
pub type Serve = fn(BoxRead, BoxWrite, usize) -> ServeFuture;

/// Which workload a target serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// `bench/work` with `$/cancelRequest`, `Content-Length` framing.
    Lsp,
    /// `tools/call` with `notifications/cancelled`, newline-delimited JSON.
    Mcp,
}

/// A server under test.
#[derive(Clone, Copy, Debug)]
pub struct Target {
    /// The name in the tables and the plot.
    pub name: &'static str,
    /// The workload it serves.
    pub protocol: Protocol,
    /// Serves one connection.
    pub serve: Serve,
}

/// Every target of the harness, ours and the peers', to find one by its name (the bytes binary is told targets by
/// name).
pub fn by_name(name: &str) -> Option<Target> {
    crate::ours::ALL
        .iter()
        .chain(crate::peers::ALL)
        .find(|target| target.name == name)
        .copied()
}
