//! Heap bytes in use, counted by the allocator of the binaries that install it (`heap_bytes` and `soak`; the
//! harness itself does not: see [`crate::bytes`]).

use stats_alloc::{StatsAlloc, INSTRUMENTED_SYSTEM};

/// The allocator a binary installs (`#[global_allocator]`) so that [`in_use`] counts.
pub static ALLOCATOR: &StatsAlloc<std::alloc::System> = &INSTRUMENTED_SYSTEM;

/// Heap bytes allocated and not yet freed, by the whole process (0 if the counting allocator is not installed).
///
/// stats_alloc already counts a realloc's growth in `bytes_allocated` and its shrinking in `bytes_deallocated`;
/// its `bytes_reallocated` is the same growth again, so it is not added (adding it counts every buffer grown by
/// realloc twice, and the second count is never given back when the buffer is freed).
pub fn in_use() -> i64 {
    let stats = ALLOCATOR.stats();
    stats.bytes_allocated as i64 - stats.bytes_deallocated as i64
}
