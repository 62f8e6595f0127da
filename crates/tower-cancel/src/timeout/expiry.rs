//! The deadlines of a timeout layer's requests, watched by a few tasks instead of one timer each.
//!
//! A request that a cancel layer above can cancel needs no timer of its own: its expiry is a cancel with reason
//! `Timeout`, which wakes the cancel layer's future like any other cancel. So its deadline goes on a queue the
//! layer's requests share: a binary heap of `(deadline, slot)` under a lock, and a slab of the requests it names.
//! One tokio task per queue sleeps until the earliest deadline, cancels what has passed and sleeps again.
//!
//! A request goes on the queue only when its future first waits: one answered on its first poll costs nothing but
//! the choice of a queue (as a tokio timer never polled costs nothing). One that ends first frees its slot; its
//! heap entry, now naming a freed slot, is skipped when it comes up, or swept out once dead entries outnumber the
//! live ones, so the heap stays within twice the requests watched.
//!
//! Why: a tokio `Sleep` per request registers in the runtime's timer wheel when it is first polled and leaves it
//! when it is dropped, each under the wheel's lock, and wakes the timer driver (a system call) whenever the wheel
//! had nothing earlier. With a handler that awaits once, figure 1's `CancelStack::lsp().timeout(30 s)` ran 4659
//! instructions a call that way, 4295 this way (callgrind), and took 885 to 912 ns against 649 to 652.
//!
//! A layer has one queue per worker thread it is used from (at most [`MAX_QUEUES`]), so that the requests of two
//! workers do not take turns on one lock. A queue's task runs on the runtime of the request that first needed it;
//! when that runtime shuts down, the next request starts another on its own.

use std::{
    cmp::Reverse,
    collections::BinaryHeap,
    fmt,
    pin::pin,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex, MutexGuard, OnceLock, Weak,
    },
};

use futures_util::future;
use tokio::{sync::Notify, time::Instant};

use crate::{lifecycle::SharedLifecycle, reason::CancelReason};

/// At most this many queues per layer: enough for the workers of most runtimes; beyond it, workers share.
pub(crate) const MAX_QUEUES: usize = 8;

/// Dead heap entries kept at most beside the live ones before they are swept out (see [`State::release`]).
const SLACK: usize = 256;

/// At most this many requests cancelled per turn of a queue's task: a million timing out together do not hold
/// the queue's lock, nor the worker, for the whole of them.
const TURN: usize = 1024;

/// A timeout layer's queues of deadlines, made when its first request needs one.
#[derive(Default)]
pub(crate) struct Expiry {
    queues: OnceLock<Box<[Arc<Queue>]>>,
}

impl Clone for Expiry {
    // A layer's configuration is cloned when it is changed (`Arc::make_mut`): the changed one starts with queues of
    // its own, as a layer made afresh does.
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl fmt::Debug for Expiry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let queues = self.queues.get().map_or(0, |queues| queues.len());
        f.debug_struct("Expiry").field("queues", &queues).finish()
    }
}

impl Expiry {
    /// A deadline `at`, on this thread's queue: [`Unplaced::place`] puts a request there.
    pub(crate) fn deadline(&self, at: Instant) -> Unplaced {
        let queues = self.queues.get_or_init(|| {
            let count = std::thread::available_parallelism()
                .map_or(1, usize::from)
                .min(MAX_QUEUES);
            (0..count).map(|_| Arc::new(Queue::new())).collect()
        });
        Unplaced {
            queue: queues[queue_of_this_thread() % queues.len()].clone(),
            at,
        }
    }

    #[cfg(test)]
    pub(crate) fn watch(&self, lifecycle: &SharedLifecycle, at: Instant) -> Option<Registration> {
        self.deadline(at).place(lifecycle)
    }

    /// The requests being watched, over all queues.
    #[cfg(test)]
    pub(crate) fn watched(&self) -> usize {
        self.queues.get().map_or(0, |queues| {
            queues.iter().map(|queue| queue.lock().live).sum()
        })
    }

    /// The room every queue's heap and slab keep, in entries and slots.
    #[cfg(test)]
    pub(crate) fn room(&self) -> usize {
        self.queues.get().map_or(0, |queues| {
            queues
                .iter()
                .map(|queue| {
                    let state = queue.lock();
                    state.heap.capacity() + state.slots.capacity() + state.free.capacity()
                })
                .sum()
        })
    }

    /// The entries of every queue's heap, dead ones included.
    #[cfg(test)]
    pub(crate) fn entries(&self) -> usize {
        self.queues.get().map_or(0, |queues| {
            queues.iter().map(|queue| queue.lock().heap.len()).sum()
        })
    }
}

/// Each thread's queue, by a number given to each thread when it first asks: the threads of a runtime spread over
/// the queues, and a thread always takes the same one.
fn queue_of_this_thread() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static QUEUE: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    QUEUE.with(|queue| *queue)
}

/// A request's deadline and the queue it goes on, not yet there: a request answered on its first poll never goes.
pub(crate) struct Unplaced {
    queue: Arc<Queue>,
    at: Instant,
}

impl Unplaced {
    /// Cancel `lifecycle` with reason `Timeout` once the deadline (or a later one, if it was pushed back by then)
    /// has passed, unless the returned registration is dropped first. `None` outside a tokio runtime: there is no
    /// task to watch it there.
    pub(crate) fn place(self, lifecycle: &SharedLifecycle) -> Option<Registration> {
        self.queue.push(lifecycle, self.at)
    }

    /// The deadline.
    pub(crate) fn at(&self) -> Instant {
        self.at
    }
}

impl fmt::Debug for Unplaced {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Unplaced").field("at", &self.at).finish()
    }
}

/// A request's place on a queue: dropping it (the request ended) takes the request off.
pub(crate) struct Registration {
    queue: Arc<Queue>,
    slot: u32,
    generation: u32,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.queue.lock().release(self.slot, self.generation);
    }
}

impl fmt::Debug for Registration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registration")
            .field("slot", &self.slot)
            .finish()
    }
}

struct Queue {
    state: Mutex<State>,
    // Wakes the queue's task: a deadline earlier than the one it sleeps until, or the queue's end. Shared with the
    // task, which holds the queue itself only weakly.
    wake: Arc<Notify>,
}

impl Drop for Queue {
    fn drop(&mut self) {
        // Nothing can be pushed any more: the task wakes, finds the queue gone and ends.
        self.wake.notify_one();
    }
}

#[derive(Default)]
struct State {
    heap: BinaryHeap<Reverse<Entry>>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    // Slots in use: the requests watched.
    live: usize,
    // What the task sleeps until (`None`: it waits for a push), whether a task runs at all, and whether it was
    // woken since it last looked (a second wake would tell it nothing more).
    armed: Option<Instant>,
    running: bool,
    woken: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Entry {
    at: Instant,
    slot: u32,
    generation: u32,
}

#[derive(Default)]
struct Slot {
    // Bumped each time the slot is freed: an entry of an earlier generation names a request that has ended.
    generation: u32,
    // `None` while the slot is free, and once its request's deadline has passed (its registration frees it).
    lifecycle: Option<SharedLifecycle>,
}

impl Queue {
    fn new() -> Self {
        Self {
            state: Mutex::new(State::default()),
            wake: Arc::new(Notify::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing here runs user code under the lock; a poisoned lock still holds consistent state.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn push(self: Arc<Self>, lifecycle: &SharedLifecycle, at: Instant) -> Option<Registration> {
        let mut state = self.lock();
        let (slot, generation) = state.occupy(lifecycle.clone());
        state.heap.push(Reverse(Entry {
            at,
            slot,
            generation,
        }));
        let start = !state.running;
        state.running = true;
        // A task about to start looks at the whole queue anyway.
        let wake = !start && !state.woken && state.armed.map_or(true, |armed| at < armed);
        state.woken |= wake;
        drop(state);
        if start {
            // The runtime is looked up only here: a handle costs two atomic read-modify-writes.
            let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                let mut state = self.lock();
                state.running = false;
                state.release(slot, generation);
                return None;
            };
            runtime.spawn(run(Arc::downgrade(&self), self.wake.clone()));
        } else if wake {
            self.wake.notify_one();
        }
        Some(Registration {
            queue: self,
            slot,
            generation,
        })
    }
}

impl State {
    fn occupy(&mut self, lifecycle: SharedLifecycle) -> (u32, u32) {
        self.live += 1;
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None => {
                self.slots.push(Slot::default());
                u32::try_from(self.slots.len() - 1)
                    .expect("fewer than 2^32 requests watched at once")
            }
        };
        let entry = &mut self.slots[slot as usize];
        entry.lifecycle = Some(lifecycle);
        (slot, entry.generation)
    }

    fn release(&mut self, slot: u32, generation: u32) {
        let entry = &mut self.slots[slot as usize];
        if entry.generation != generation {
            return;
        }
        entry.generation = entry.generation.wrapping_add(1);
        entry.lifecycle = None;
        self.free.push(slot);
        self.live -= 1;
        // Requests that end long before their deadline (nearly all of them) leave their entries behind: sweep them
        // out once they outnumber the live ones, so that the heap stays within twice the requests watched. Each
        // sweep is paid for by the SLACK and more requests that ended since the last one.
        if self.heap.len() > 2 * self.live + SLACK {
            let slots = &self.slots;
            self.heap
                .retain(|Reverse(entry)| slots[entry.slot as usize].generation == entry.generation);
            // A burst of requests held at once leaves room for all of them: give back what the rest cannot use.
            if self.heap.capacity() > 4 * (self.heap.len() + SLACK) {
                self.heap.shrink_to(2 * self.heap.len() + SLACK);
            }
        }
        // The last request watched has ended after a burst: no registration names a slot any more, so the slab and
        // its heap start over, small.
        if self.live == 0 && self.slots.len() > SLACK {
            self.heap = BinaryHeap::new();
            self.slots = Vec::new();
            self.free = Vec::new();
        }
    }

    /// Take the requests whose deadline has passed at `now`, at most [`TURN`] of them (putting back those whose
    /// deadline moved later), and say when to look again: `now` if some are left for another turn.
    fn due(&mut self, now: Instant, due: &mut Vec<SharedLifecycle>) -> Option<Instant> {
        self.woken = false;
        // The latest deadline of the ended requests skipped here: see below.
        let mut skipped = None;
        while let Some(&Reverse(entry)) = self.heap.peek() {
            let slot = &mut self.slots[entry.slot as usize];
            if slot.generation != entry.generation || slot.lifecycle.is_none() {
                self.heap.pop();
                skipped = Some(entry.at);
                continue;
            }
            if entry.at > now {
                break;
            }
            if due.len() == TURN {
                self.armed = Some(now);
                return self.armed;
            }
            self.heap.pop();
            let lifecycle = slot.lifecycle.as_ref().expect("checked above");
            // Progress may have pushed an idle deadline back since it was queued: queue it again for then.
            match lifecycle.deadline().map(|deadline| deadline.at()) {
                Some(later) if later > entry.at => {
                    self.heap.push(Reverse(Entry { at: later, ..entry }))
                }
                _ => due.extend(slot.lifecycle.take()),
            }
        }
        // With nothing left to watch, the task would wait for the next push, and each push would wake it: on a
        // connection whose requests come one at a time, a wake per request. Instead it sleeps until the latest
        // deadline it skipped: a request like those (same timeout, pushed since) has a later deadline, and does
        // not wake it; one with a shorter timeout does.
        self.armed = match self.heap.peek() {
            Some(Reverse(entry)) => Some(entry.at),
            None => skipped.filter(|&at| at > now),
        };
        self.armed
    }
}

/// A queue's task: cancels each request whose deadline has passed, and sleeps until the next.
async fn run(queue: Weak<Queue>, wake: Arc<Notify>) {
    // Told to the queue however the task ends, the runtime shutting down included: the next push starts another.
    struct Ended(Weak<Queue>);
    impl Drop for Ended {
        fn drop(&mut self) {
            if let Some(queue) = self.0.upgrade() {
                let mut state = queue.lock();
                state.running = false;
                state.armed = None;
                state.woken = false;
            }
        }
    }
    let _ended = Ended(queue.clone());
    let mut due = Vec::new();
    loop {
        let next = {
            let Some(queue) = queue.upgrade() else { return };
            let next = queue.lock().due(Instant::now(), &mut due);
            next
        };
        // Outside the lock: a cancel wakes the request's future and may run its end notice.
        for lifecycle in due.drain(..) {
            if lifecycle.cancel(CancelReason::Timeout) {
                tracing::debug!(id = %lifecycle.id(), "request timed out");
            }
        }
        let notified = wake.notified();
        match next {
            // More were due than one turn takes: the runtime's other tasks go first.
            Some(at) if at <= Instant::now() => tokio::task::yield_now().await,
            Some(at) => {
                let sleep = pin!(tokio::time::sleep_until(at));
                let _ = future::select(sleep, pin!(notified)).await;
            }
            None => notified.await,
        }
    }
}

#[cfg(test)]
mod tests;
