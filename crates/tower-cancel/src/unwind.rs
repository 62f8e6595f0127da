//! The safety net for handlers: the one place where a panic in a handler's code is caught, whether it comes from
//! its `call`, from a poll of its future or from the future's destructor.
//!
//! A panic caught here is handed back as its payload; the caller decides what it means. The cancel layer makes it
//! the request's outcome, [`Panicked`](crate::Panicked), answered -32603 `handler panicked`; a transport that
//! serves a service without a cancel layer answers it the same way, and goes on serving the connection's other
//! requests.
//!
//! Everything here asserts unwind safety on the handler's behalf: a future that panicked is never polled again (it
//! is dropped, under the net as well), and whatever it shared with other requests may be left half-updated, as
//! after any failed request: a server goes on after a panicking handler, as a web server does. A panic in code
//! that is not a handler's (a user's callback, such as a progress callback) is caught where that code is called.
//!
//! # Example
//!
//! ```
//! use std::pin::pin;
//! use tower_cancel::unwind::{self, CatchUnwind};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! // A panic in the handler's future becomes an error, with the panic's payload.
//! let handler = async { panic!("boom") };
//! let outcome: Result<(), unwind::Payload> = CatchUnwind::new(handler).await;
//! assert_eq!(outcome.unwrap_err().downcast_ref::<&str>(), Some(&"boom"));
//!
//! // A handler's future the caller lets go of, dropped where it is pinned: a panic in its destructor comes back.
//! struct Handler;
//! impl Drop for Handler {
//!     fn drop(&mut self) {
//!         panic!("in drop")
//!     }
//! }
//! let mut place = pin!(Some(Handler));
//! assert!(unwind::set(place.as_mut(), None).is_err());
//! assert!(place.is_none());
//!
//! // And a panic in a handler's `call`, before there is a future.
//! let called = unwind::call(|| -> u32 { panic!("no future") });
//! assert!(called.is_err());
//! # }
//! ```

use std::{
    any::Any,
    future::Future,
    panic::{self, AssertUnwindSafe},
    pin::Pin,
    task::{Context, Poll},
};

use pin_project_lite::pin_project;

/// What a caught panic carried: the value given to `panic!` (a `&'static str` or a `String` for a message).
pub type Payload = Box<dyn Any + Send + 'static>;

/// Run `f` under the net: a handler's `call` (which may panic before it returns a future), or any other step of a
/// handler's code (the cancel layer polls the handler through a state machine that is not a `Future` itself).
pub fn call<R>(f: impl FnOnce() -> R) -> Result<R, Payload> {
    panic::catch_unwind(AssertUnwindSafe(f))
}

/// Put `value` in `place`, dropping what it held (a handler's future the caller lets go of) under the net: a
/// panic in that destructor comes back as an error. `place` holds `value` afterwards either way: an assignment
/// whose drop of the old value panics still writes the new one.
pub fn set<T>(mut place: Pin<&mut T>, value: T) -> Result<(), Payload> {
    call(move || place.set(value))
}

pin_project! {
    /// A handler's future under the net: it resolves to `Err` with the payload of a panic in a poll of the
    /// future, and drops the future then (under the net too: a panic in its destructor is logged and goes no
    /// further).
    #[derive(Debug)]
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    pub struct CatchUnwind<F> {
        // `None` once the future panicked: dropped then, never polled again.
        #[pin]
        future: Option<F>,
    }
}

impl<F> CatchUnwind<F> {
    /// `future` under the net.
    pub fn new(future: F) -> Self {
        Self {
            future: Some(future),
        }
    }
}

impl<F: Future> Future for CatchUnwind<F> {
    type Output = Result<F::Output, Payload>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut slot = self.project().future;
        let future = slot
            .as_mut()
            .as_pin_mut()
            .expect("CatchUnwind polled after it resolved to a panic");
        match call(|| future.poll(cx)) {
            Ok(Poll::Ready(output)) => Poll::Ready(Ok(output)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(payload) => {
                // The future is left as it was when it panicked: it goes now, and its destructor may panic again.
                if set(slot, None).is_err() {
                    tracing::error!("the handler's future panicked again while it was dropped");
                }
                Poll::Ready(Err(payload))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::{
        pin::pin,
        sync::{
            atomic::{AtomicBool, Ordering},
            Arc,
        },
    };

    use futures_util::task::noop_waker_ref;

    use super::*;

    /// Sets its flag when dropped, and then panics if `panics`.
    struct Guard {
        dropped: Arc<AtomicBool>,
        panics: bool,
    }

    impl Drop for Guard {
        fn drop(&mut self) {
            self.dropped.store(true, Ordering::SeqCst);
            if self.panics {
                panic!("in drop");
            }
        }
    }

    /// A future that panics when polled. A struct, not an `async` block: the unwinding of a panic in a poll
    /// drops an `async` block's locals itself, and the test is about who drops the future.
    struct Panics {
        _guard: Guard,
    }

    impl Future for Panics {
        type Output = ();

        fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
            panic!("in poll");
        }
    }

    fn panicking(panics_in_drop: bool) -> (Panics, Arc<AtomicBool>) {
        let dropped = Arc::new(AtomicBool::new(false));
        let guard = Guard {
            dropped: dropped.clone(),
            panics: panics_in_drop,
        };
        (Panics { _guard: guard }, dropped)
    }

    fn message(payload: &Payload) -> Option<&str> {
        payload.downcast_ref::<&str>().copied()
    }

    fn poll_once<F: Future>(future: Pin<&mut F>) -> Poll<F::Output> {
        future.poll(&mut Context::from_waker(noop_waker_ref()))
    }

    #[test]
    fn a_panic_in_a_poll_is_an_error_and_the_future_is_dropped_then() {
        let (future, dropped) = panicking(false);
        let mut caught = pin!(CatchUnwind::new(future));
        let Poll::Ready(Err(payload)) = poll_once(caught.as_mut()) else {
            panic!("the panic was not caught");
        };
        assert_eq!(message(&payload), Some("in poll"));
        // `caught` is still here: the future inside it went with its panic.
        assert!(dropped.load(Ordering::SeqCst));
    }

    #[test]
    fn a_panic_in_the_destructor_after_a_panic_in_a_poll_goes_no_further() {
        let (future, dropped) = panicking(true);
        let mut caught = pin!(CatchUnwind::new(future));
        let Poll::Ready(Err(payload)) = poll_once(caught.as_mut()) else {
            panic!("the panic was not caught");
        };
        assert_eq!(message(&payload), Some("in poll"));
        assert!(dropped.load(Ordering::SeqCst));
    }

    #[test]
    fn an_answer_passes_through() {
        let mut answer = pin!(CatchUnwind::new(async { 7 }));
        assert!(matches!(poll_once(answer.as_mut()), Poll::Ready(Ok(7))));
        let mut pending = pin!(CatchUnwind::new(std::future::pending::<()>()));
        assert!(poll_once(pending.as_mut()).is_pending());
    }

    #[test]
    fn set_drops_the_old_value_under_the_net_and_writes_the_new_one() {
        let dropped = Arc::new(AtomicBool::new(false));
        let guard = Guard {
            dropped: dropped.clone(),
            panics: true,
        };
        let mut place = pin!(Some(guard));
        let outcome = set(place.as_mut(), None);
        assert_eq!(message(&outcome.unwrap_err()), Some("in drop"));
        assert!(dropped.load(Ordering::SeqCst));
        assert!(place.is_none());
    }

    #[test]
    fn call_hands_back_the_value_or_the_panic() {
        assert_eq!(call(|| 7).ok(), Some(7));
        let payload = call(|| -> u32 { panic!("in call") }).unwrap_err();
        assert_eq!(message(&payload), Some("in call"));
    }
}
