//! Loom stand-ins for the two types loom has no mock of, with the same API as the ones the crate uses.

use std::{fmt, sync::atomic::Ordering, task::Waker};

use loom::sync::atomic::AtomicBool;

/// `std::sync::OnceLock` as loom sees it: the value is kept in a real `OnceLock`, but whether another thread can
/// see it yet is a loom atomic, stored with `Release` once the value is in and loaded with `Acquire`, as the real
/// one's state is. Loom can then run a thread that misses a value another thread has just set, which is exactly
/// the miss the lifecycle's fence pair (`Lifecycle::token`, `Lifecycle::cancel`) must make harmless.
pub(crate) struct OnceLock<T> {
    published: AtomicBool,
    value: std::sync::OnceLock<T>,
}

impl<T> OnceLock<T> {
    pub(crate) fn new() -> Self {
        Self {
            published: AtomicBool::new(false),
            value: std::sync::OnceLock::new(),
        }
    }

    pub(crate) fn get(&self) -> Option<&T> {
        if self.published.load(Ordering::Acquire) {
            self.value.get()
        } else {
            None
        }
    }

    pub(crate) fn get_or_init(&self, init: impl FnOnce() -> T) -> &T {
        let value = self.value.get_or_init(init);
        self.published.store(true, Ordering::Release);
        value
    }

    pub(crate) fn set(&self, value: T) -> Result<(), T> {
        self.value.set(value)?;
        self.published.store(true, Ordering::Release);
        Ok(())
    }
}

impl<T: fmt::Debug> fmt::Debug for OnceLock<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("OnceLock").field(&self.value.get()).finish()
    }
}

/// `futures`' `AtomicWaker` API over loom's mock.
#[derive(Debug)]
pub(crate) struct AtomicWaker(loom::future::AtomicWaker);

impl AtomicWaker {
    pub(crate) fn new() -> Self {
        Self(loom::future::AtomicWaker::new())
    }

    pub(crate) fn register(&self, waker: &Waker) {
        self.0.register_by_ref(waker);
    }

    pub(crate) fn wake(&self) {
        self.0.wake();
    }
}
