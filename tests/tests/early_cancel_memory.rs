//! A hostile peer's cancels for ids that do not exist cannot pin unbounded memory: the early-cancel window is
//! bounded in bytes as well as entries (each id kept once, reasons cut to `MAX_REASON_BYTES`).
//!
//! The live heap is counted exactly by this test binary's global allocator, so it holds one test only: nothing
//! else allocates meanwhile.

use stats_alloc::{StatsAlloc, INSTRUMENTED_SYSTEM};
use tests::{Conn, Probe};
use tower_cancel::registry::DEFAULT_EARLY_CANCEL_BYTES;

#[global_allocator]
static ALLOCATOR: &StatsAlloc<std::alloc::System> = &INSTRUMENTED_SYSTEM;

fn live_heap() -> i64 {
    let stats = ALLOCATOR.stats();
    stats.bytes_allocated as i64 - stats.bytes_deallocated as i64
}

const MIB: i64 = 1024 * 1024;

#[tokio::test(start_paused = true)]
async fn cancels_for_unknown_ids_cannot_pin_unbounded_memory() {
    let probe = Probe::new();
    let mut conn = Conn::mcp(&probe);
    conn.send(r#"{"jsonrpc":"2.0","id":0,"method":"echo"}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":0,"result":null}"#)
        .await;
    let before = live_heap();

    // 64 cancels for ids no request has, each id and reason 512 KiB (frames of 1 MiB, far below the 16 MiB limit):
    // each alone is larger than the window's budget, so none is kept. Then 256 with ids of 8 KiB: kept, the oldest
    // forgotten, within the budget.
    let cancel = |id: String, reason: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":"{id}","reason":"{reason}"}}}}"#
        )
    };
    let (big, huge_reason) = ("i".repeat(512 * 1024), "r".repeat(512 * 1024));
    for n in 0..64 {
        conn.send(&cancel(format!("{n}{big}"), &huge_reason)).await;
    }
    let medium = "m".repeat(8 * 1024);
    for n in 0..256 {
        conn.send(&cancel(format!("{n}{medium}"), &huge_reason))
            .await;
    }
    // A round trip: every cancel above has been read and handled.
    conn.send(r#"{"jsonrpc":"2.0","id":1,"method":"echo"}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":1,"result":null}"#)
        .await;
    drop((big, huge_reason, medium));

    let grown = live_heap() - before;
    let stats = conn.registry().stats();
    println!(
        "remembered {} early cancels in {} bytes ({} dropped); live heap grew by {grown} bytes",
        stats.remembered, stats.remembered_bytes, stats.early_dropped
    );
    // What grows besides the window is the connection's read buffer, sized for the largest frame seen (1 MiB).
    assert!(
        grown < 4 * MIB,
        "cancels for unknown ids pinned {} MiB",
        grown / MIB
    );
    assert!(
        stats.remembered > 0,
        "cancels within the budget are remembered"
    );
    assert!(stats.remembered_bytes <= DEFAULT_EARLY_CANCEL_BYTES);
    conn.finish_quiet().await;
}
