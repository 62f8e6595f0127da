#!/usr/bin/env bash
# Interop tests: drive the example servers with real client SDKs from npm.
# Expects the binaries to be built first: cargo build -p examples --bins
set -euo pipefail
cd "$(dirname "$0")"
npm ci --no-audit --no-fund
node --test
