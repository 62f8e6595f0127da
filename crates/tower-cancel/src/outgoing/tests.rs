//! The race on its own, under paused time: each event wins when it comes first, the drop reports, an idle deadline
//! moves with activity but never past its maximum.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio::{sync::oneshot, time::Instant};
use tokio_test::{assert_pending, assert_ready, task};
use tokio_util::sync::CancellationToken;

use super::{Event, Outgoing, Owner, Stage};

/// An owner that writes down every drop it is told of, and reports the activity a test sets.
#[derive(Clone, Default)]
struct Log {
    drops: Arc<Mutex<Vec<Stage>>>,
    activity: Arc<Mutex<Option<Instant>>>,
}

impl Log {
    fn drops(&self) -> Vec<Stage> {
        self.drops.lock().unwrap().clone()
    }

    fn active_now(&self) {
        *self.activity.lock().unwrap() = Some(Instant::now());
    }
}

impl Owner for Log {
    fn dropped(&mut self, stage: Stage) {
        self.drops.lock().unwrap().push(stage);
    }

    fn last_activity(&self) -> Option<Instant> {
        *self.activity.lock().unwrap()
    }
}

type Call = Outgoing<oneshot::Receiver<u32>, Log>;

/// A call with a parent token, a caller's token and a timeout of 100 ms, and the handles on each.
fn new_call() -> (
    Call,
    oneshot::Sender<u32>,
    CancellationToken,
    CancellationToken,
    Log,
) {
    let (answer, answered) = oneshot::channel();
    let (parent, caller, log) = (
        CancellationToken::new(),
        CancellationToken::new(),
        Log::default(),
    );
    let call = Outgoing::new(answered, log.clone())
        .parent(parent.clone())
        .cancel_on(caller.clone())
        .timeout(ms(100));
    (call, answer, parent, caller, log)
}

fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

#[tokio::test(start_paused = true)]
async fn the_answer_wins_when_it_comes_first_even_at_the_same_moment_as_everything_else() {
    let (call, answer, parent, caller, log) = new_call();
    let mut call = task::spawn(call);
    assert_pending!(call.poll());
    tokio::time::advance(ms(100)).await;
    parent.cancel();
    caller.cancel();
    answer.send(7).unwrap();
    assert_eq!(assert_ready!(call.poll()), Event::Answered(Ok(7)));
    assert!(call.is_ended());
    drop(call);
    assert_eq!(log.drops(), [], "an answered call tells its owner nothing");
}

#[tokio::test(start_paused = true)]
async fn the_parent_wins_over_the_caller_and_the_timeout() {
    let (call, _answer, parent, caller, log) = new_call();
    let mut call = task::spawn(call);
    assert_pending!(call.poll());
    tokio::time::advance(ms(100)).await;
    caller.cancel();
    parent.cancel();
    assert_eq!(assert_ready!(call.poll()), Event::ParentCancelled);
    drop(call);
    assert_eq!(log.drops(), [Stage::GaveUp]);
}

#[tokio::test(start_paused = true)]
async fn the_callers_token_wins_over_the_timeout() {
    let (call, _answer, _parent, caller, log) = new_call();
    let mut call = task::spawn(call);
    assert_pending!(call.poll());
    tokio::time::advance(ms(100)).await;
    caller.cancel();
    assert_eq!(assert_ready!(call.poll()), Event::Cancelled);
    drop(call);
    assert_eq!(log.drops(), [Stage::GaveUp]);
}

#[tokio::test(start_paused = true)]
async fn the_timeout_wins_when_it_passes_first_and_not_a_moment_before() {
    let (call, _answer, _parent, _caller, log) = new_call();
    let mut call = task::spawn(call);
    assert_pending!(call.poll());
    tokio::time::advance(ms(99)).await;
    assert_pending!(call.poll());
    tokio::time::advance(ms(1)).await;
    assert!(call.is_woken());
    assert_eq!(assert_ready!(call.poll()), Event::TimedOut);
    drop(call);
    assert_eq!(log.drops(), [Stage::GaveUp]);
}

#[tokio::test(start_paused = true)]
async fn a_token_wakes_the_call() {
    let (call, _answer, parent, _caller, _log) = new_call();
    let mut call = task::spawn(call);
    assert_pending!(call.poll());
    parent.cancel();
    assert!(call.is_woken());
    assert_eq!(assert_ready!(call.poll()), Event::ParentCancelled);
}

#[tokio::test(start_paused = true)]
async fn a_drop_before_anything_happened_reports_waiting_once() {
    let (call, _answer, _parent, _caller, log) = new_call();
    let mut call = task::spawn(call);
    assert_pending!(call.poll());
    drop(call);
    assert_eq!(log.drops(), [Stage::Waiting]);

    // Never polled at all: the same.
    let (call, _answer, _parent, _caller, log) = new_call();
    drop(call);
    assert_eq!(log.drops(), [Stage::Waiting]);
}

#[tokio::test(start_paused = true)]
async fn after_giving_up_the_call_waits_for_the_answer_alone_until_disarmed_or_answered() {
    let (call, answer, _parent, caller, log) = new_call();
    let mut call = task::spawn(call);
    caller.cancel();
    assert_eq!(assert_ready!(call.poll()), Event::Cancelled);
    tokio::time::advance(ms(500)).await;
    assert_pending!(
        call.poll(),
        "no second event: the timeout is not raced any more"
    );
    answer.send(9).unwrap();
    assert!(call.is_woken());
    assert_eq!(assert_ready!(call.poll()), Event::Answered(Ok(9)));
    drop(call);
    assert_eq!(log.drops(), [], "the late answer ended it");

    let (mut call, _answer, parent, _caller, log) = new_call();
    parent.cancel();
    assert_eq!((&mut call).await, Event::ParentCancelled);
    call.disarm();
    assert!(call.is_ended());
    drop(call);
    assert_eq!(log.drops(), [], "the owner disarmed it");
}

#[tokio::test(start_paused = true)]
async fn poll_answer_gives_the_answer_bare() {
    let (mut call, answer, _parent, _caller, log) = new_call();
    let mut waiting = task::spawn(std::future::poll_fn(|cx| call.poll_answer(cx)));
    assert_pending!(waiting.poll());
    answer.send(3).unwrap();
    assert_eq!(assert_ready!(waiting.poll()), Ok(3));
    drop(waiting);
    assert!(call.is_ended());
    drop(call);
    assert_eq!(log.drops(), []);
}

#[tokio::test(start_paused = true)]
#[should_panic(expected = "an `Outgoing` polled after it ended")]
async fn polling_an_ended_call_panics() {
    let (mut call, answer, _parent, _caller, _log) = new_call();
    answer.send(1).unwrap();
    assert_eq!((&mut call).await, Event::Answered(Ok(1)));
    let _ = (&mut call).await;
}

#[tokio::test(start_paused = true)]
async fn activity_pushes_an_idle_timeout_back_but_never_past_its_maximum() {
    let start = Instant::now();
    let (_answer, answered) = oneshot::channel::<u32>();
    let log = Log::default();
    let call = Outgoing::new(answered, log.clone())
        .reset_on_activity(ms(250))
        .timeout(ms(100));
    assert_eq!(call.deadline(), Some(start + ms(100)));
    let mut call = task::spawn(call);
    assert_pending!(call.poll());

    // Activity at 80 ms: when the sleep wakes at 100 ms, the deadline moves to 180 ms.
    tokio::time::advance(ms(80)).await;
    log.active_now();
    tokio::time::advance(ms(20)).await;
    assert_pending!(call.poll());
    assert_eq!(call.deadline(), Some(start + ms(180)));

    // Activity at 170 ms and 240 ms: 270 and then 340 would be past the maximum, so 250.
    tokio::time::advance(ms(70)).await;
    log.active_now();
    tokio::time::advance(ms(10)).await;
    assert_pending!(call.poll());
    assert_eq!(call.deadline(), Some(start + ms(250)));
    tokio::time::advance(ms(60)).await;
    log.active_now();
    assert_pending!(call.poll());
    tokio::time::advance(ms(9)).await;
    assert_pending!(call.poll());
    assert_eq!(call.deadline(), Some(start + ms(250)));

    tokio::time::advance(ms(1)).await;
    assert_eq!(assert_ready!(call.poll()), Event::TimedOut);
    assert_eq!(Instant::now(), start + ms(250), "timed out at the maximum");
    drop(call);
    assert_eq!(log.drops(), [Stage::GaveUp]);
}

#[tokio::test(start_paused = true)]
async fn a_fixed_timeout_ignores_activity() {
    let (_answer, answered) = oneshot::channel::<u32>();
    let log = Log::default();
    let mut call = task::spawn(Outgoing::new(answered, log.clone()).timeout(ms(100)));
    assert_pending!(call.poll());
    tokio::time::advance(ms(90)).await;
    log.active_now();
    tokio::time::advance(ms(10)).await;
    assert_eq!(assert_ready!(call.poll()), Event::TimedOut);
}

#[tokio::test(start_paused = true)]
async fn without_tokens_or_a_timeout_only_the_answer_or_the_drop_ends_it() {
    let (answer, answered) = oneshot::channel::<u32>();
    let drops = Arc::new(Mutex::new(Vec::new()));
    let owner = {
        let drops = drops.clone();
        move |stage: Stage| drops.lock().unwrap().push(stage)
    };
    let mut call = task::spawn(Outgoing::new(answered, owner));
    assert_eq!(call.deadline(), None);
    assert_pending!(call.poll());
    tokio::time::advance(Duration::from_secs(3600)).await;
    assert_pending!(call.poll());
    drop(answer);
    assert!(matches!(
        assert_ready!(call.poll()),
        Event::Answered(Err(_))
    ));
    drop(call);
    assert!(drops.lock().unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_cap_bounds_any_timeout_and_stands_without_one() {
    let start = Instant::now();
    let cap = start + ms(300);
    // A longer timeout, set before or after the cap; none at all; an idle one whose activity would move it past.
    let (_a, answered) = oneshot::channel::<u32>();
    let longer_after = Outgoing::new(answered, Log::default())
        .not_after(cap)
        .timeout(ms(10_000));
    let (_b, answered) = oneshot::channel::<u32>();
    let longer_before = Outgoing::new(answered, Log::default())
        .timeout(ms(10_000))
        .not_after(cap);
    let (_c, answered) = oneshot::channel::<u32>();
    let none = Outgoing::new(answered, Log::default())
        .timeout(ms(10_000))
        .not_after(cap)
        .no_timeout();
    let (_d, answered) = oneshot::channel::<u32>();
    let idle_log = Log::default();
    let idle = Outgoing::new(answered, idle_log.clone())
        .timeout(ms(200))
        .reset_on_activity(ms(1_000))
        .not_after(cap);
    // A shorter timeout keeps its own moment; of two caps the earlier counts.
    let (_e, answered) = oneshot::channel::<u32>();
    let shorter = Outgoing::new(answered, Log::default())
        .timeout(ms(100))
        .not_after(cap)
        .not_after(start + ms(400));
    for call in [&longer_after, &longer_before, &none] {
        assert_eq!(call.deadline(), Some(cap));
    }
    assert_eq!(idle.deadline(), Some(start + ms(200)));
    assert_eq!(shorter.deadline(), Some(start + ms(100)));

    let mut calls: Vec<_> = [longer_after, longer_before, none, idle]
        .into_iter()
        .map(task::spawn)
        .collect();
    let mut shorter = task::spawn(shorter);
    for call in &mut calls {
        assert_pending!(call.poll());
    }
    tokio::time::advance(ms(100)).await;
    assert_eq!(assert_ready!(shorter.poll()), Event::TimedOut);
    tokio::time::advance(ms(90)).await;
    idle_log.active_now();
    tokio::time::advance(ms(10)).await;
    for call in &mut calls {
        assert_pending!(call.poll());
    }
    assert_eq!(
        calls[3].deadline(),
        Some(cap),
        "activity at 190 ms: 390, capped"
    );
    tokio::time::advance(ms(99)).await;
    for call in &mut calls {
        assert_pending!(call.poll());
    }
    tokio::time::advance(ms(1)).await;
    for call in &mut calls {
        assert_eq!(assert_ready!(call.poll()), Event::TimedOut);
    }
    assert_eq!(Instant::now(), cap);
}
