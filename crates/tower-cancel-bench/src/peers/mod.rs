//! The peers compared with, each serving the workload of [`crate::target`] with its own cancellation.

pub mod async_lsp;
pub mod async_lsp_adapted;
pub mod baseline;
#[cfg(test)]
mod lsp_check;
pub mod rmcp;
pub mod rmcp_adapted;
pub mod rmcp_http;
pub mod tower_lsp;
pub mod tower_lsp_adapted;

use crate::target::{Protocol, Target};

/// tower-lsp-server, the maintained fork of tower-lsp, its concurrency level set to the work's real need.
pub const TOWER_LSP: Target = Target {
    name: "tower-lsp-server 0.23",
    protocol: Protocol::Lsp,
    serve: tower_lsp::serve,
};

/// tower-lsp-server at its default settings (a concurrency level of 4).
pub const TOWER_LSP_DEFAULTS: Target = Target {
    name: "tower-lsp-server 0.23, defaults (limit 4)",
    protocol: Protocol::Lsp,
    serve: tower_lsp::serve_defaults,
};

/// tower-lsp-server's `LspService` behind tower-cancel (`tower-cancel-tower-lsp`): its own `Server` (and its
/// concurrency level) replaced by tower-cancel's driver and stack.
pub const TOWER_LSP_ADAPTED: Target = Target {
    name: "tower-lsp-server 0.23 + tower-cancel",
    protocol: Protocol::Lsp,
    serve: tower_lsp_adapted::serve,
};

/// async-lsp, its concurrency limit set to the work's real need.
pub const ASYNC_LSP: Target = Target {
    name: "async-lsp 0.2",
    protocol: Protocol::Lsp,
    serve: async_lsp::serve,
};

/// async-lsp at its default settings (a concurrency limit of the number of CPUs).
pub const ASYNC_LSP_DEFAULTS: Target = Target {
    name: "async-lsp 0.2, defaults (limit = CPUs)",
    protocol: Protocol::Lsp,
    serve: async_lsp::serve_defaults,
};

/// async-lsp's router behind tower-cancel (`tower-cancel-async-lsp`): its concurrency layer replaced by the stack.
pub const ASYNC_LSP_ADAPTED: Target = Target {
    name: "async-lsp 0.2 + tower-cancel",
    protocol: Protocol::Lsp,
    serve: async_lsp_adapted::serve,
};

/// The hand-written baseline, each request spawned: what a user without this library writes (a map of tokens,
/// `tokio::select!` against each request's token, each request on a task of its own).
pub const BASELINE_SPAWNED: Target = Target {
    name: "hand-written (map of tokens, select!, spawned)",
    protocol: Protocol::Lsp,
    serve: baseline::spawned::serve,
};

/// The hand-written baseline, every request polled inline by the read loop (a `FuturesUnordered`, no spawn).
pub const BASELINE_INLINE: Target = Target {
    name: "hand-written (map of tokens, select!, inline)",
    protocol: Protocol::Lsp,
    serve: baseline::inline::serve,
};

/// rmcp, the official Rust SDK of MCP.
pub const RMCP: Target = Target {
    name: "rmcp 3.11",
    protocol: Protocol::Mcp,
    serve: rmcp::serve,
};

/// rmcp's handler under tower-cancel (`tower-cancel-rmcp`): the stack decides the cancels, rmcp's `ct` obeys.
pub const RMCP_ADAPTED: Target = Target {
    name: "rmcp 3.11 + tower-cancel",
    protocol: Protocol::Mcp,
    serve: rmcp_adapted::serve,
};

/// Each framework under its adapter, with the framework alone: what a user of that framework gains or pays by
/// putting it under the stack. The adapted targets run our stack, so they are no peers to be ahead of: the figures
/// compare each with its framework alone instead.
pub const ADAPTED: &[(Target, Target)] = &[
    (TOWER_LSP_ADAPTED, TOWER_LSP),
    (ASYNC_LSP_ADAPTED, ASYNC_LSP),
    (RMCP_ADAPTED, RMCP),
];

/// Whether `target` is a framework under its adapter (one of [`ADAPTED`]).
pub fn is_adapted(target: &Target) -> bool {
    ADAPTED
        .iter()
        .any(|(adapted, _)| adapted.name == target.name)
}

/// Every peer, to find one by name ([`crate::target::by_name`]).
pub const ALL: &[Target] = &[
    TOWER_LSP,
    TOWER_LSP_DEFAULTS,
    TOWER_LSP_ADAPTED,
    ASYNC_LSP,
    ASYNC_LSP_DEFAULTS,
    ASYNC_LSP_ADAPTED,
    BASELINE_SPAWNED,
    BASELINE_INLINE,
    RMCP,
    RMCP_ADAPTED,
];
