#!/usr/bin/env bash
# Interop tests: drive the example servers with real client SDKs from npm.
# Expects the binaries to be built first: cargo build -p examples --bins
set -euo pipefail
cd "$(dirname "$0")"
npm ci --no-audit --no-fund
# Every *.test.mjs here: the stdio servers (lsp, acp*, mcp*) and the HTTP ones (mcp-http*, jsonrpc-http, rap), the WebSocket one (abp),
# jsonrpsee_server (HTTP and WebSocket), each
# file in a process of its own, each server on a port of its own (127.0.0.1:0).
node --test
# The same suites, unchanged, against the examples written on other frameworks behind the adapters (each binary
# keeps the contract of the one it stands in for: CONTRACT.md).
INTEROP_SERVERS=lsp_server=lsp_server_tower_lsp node --test lsp.test.mjs
INTEROP_SERVERS=lsp_server=lsp_server_async_lsp node --test lsp.test.mjs
INTEROP_SERVERS=mcp_server=mcp_server_rmcp node --test mcp.test.mjs mcp-progress.test.mjs
INTEROP_SERVERS=mcp_http_server=mcp_http_server_rmcp node --test mcp-http.test.mjs mcp-http-2026.test.mjs
INTEROP_SERVERS=acp_agent=acp_agent_sdk node --test acp.test.mjs acp-cascade.test.mjs
