#!/usr/bin/env bash
# Every benchmark of BENCHMARKS.md in one command (about 30 minutes on 2 cores, builds included):
#   bash crates/tower-cancel-bench/run.sh             # criterion micro benches, then the harness (figures 1 to 6 and 8
#                                                     # to 12, the targets, the plots) into bench-results/
#   bash crates/tower-cancel-bench/run.sh --only 3    # one figure of the harness alone (no criterion)
#   bash crates/tower-cancel-bench/run.sh --only 10,12 # a list of figures, in one process (no criterion)
#   bash crates/tower-cancel-bench/run.sh --quick     # each workload small, debug build: proves it all still works
# The harness runs the `heap_bytes` binary for every bytes figure (it counts allocations, the harness does not), so
# both are built before it runs.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [[ "${1:-}" == "--quick" ]]; then
  # Run as a test, criterion calls each bench once (debug build, no measurement).
  cargo test -p tower-cancel-bench --bench overhead
  cargo build -p tower-cancel-bench --bins
  cargo run -p tower-cancel-bench -- --quick
  # The distribution of one target's cancel latency (BENCHMARKS.md, the notes on cancel latency), a few cancels.
  cargo run -p tower-cancel-bench --bin cancel_tail -- "tower-cancel (LSP)" 1 50 1
else
  if [[ " $* " != *" --only "* ]]; then
    cargo bench -p tower-cancel-bench --bench overhead -- --noplot
  fi
  cargo build --release -p tower-cancel-bench --bins
  cargo run --release -p tower-cancel-bench -- "$@"
fi
