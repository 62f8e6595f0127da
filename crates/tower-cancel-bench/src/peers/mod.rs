//! The peers compared with, each serving the workload of [`crate::target`] with its own cancellation.

pub mod async_lsp;
#[cfg(test)]
mod lsp_check;
pub mod rmcp;
pub mod rmcp_http;
pub mod tower_lsp;

use crate::target::{Protocol, Target};

/// tower-lsp-server, the maintained fork of tower-lsp.
pub const TOWER_LSP: Target = Target {
    name: "tower-lsp-server 0.23",
    protocol: Protocol::Lsp,
    serve: tower_lsp::serve,
};

/// async-lsp.
pub const ASYNC_LSP: Target = Target {
    name: "async-lsp 0.2",
    protocol: Protocol::Lsp,
    serve: async_lsp::serve,
};

/// rmcp, the official Rust SDK of MCP.
pub const RMCP: Target = Target {
    name: "rmcp 3.11",
    protocol: Protocol::Mcp,
    serve: rmcp::serve,
};
