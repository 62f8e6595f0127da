#!/usr/bin/env bash
# Interop tests: drive the example servers with real client SDKs from npm.
# Expects the binaries to be built first: cargo build -p examples --bins
set -euo pipefail
cd "$(dirname "$0")"
npm ci --no-audit --no-fund
# Every *.test.mjs here: the stdio servers (lsp, acp*, mcp*) and the HTTP ones (mcp-http*, jsonrpc-http, rap), the WebSocket one (abp), each
# file in a process of its own, each server on a port of its own (127.0.0.1:0).
node --test
