//! Helpers of these tests; the Redis server itself is `tower_cancel_redis::testing::RedisServer`.

use std::time::Duration;

pub(crate) use tower_cancel_redis::testing::RedisServer;

/// Wait for `done`, polling; fails the test after 10 s rather than hanging it.
pub(crate) async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
