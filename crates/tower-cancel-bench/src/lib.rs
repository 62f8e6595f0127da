//! The benchmark harness of tower-cancel (see BENCHMARKS.md at the root of the workspace).
//!
//! `cargo run --release -p tower-cancel-bench` runs every figure, prints the tables and writes them with the plot
//! under `bench-results/`; `--quick` runs each workload small, to show the harness still works (CI runs that).
//! The criterion benches (`cargo bench -p tower-cancel-bench`) give the in-process overhead in detail.

pub mod client;
pub mod cpu;
pub mod http;
pub mod memory;
pub mod ours;
pub mod overhead;
pub mod peers;
pub mod plot;
pub mod probe;
pub mod report;
pub mod scale;
pub mod soak;
pub mod target;
pub mod workload;
