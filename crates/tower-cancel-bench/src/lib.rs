//! The benchmark harness of tower-cancel (see BENCHMARKS.md at the root of the workspace).
//!
//! `bash crates/tower-cancel-bench/run.sh` runs the criterion benches (`benches/overhead.rs`), then the harness
//! (`src/main.rs`), which runs every figure, judges the targets, prints the tables and writes them with the plot
//! under `bench-results/`; `--quick` runs each workload small, to show the harness still works (CI runs that). The
//! harness runs on the plain allocator; the `heap_bytes` binary counts the bytes ([`bytes`]); the `soak` binary is
//! the soak test ([`soak`]); the `cancel_tail` binary prints the whole distribution of one target's cancel latency
//! (figure 3 gives its p50 and p99).

pub mod bytes;
pub mod client;
pub mod connections;
pub mod cpu;
pub mod criterion_results;
pub mod http;
pub mod memory;
pub mod ours;
pub mod overhead;
pub mod peer_side;
pub mod peers;
pub mod plot;
pub mod probe;
pub mod replicas;
pub mod report;
pub mod run;
pub mod scale;
pub mod soak;
pub mod stats;
pub mod storm;
pub mod target;
pub mod targets;
pub mod wakes;
pub mod workload;
