use std::{
    future::{poll_fn, Future},
    pin::pin,
    sync::{
        atomic::{AtomicBool, AtomicUsize, Ordering},
        Arc, Mutex,
    },
    task::{Context, Poll, Wake, Waker},
};

use super::{Repoll, SelfWake, NOBODY, POLLS, UNKNOWN};

/// A task's waker that counts its wakes.
#[derive(Default)]
struct Task {
    wakes: AtomicUsize,
}

impl Wake for Task {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.wakes.fetch_add(1, Ordering::SeqCst);
    }
}

impl Task {
    fn wakes(&self) -> usize {
        self.wakes.load(Ordering::SeqCst)
    }
}

fn poll_once<F: Future>(future: std::pin::Pin<&mut F>, task: &Arc<Task>) -> Poll<F::Output> {
    let waker = Waker::from(task.clone());
    future.poll(&mut Context::from_waker(&waker))
}

#[test]
fn a_future_that_wakes_itself_during_its_poll_is_polled_again_without_waking_its_task() {
    let polls = AtomicUsize::new(0);
    let mut future = pin!(Repoll::new(poll_fn(|cx| {
        let count = polls.fetch_add(1, Ordering::SeqCst) + 1;
        if count < 3 {
            // What a cancel read by the loop does to a request the loop polls.
            cx.waker().wake_by_ref();
            Poll::Pending
        } else {
            Poll::Ready(count)
        }
    })));
    let task = Arc::new(Task::default());
    assert_eq!(poll_once(future.as_mut(), &task), Poll::Ready(3));
    assert_eq!(task.wakes(), 0);
}

#[test]
fn a_future_pending_without_a_wake_is_polled_once() {
    let polls = AtomicUsize::new(0);
    let mut future = pin!(Repoll::new(poll_fn(|_| {
        polls.fetch_add(1, Ordering::SeqCst);
        Poll::<()>::Pending
    })));
    let task = Arc::new(Task::default());
    assert!(poll_once(future.as_mut(), &task).is_pending());
    assert_eq!(polls.load(Ordering::SeqCst), 1);
    assert_eq!(task.wakes(), 0);
}

#[test]
fn a_future_that_always_wakes_itself_gives_its_task_a_turn() {
    let polls = AtomicUsize::new(0);
    let mut future = pin!(Repoll::new(poll_fn(|cx| {
        polls.fetch_add(1, Ordering::SeqCst);
        cx.waker().wake_by_ref();
        Poll::<()>::Pending
    })));
    let task = Arc::new(Task::default());
    assert!(poll_once(future.as_mut(), &task).is_pending());
    assert_eq!(polls.load(Ordering::SeqCst), POLLS);
    // Requeued once, as tokio does with a task woken during its poll.
    assert_eq!(task.wakes(), 1);
    // And the next poll starts afresh.
    assert!(poll_once(future.as_mut(), &task).is_pending());
    assert_eq!(polls.load(Ordering::SeqCst), 2 * POLLS);
    assert_eq!(task.wakes(), 2);
}

#[test]
fn a_wake_after_the_poll_wakes_the_task_of_the_latest_poll() {
    let kept: Mutex<Option<Waker>> = Mutex::new(None);
    let mut future = pin!(Repoll::new(poll_fn(|cx| {
        *kept.lock().unwrap() = Some(cx.waker().clone());
        Poll::<()>::Pending
    })));
    let first = Arc::new(Task::default());
    let second = Arc::new(Task::default());
    assert!(poll_once(future.as_mut(), &first).is_pending());
    // Moved to another task, as a future may be between polls.
    assert!(poll_once(future.as_mut(), &second).is_pending());
    assert_eq!((first.wakes(), second.wakes()), (0, 0));
    kept.lock().unwrap().take().unwrap().wake();
    assert_eq!((first.wakes(), second.wakes()), (0, 1));
}

#[test]
fn a_wake_from_another_thread_during_the_poll_wakes_the_task() {
    let polls = AtomicUsize::new(0);
    let mut future = pin!(Repoll::new(poll_fn(|cx| {
        polls.fetch_add(1, Ordering::SeqCst);
        let waker = cx.waker().clone();
        std::thread::spawn(move || waker.wake()).join().unwrap();
        Poll::<()>::Pending
    })));
    let task = Arc::new(Task::default());
    assert!(poll_once(future.as_mut(), &task).is_pending());
    // Not polled again here: the task was woken and will be polled by its runtime.
    assert_eq!(polls.load(Ordering::SeqCst), 1);
    assert_eq!(task.wakes(), 1);
}

#[test]
fn a_future_ready_after_waking_itself_is_not_polled_again_and_wakes_nobody() {
    let polls = AtomicUsize::new(0);
    let mut future = pin!(Repoll::new(poll_fn(|cx| {
        polls.fetch_add(1, Ordering::SeqCst);
        cx.waker().wake_by_ref();
        Poll::Ready(())
    })));
    let task = Arc::new(Task::default());
    assert!(poll_once(future.as_mut(), &task).is_ready());
    assert_eq!(polls.load(Ordering::SeqCst), 1);
    assert_eq!(task.wakes(), 0);
}

#[test]
fn a_wake_from_a_thread_that_cannot_tell_which_it_is_wakes_the_task() {
    // Between polls (nobody polling) as during one: such a thread's wakes are never taken for the poller's own.
    let wake = Arc::new(SelfWake::default());
    let task = Arc::new(Task::default());
    wake.task.register(&Waker::from(task.clone()));
    assert_eq!(wake.polling.load(Ordering::SeqCst), NOBODY);
    wake.wake_from(UNKNOWN);
    assert_eq!(task.wakes(), 1);
    assert!(!wake.woken.load(Ordering::SeqCst));
}

#[tokio::test(flavor = "current_thread")]
async fn a_tokio_yield_inside_still_gives_the_runtime_its_turn() {
    // tokio defers the wake of its own yields until the task's poll has ended: they reach the task, which is
    // requeued behind the task spawned before the yield, rather than taken for a wake of the future's own.
    let sibling_ran = Arc::new(AtomicBool::new(false));
    let seen = tokio::spawn(Repoll::new({
        let sibling_ran = sibling_ran.clone();
        async move {
            let flag = sibling_ran.clone();
            tokio::spawn(async move { flag.store(true, Ordering::SeqCst) });
            tokio::task::yield_now().await;
            sibling_ran.load(Ordering::SeqCst)
        }
    }))
    .await
    .unwrap();
    assert!(seen, "the yield was taken for a wake of the future's own");
}
