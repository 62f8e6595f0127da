use std::time::Duration;

use tokio::time::{advance, Instant};

use super::{Expiry, Registration, SLACK};
use crate::{
    lifecycle::{Deadline, Lifecycle, SharedLifecycle},
    message::Id,
    reason::CancelReason,
    timeout::tests::settle,
};

fn request(id: i64, now: Instant, timeout: Duration) -> SharedLifecycle {
    let lifecycle = SharedLifecycle::new(Lifecycle::new(Id::from(id), 1));
    assert!(lifecycle.set_deadline(Deadline::fixed(now, timeout)));
    lifecycle
}

/// A request with a fixed deadline `timeout` from now, on `expiry`'s queue.
fn watched(expiry: &Expiry, id: i64, timeout: Duration) -> (SharedLifecycle, Registration) {
    let now = Instant::now();
    let lifecycle = request(id, now, timeout);
    let registration = expiry.watch(&lifecycle, now + timeout).unwrap();
    (lifecycle, registration)
}

#[tokio::test(start_paused = true)]
async fn a_request_is_cancelled_with_reason_timeout_once_its_deadline_passed_and_not_before() {
    let expiry = Expiry::default();
    let (lifecycle, _watched) = watched(&expiry, 1, Duration::from_secs(30));

    advance(Duration::from_millis(29_999)).await;
    settle().await;
    assert!(!lifecycle.is_cancelled(), "not before its deadline");

    advance(Duration::from_millis(2)).await;
    settle().await;
    assert_eq!(lifecycle.reason(), Some(&CancelReason::Timeout));
    assert_eq!(
        expiry.watched(),
        1,
        "its registration, not the task, frees the slot"
    );
}

#[tokio::test(start_paused = true)]
async fn requests_that_end_first_leave_nothing_watched_and_the_heap_stays_bounded() {
    let expiry = Expiry::default();
    let (held, _held) = watched(&expiry, 0, Duration::from_secs(30));
    for id in 1..=10_000 {
        let (lifecycle, watched) = watched(&expiry, id, Duration::from_secs(30));
        drop(watched);
        assert_eq!(
            SharedLifecycle::count(&lifecycle),
            1,
            "the queue let go of an ended request"
        );
    }
    assert_eq!(expiry.watched(), 1);
    assert!(
        expiry.entries() <= 2 + SLACK + 1,
        "dead entries swept out: {} left for 1 request watched",
        expiry.entries()
    );

    advance(Duration::from_secs(31)).await;
    settle().await;
    assert_eq!(held.reason(), Some(&CancelReason::Timeout));
    assert_eq!(expiry.entries(), 0, "every entry came up and went");
}

#[tokio::test(start_paused = true)]
async fn an_idle_deadline_pushed_back_is_watched_until_its_new_end() {
    let expiry = Expiry::default();
    let start = Instant::now();
    let lifecycle = SharedLifecycle::new(Lifecycle::new(Id::from(1), 1));
    let idle = Deadline::idle(start, Duration::from_secs(10), Duration::from_secs(60));
    assert!(lifecycle.set_deadline(idle));
    let _watched = expiry
        .watch(&lifecycle, start + Duration::from_secs(10))
        .unwrap();

    advance(Duration::from_secs(8)).await;
    lifecycle.deadline().unwrap().push_back(Instant::now());
    advance(Duration::from_secs(5)).await;
    settle().await;
    assert!(
        !lifecycle.is_cancelled(),
        "pushed back to 18 s: still running at 13 s"
    );

    advance(Duration::from_secs(6)).await;
    settle().await;
    assert_eq!(lifecycle.reason(), Some(&CancelReason::Timeout));
}

#[tokio::test(start_paused = true)]
async fn an_earlier_deadline_than_the_one_slept_on_wakes_the_task() {
    let expiry = Expiry::default();
    let (late, _late) = watched(&expiry, 1, Duration::from_secs(60));
    settle().await;
    let (soon, _soon) = watched(&expiry, 2, Duration::from_secs(1));

    advance(Duration::from_millis(1_001)).await;
    settle().await;
    assert_eq!(soon.reason(), Some(&CancelReason::Timeout));
    assert!(!late.is_cancelled());
}

#[test]
fn a_runtime_that_shut_down_leaves_the_queue_to_the_next_one() {
    let paused = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap()
    };
    let expiry = Expiry::default();

    let first = paused();
    let abandoned = first.block_on(async {
        let (lifecycle, watched) = watched(&expiry, 1, Duration::from_secs(30));
        settle().await;
        (lifecycle, watched)
    });
    drop(first);

    paused().block_on(async {
        let (lifecycle, _watched) = watched(&expiry, 2, Duration::from_secs(5));
        advance(Duration::from_secs(6)).await;
        settle().await;
        assert_eq!(
            lifecycle.reason(),
            Some(&CancelReason::Timeout),
            "a task of this runtime watches the queue"
        );
    });
    drop(abandoned);
    assert_eq!(expiry.watched(), 0);
}

#[tokio::test(start_paused = true)]
async fn the_task_ends_with_the_layer_and_its_last_request() {
    let alive = || {
        tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks()
    };
    let expiry = Expiry::default();
    let (_lifecycle, watched) = watched(&expiry, 1, Duration::from_secs(30));
    settle().await;
    assert_eq!(alive(), 1, "one task watches the queue");

    drop(expiry);
    settle().await;
    assert_eq!(
        alive(),
        1,
        "a request in flight keeps its queue, and the task watching it"
    );
    drop(watched);
    settle().await;
    assert_eq!(alive(), 0, "nothing left to watch: the task ended");
}

#[test]
fn outside_a_runtime_nothing_is_watched() {
    let expiry = Expiry::default();
    let now = Instant::now();
    let lifecycle = request(1, now, Duration::from_secs(30));
    assert!(expiry
        .watch(&lifecycle, now + Duration::from_secs(30))
        .is_none());
}

#[tokio::test(start_paused = true)]
async fn more_deadlines_passing_together_than_a_turn_takes_are_all_cancelled() {
    let expiry = Expiry::default();
    let count = 2 * super::TURN + 100;
    let requests: Vec<_> = (0..count)
        .map(|id| watched(&expiry, id as i64, Duration::from_secs(1)))
        .collect();

    advance(Duration::from_millis(1_001)).await;
    settle().await;
    assert!(
        requests
            .iter()
            .all(|(l, _)| l.reason() == Some(&CancelReason::Timeout)),
        "every one, over the task's turns"
    );
    drop(requests);
    assert_eq!(expiry.watched(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_burst_held_at_once_gives_its_room_back_when_it_ends() {
    let expiry = Expiry::default();
    let burst: Vec<_> = (0..10_000)
        .map(|id| watched(&expiry, id, Duration::from_secs(30)))
        .collect();
    assert!(expiry.room() >= 20_000, "room for every one of them");
    drop(burst);
    assert_eq!((expiry.watched(), expiry.entries()), (0, 0));
    assert!(
        expiry.room() <= 4 * SLACK,
        "room kept after the burst: {}",
        expiry.room()
    );

    let (after, _after) = watched(&expiry, 10_000, Duration::from_secs(1));
    advance(Duration::from_millis(1_001)).await;
    settle().await;
    assert_eq!(
        after.reason(),
        Some(&CancelReason::Timeout),
        "the queue works on after starting over"
    );
}
