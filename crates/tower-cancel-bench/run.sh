#!/usr/bin/env bash
# Every benchmark of BENCHMARKS.md in one command (under 10 minutes on 2 cores, builds included once cached):
#   bash crates/tower-cancel-bench/run.sh           # criterion micro benches, then the harness (figures 1 to 6 and 8, plot)
#   bash crates/tower-cancel-bench/run.sh --quick   # each workload small, debug build: proves it all still works
set -euo pipefail
cd "$(dirname "$0")/../.."
if [[ "${1:-}" == "--quick" ]]; then
  # Run as a test, criterion calls each bench once (debug build, no measurement).
  cargo test -p tower-cancel-bench --bench overhead
  cargo run -p tower-cancel-bench -- --quick
else
  cargo bench -p tower-cancel-bench --bench overhead -- --noplot
  cargo run --release -p tower-cancel-bench -- "$@"
fi
