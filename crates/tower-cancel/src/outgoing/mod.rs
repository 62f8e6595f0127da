//! One call to the other side, waiting for its answer: [`Outgoing`], the race every client here runs.
//!
//! A call this side sends (a [`Peer`](crate::Peer)'s request, an ABP agent's capability call, a RAP runtime's tool
//! call) waits for its answer, and gives up when something else comes first: a token fires (its parent request's,
//! or its caller's), its timeout passes, or its future is dropped. [`Outgoing`] runs that race, the same for every
//! protocol, and tells the call's owner which of them happened. The protocol says only what it does on each:
//! send its cancel message or POST, wait a grace for an acknowledgment or a late answer, forget its table entry.
//!
//! # Behaviour
//!
//! - **The race.** Polled, an [`Outgoing`] resolves to the first [`Event`]: [`Answered`](Event::Answered) with
//!   what the answer future gave, or it gives up with [`ParentCancelled`](Event::ParentCancelled) (the token of
//!   [`parent`](Outgoing::parent)), [`Cancelled`](Event::Cancelled) (the token of
//!   [`cancel_on`](Outgoing::cancel_on)) or [`TimedOut`](Event::TimedOut) ([`timeout`](Outgoing::timeout)). Each
//!   poll looks at them in that order, so an answer that is there wins over a token or a timeout that fired at the
//!   same moment, and a parent's cancel over the caller's.
//! - **The timeout** runs from the moment the `Outgoing` is made. A cap ([`not_after`](Outgoing::not_after), the
//!   deadline of the request the call was made for) bounds it, and stands without one. Fixed, it passes once. Idle
//!   ([`reset_on_activity`](Outgoing::reset_on_activity)), each activity the owner reports
//!   ([`Owner::last_activity`]) pushes it back to a full timeout from that activity, never past the maximum from
//!   the start. The activity is read only when the sleep wakes: reporting it costs the call nothing.
//! - **After an answer** the call has ended: dropping it tells the owner nothing (whoever delivered the answer took
//!   it out of the owner's table).
//! - **After giving up** the call races no more. The owner does what its protocol does (sends its cancel), then
//!   either [`disarm`](Outgoing::disarm)s the call (it has forgotten its table entry itself) or lets it wait on:
//!   polled again, the call waits for the answer alone ([`poll_answer`](Outgoing::poll_answer) gives it bare),
//!   for as long as the owner polls it (within a grace, when the owner wraps it in one).
//! - **Dropped** before it ended (answered or disarmed), it calls [`Owner::dropped`] once, with the [`Stage`] it
//!   was at: [`Waiting`](Stage::Waiting) (nothing has happened yet: the caller went away) or
//!   [`GaveUp`](Stage::GaveUp).
//! - **Cost.** No task; a box for each token and one for the timeout's sleep, made only when set. The
//!   `Outgoing` is `Unpin` when its answer future and owner are.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use tokio::sync::oneshot;
//! use tokio_util::sync::CancellationToken;
//! use tower_cancel::outgoing::{Event, Outgoing, Stage};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
//! // A call whose answer comes through a channel. Its owner here only logs; a protocol's would send its cancel
//! // and take the call out of its table.
//! let owner = |stage: Stage| println!("the caller went away ({stage:?}): cancel the call");
//! let (answer, answered) = oneshot::channel();
//! let stop = CancellationToken::new();
//! let call = Outgoing::new(answered, owner)
//!     .cancel_on(stop.clone())
//!     .timeout(Duration::from_secs(30));
//! answer.send("done").unwrap();
//! assert!(matches!(call.await, Event::Answered(Ok("done"))));
//!
//! // No answer in time: the timeout wins, and the protocol does what it does about it.
//! let (_answer, answered) = oneshot::channel::<&str>();
//! let mut call = Outgoing::new(answered, owner).timeout(Duration::from_secs(30));
//! match (&mut call).await {
//!     Event::TimedOut => {
//!         // Send the cancel, forget the call: dropping it then tells the owner nothing.
//!         call.disarm();
//!     }
//!     _ => unreachable!("nothing else happens"),
//! }
//! # }
//! ```

mod timer;

use std::{
    fmt,
    future::Future,
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use self::timer::Timeout;

/// What ended an [`Outgoing`]'s race.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event<T> {
    /// The answer came: what the answer future gave. The call has ended.
    Answered(T),
    /// The parent's token ([`Outgoing::parent`]) fired first.
    ParentCancelled,
    /// The caller's token ([`Outgoing::cancel_on`]) fired first.
    Cancelled,
    /// The timeout ([`Outgoing::timeout`]) passed first.
    TimedOut,
}

/// How far an [`Outgoing`] had come when it was dropped before it ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Still racing: no answer, no token, no timeout yet. Its caller went away.
    Waiting,
    /// It had given up (a token, the timeout), and the owner neither had its answer nor disarmed it.
    GaveUp,
}

/// The protocol's side of an [`Outgoing`] call: what it does when the call is dropped unfinished, and what counts
/// as the call's activity.
///
/// A closure `FnMut(Stage)` is an owner without activity.
pub trait Owner {
    /// The call was dropped before it ended, at `stage`: typically, at [`Stage::Waiting`] send the protocol's cancel
    /// and forget the call, at [`Stage::GaveUp`] only forget it. Called once, from the call's `drop`, before the
    /// answer future is dropped; it must not block.
    fn dropped(&mut self, stage: Stage);

    /// When the call last showed activity (the other side's last progress report for it), if it did: an idle
    /// timeout ([`Outgoing::reset_on_activity`]) is pushed back to a full timeout from then. Read when the
    /// timeout's sleep wakes. `None` by default.
    fn last_activity(&self) -> Option<Instant> {
        None
    }
}

impl<F: FnMut(Stage)> Owner for F {
    fn dropped(&mut self, stage: Stage) {
        self(stage)
    }
}

/// An outgoing call waiting for its answer `A`, raced against its tokens, its timeout and its own drop, whose owner
/// `O` is told how it ended. See the [module docs](self).
#[must_use = "an Outgoing does nothing unless polled; dropped, it tells its owner the caller went away"]
pub struct Outgoing<A, O: Owner> {
    answer: A,
    parent: Option<Pin<Box<WaitForCancellationFutureOwned>>>,
    caller: Option<Pin<Box<WaitForCancellationFutureOwned>>>,
    timeout: Timeout,
    phase: Phase,
    owner: O,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Racing,
    GaveUp,
    // Answered, or disarmed by its owner: nothing left to tell.
    Ended,
}

impl<A, O: Owner> Outgoing<A, O> {
    /// A call waiting for `answer`, owned by `owner`: no token and no timeout yet. Its timeout, if one is set, runs
    /// from now.
    pub fn new(answer: A, owner: O) -> Self {
        Self {
            answer,
            parent: None,
            caller: None,
            timeout: Timeout::new(),
            phase: Phase::Racing,
            owner,
        }
    }

    /// Give up with [`Event::ParentCancelled`] when `token` fires: the request this call was made for was
    /// cancelled.
    pub fn parent(mut self, token: CancellationToken) -> Self {
        self.parent = Some(Box::pin(token.cancelled_owned()));
        self
    }

    /// Give up with [`Event::Cancelled`] when `token` fires: the caller cancelled the call.
    pub fn cancel_on(mut self, token: CancellationToken) -> Self {
        self.caller = Some(Box::pin(token.cancelled_owned()));
        self
    }

    /// Give up with [`Event::TimedOut`] `timeout` after the call was made. A duration too large to add is a
    /// moment 30 years away.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout.set(timeout);
        self
    }

    /// Give up with [`Event::TimedOut`] at `at` at the latest, whatever the timeout (set before or after, or
    /// none): a call made for a request with a deadline never outlives it. Several caps: the earliest counts.
    pub fn not_after(mut self, at: Instant) -> Self {
        self.timeout.cap(at);
        self
    }

    /// No timeout: the call waits for its answer, a token or its drop (undoes [`timeout`](Self::timeout); a
    /// cap of [`not_after`](Self::not_after) stays).
    pub fn no_timeout(mut self) -> Self {
        self.timeout.clear();
        self
    }

    /// Make the timeout an idle one: each activity of the call ([`Owner::last_activity`]) pushes it back to a full
    /// timeout from then, but the call never runs longer than `max_total` in all (never less than the timeout
    /// either). Needs a [`timeout`](Self::timeout), set before or after.
    pub fn reset_on_activity(mut self, max_total: Duration) -> Self {
        self.timeout.set_max_total(max_total);
        self
    }

    /// The call's owner.
    pub fn owner(&self) -> &O {
        &self.owner
    }

    /// The call's owner, to change.
    pub fn owner_mut(&mut self) -> &mut O {
        &mut self.owner
    }

    /// When the call times out as its deadline stands now (an idle one moves), if it has a timeout.
    pub fn deadline(&self) -> Option<Instant> {
        self.timeout.at()
    }

    /// Whether the call has ended: it was answered, or disarmed.
    pub fn is_ended(&self) -> bool {
        self.phase == Phase::Ended
    }

    /// End the call without its answer: the owner has done what its end needs (the call is out of its table), so
    /// dropping the call tells it nothing. It must not be polled after.
    pub fn disarm(&mut self) {
        self.phase = Phase::Ended;
    }
}

impl<A: Future + Unpin, O: Owner> Outgoing<A, O> {
    /// Wait for the answer alone, whatever the call's stage: what a call does after giving up, when its protocol
    /// waits for a late answer (within a grace of the owner's, if any). The answer ends the call.
    ///
    /// # Panics
    ///
    /// When the call has ended (answered, or disarmed).
    pub fn poll_answer(&mut self, cx: &mut Context<'_>) -> Poll<A::Output> {
        assert!(!self.is_ended(), "an `Outgoing` polled after it ended");
        let answer = Pin::new(&mut self.answer).poll(cx);
        if answer.is_ready() {
            self.phase = Phase::Ended;
        }
        answer
    }
}

impl<A: Future + Unpin, O: Owner> Future for Outgoing<A, O> {
    type Output = Event<A::Output>;

    /// # Panics
    ///
    /// When the call has ended (answered, or disarmed).
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        if let Poll::Ready(answer) = this.poll_answer(cx) {
            return Poll::Ready(Event::Answered(answer));
        }
        if this.phase == Phase::GaveUp {
            return Poll::Pending;
        }
        let event = if fired(&mut this.parent, cx) {
            Event::ParentCancelled
        } else if fired(&mut this.caller, cx) {
            Event::Cancelled
        } else if this.timeout.passed(cx, || this.owner.last_activity()) {
            Event::TimedOut
        } else {
            return Poll::Pending;
        };
        // The answer's waker is registered (polled above): an owner that lets the call wait on may return
        // `Pending` at once.
        this.phase = Phase::GaveUp;
        Poll::Ready(event)
    }
}

/// Whether `token` (if any) has fired; registers the waker otherwise.
fn fired(
    token: &mut Option<Pin<Box<WaitForCancellationFutureOwned>>>,
    cx: &mut Context<'_>,
) -> bool {
    token
        .as_mut()
        .is_some_and(|token| token.as_mut().poll(cx).is_ready())
}

// The owner is never pinned (only `&O` and `&mut O` are handed out), nor the boxed tokens and sleep: the answer is
// all that pinning the call could pin.
impl<A: Unpin, O: Owner> Unpin for Outgoing<A, O> {}

impl<A, O: Owner> Drop for Outgoing<A, O> {
    fn drop(&mut self) {
        let stage = match self.phase {
            Phase::Racing => Stage::Waiting,
            Phase::GaveUp => Stage::GaveUp,
            Phase::Ended => return,
        };
        self.owner.dropped(stage);
    }
}

impl<A, O: Owner> fmt::Debug for Outgoing<A, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Outgoing")
            .field("phase", &self.phase)
            .field("parent", &self.parent.is_some())
            .field("cancel_on", &self.caller.is_some())
            .field("deadline", &self.deadline())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests;
