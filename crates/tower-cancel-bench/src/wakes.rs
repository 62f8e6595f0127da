//! How a target's connection task is polled and woken (`serve_profile --wakes`).
//!
//! Figure 5's workload runs three tasks on two workers: the client, the server's connection task (its read loop)
//! and, for the servers that spawn one, its writer. How often the connection task is polled, and who woke it, tells
//! the two kinds of run apart that BENCHMARKS.md describes: a read loop that always has frames waiting is polled a
//! few hundred times in 400000 requests and woken mostly by itself (a cancel waking a request it polls); one that
//! runs dry is polled thousands of times, woken by the client's frames each time it waited for them.

use std::{
    future::Future,
    pin::Pin,
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc, OnceLock,
    },
    task::{Context, Poll, Wake, Waker},
};

use futures_util::task::AtomicWaker;

use crate::target::{BoxRead, BoxWrite, Serve, ServeFuture, Target};

/// The counts of one connection task.
#[derive(Debug, Default)]
pub struct Wakes {
    polls: AtomicU64,
    during_poll: AtomicU64,
    between_polls: AtomicU64,
    polling: AtomicBool,
    task: AtomicWaker,
}

impl Wakes {
    /// Times the task was polled.
    pub fn polls(&self) -> u64 {
        self.polls.load(Ordering::Relaxed)
    }

    /// Wakes that came while the task was being polled (mostly the task itself: a request it polls woken by a
    /// cancel it just read, its own budget spent).
    pub fn during_poll(&self) -> u64 {
        self.during_poll.load(Ordering::Relaxed)
    }

    /// Wakes that came while the task waited (the client's frames, a writer with room again).
    pub fn between_polls(&self) -> u64 {
        self.between_polls.load(Ordering::Relaxed)
    }
}

impl Wake for Wakes {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let count = if self.polling.load(Ordering::Relaxed) {
            &self.during_poll
        } else {
            &self.between_polls
        };
        count.fetch_add(1, Ordering::Relaxed);
        self.task.wake();
    }
}

// A target's serve function is a plain `fn`: the target watched and its counts are found here.
static WATCHED: OnceLock<(Serve, Arc<Wakes>)> = OnceLock::new();

/// `target`, its connection task counted. One target per process: the counts of a second call would mix with the
/// first's, so it fails (`None`).
pub fn watch(target: Target) -> Option<(Target, Arc<Wakes>)> {
    let wakes = Arc::new(Wakes::default());
    WATCHED.set((target.serve, wakes.clone())).ok()?;
    Some((
        Target {
            serve: serve_watched,
            ..target
        },
        wakes,
    ))
}

fn serve_watched(reader: BoxRead, writer: BoxWrite, need: usize) -> ServeFuture {
    let (serve, wakes) = WATCHED.get().expect("watch set the target before serving");
    Box::pin(Watched {
        inner: serve(reader, writer, need),
        waker: Waker::from(wakes.clone()),
        wakes: wakes.clone(),
    })
}

struct Watched {
    inner: ServeFuture,
    // The waker the task is polled with, made once: what counts the wakes adds as little as it can to the poll.
    waker: Waker,
    wakes: Arc<Wakes>,
}

impl Future for Watched {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        this.wakes.task.register(cx.waker());
        this.wakes.polls.fetch_add(1, Ordering::Relaxed);
        this.wakes.polling.store(true, Ordering::Relaxed);
        let result = this
            .inner
            .as_mut()
            .poll(&mut Context::from_waker(&this.waker));
        this.wakes.polling.store(false, Ordering::Relaxed);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waits_once(_: BoxRead, _: BoxWrite, _: usize) -> ServeFuture {
        let mut waited = false;
        Box::pin(std::future::poll_fn(move |cx| {
            if waited {
                return Poll::Ready(());
            }
            waited = true;
            // Woken during its own poll: polled again at once.
            cx.waker().wake_by_ref();
            Poll::Pending
        }))
    }

    #[tokio::test]
    async fn a_task_that_wakes_itself_once_is_polled_twice() {
        let target = Target {
            name: "waits once",
            protocol: crate::target::Protocol::Lsp,
            serve: waits_once,
        };
        let (watched, wakes) = watch(target).expect("the first target watched");
        let (a, b) = tokio::io::duplex(64);
        let (read, write) = tokio::io::split(a);
        (watched.serve)(Box::pin(read), Box::pin(write), 1).await;
        drop(b);
        assert_eq!(
            (wakes.polls(), wakes.during_poll(), wakes.between_polls()),
            (2, 1, 0)
        );
        assert!(
            watch(target).is_none(),
            "a second target would mix its counts with the first's"
        );
    }
}
