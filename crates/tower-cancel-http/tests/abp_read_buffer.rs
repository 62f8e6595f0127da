//! Issue 25's row "1000 sockets each sending one 1 MiB message: ~1 MiB kept per socket after the message": the
//! heap a session keeps after a large message, counted exactly by a counting allocator (a binary of its own, so
//! that no other test's allocations are counted).

#[allow(dead_code)]
#[path = "support/abp.rs"]
mod support;

#[allow(dead_code)]
#[path = "support/raw_ws.rs"]
mod raw_ws;

use std::{alloc::System, time::Duration};

use stats_alloc::{StatsAlloc, INSTRUMENTED_SYSTEM};

use serde_json::json;
use support::{initialize_payload, serve};

#[global_allocator]
static ALLOCATOR: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

fn live_heap() -> isize {
    let stats = ALLOCATOR.stats();
    stats.bytes_allocated as isize - stats.bytes_deallocated as isize
}

const SOCKETS: usize = 16;
const LARGE: usize = 1024 * 1024 - 256;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_message_read_is_given_back() {
    let app = serve(None).await;
    let initialize =
        json!({ "type": "initialize", "id": "i", "payload": initialize_payload() }).to_string();
    let mut sockets = Vec::new();
    for _ in 0..SOCKETS {
        let mut socket = raw_ws::upgrade(&app.url, None).await.socket.unwrap();
        socket.text(&initialize).await.unwrap();
        sockets.push(socket);
    }
    eventually(|| app.app.front().stats().open == SOCKETS).await;
    settle().await;
    let before = live_heap();

    // One envelope of 1 MiB from each (a type the app does not take: each is answered a short `error`). The
    // text is one buffer shared by every socket, and the sockets read nothing: what grows is the app's.
    let pad = "x".repeat(LARGE - 64);
    let large = json!({ "type": "nope", "id": "l", "payload": { "pad": pad } }).to_string();
    assert!(large.len() <= tower_cancel_http::abp::DEFAULT_MAX_MESSAGE_BYTES);
    for socket in &mut sockets {
        socket.text(&large).await.unwrap();
    }
    eventually(|| app.app.stats().bad_envelopes == SOCKETS as u64).await;
    drop((large, pad));
    settle().await;
    let kept = (live_heap() - before) / SOCKETS as isize;
    assert!(
        kept < 64 * 1024,
        "each session kept {kept} bytes after its 1 MiB message"
    );
    assert_eq!(app.app.stats().sessions, SOCKETS);
}

/// Let the app's tasks finish what the last frames started.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(300)).await;
}

async fn eventually(done: impl Fn() -> bool) {
    tokio::time::timeout(Duration::from_secs(30), async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await
    .expect("the app caught up");
}
