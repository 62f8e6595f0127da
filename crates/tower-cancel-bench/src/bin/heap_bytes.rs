//! Heap bytes per request held, counted by this binary's allocator: the harness runs it for each bytes figure, so
//! that its own figures (throughput, latency) run on an allocator that does not count (see `bytes.rs`).
//!
//! ```text
//! heap_bytes connection NAME duplex|unix COUNT   # COUNT requests held over a connection to the target NAME
//! heap_bytes in-process bare|stack COUNT         # COUNT requests held in process
//! heap_bytes idle NAME COUNT                     # COUNT idle connections to the target NAME (per connection)
//! heap_bytes pending-calls COUNT [no-timeout]    # COUNT outgoing calls of our Peer awaiting replies (per call)
//! ```
//!
//! It prints the bytes per request held (per connection, per call), and nothing else.

use std::process::ExitCode;

use tower_cancel_bench::{bytes, memory};

#[global_allocator]
static GLOBAL: &stats_alloc::StatsAlloc<std::alloc::System> = memory::ALLOCATOR;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match bytes::run_measurement(&args) {
        Ok(bytes) => {
            println!("{bytes:.1}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("heap_bytes: {error}");
            ExitCode::FAILURE
        }
    }
}
