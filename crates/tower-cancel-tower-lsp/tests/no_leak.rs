//! 100 000 cancelled requests leave tower-lsp's table of running requests and tower-cancel's registry empty.
//!
//! tower-lsp's table is private; what it holds shows on the wire: a request whose id is still in it is refused
//! with -32600. So every cancelled id is used again, and must get its normal answer.

mod common;

use common::{cancelled, Peer};
use serde_json::json;
use tower_cancel::TimeoutLayer;

const REQUESTS: i64 = 100_000;
/// Requests in flight at once: sent, then cancelled, then their replies read.
const BATCH: i64 = 1_000;

#[tokio::test(start_paused = true)]
async fn cancelled_requests_leave_both_tables_empty_and_their_ids_reusable() {
    let mut peer = Peer::start(TimeoutLayer::none()).await;
    // Numeric ids inside i32 (tower-lsp's own ids) and half of them as strings.
    let id = |n: i64| {
        if n % 2 == 0 {
            json!(n)
        } else {
            json!(format!("s{n}"))
        }
    };
    for start in (0..REQUESTS).step_by(BATCH as usize) {
        for n in start..start + BATCH {
            peer.request(id(n), "test/sleep", json!({"ms": 3_600_000}))
                .await;
        }
        for n in start..start + BATCH {
            peer.cancel(id(n)).await;
        }
        for n in start..start + BATCH {
            assert_eq!(peer.recv_raw().await, cancelled(&id(n).to_string()));
        }
        assert!(peer.registry.is_empty(), "our registry after {start}");
        // Every id of the batch again: tower-lsp must have forgotten each one.
        for n in start..start + BATCH {
            peer.request(id(n), "test/echo", json!(n)).await;
        }
        for n in start..start + BATCH {
            let expected = format!(r#"{{"jsonrpc":"2.0","id":{},"result":{n}}}"#, id(n));
            assert_eq!(peer.recv_raw().await, expected);
        }
    }
    let (started, finished, stopped) = peer.counters.get();
    assert_eq!(finished, 0);
    assert_eq!(started, stopped, "every handler that began was stopped");
    assert!(peer.registry.is_empty());
    let stats = peer.registry.stats();
    assert_eq!(peer.registry.len(), 0, "{stats:?}");
}
