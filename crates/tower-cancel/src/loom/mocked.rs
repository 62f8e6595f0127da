//! Loom stand-ins for the types loom has no mock of, with the same API as the ones the crate uses.

use std::{fmt, sync::atomic::Ordering, task::Waker};

use loom::sync::{atomic::AtomicBool, Mutex};

/// `std::sync::OnceLock` as loom sees it: the value is kept in a real `OnceLock`, but whether another thread can
/// see it yet is a loom atomic, stored with `Release` once the value is in and loaded with `Acquire`, as the real
/// one's state is. Loom can then run a thread that misses a value another thread has just set, which is exactly
/// the miss the lifecycle's fence pair (`Lifecycle::token`, `Lifecycle::cancel`) must make harmless.
///
/// Setting it goes through a loom mutex: the real one makes a thread that loses the race to set it wait for the
/// winner and synchronize with it, and so must this one, or loom would see the loser touch loom atomics inside a
/// value (the lifecycle's rare parts) whose making it never synchronized with.
pub(crate) struct OnceLock<T> {
    published: AtomicBool,
    setting: Mutex<()>,
    value: std::sync::OnceLock<T>,
}

impl<T> OnceLock<T> {
    pub(crate) fn new() -> Self {
        Self {
            published: AtomicBool::new(false),
            setting: Mutex::new(()),
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
        if let Some(value) = self.get() {
            return value;
        }
        let _setting = self.setting.lock().unwrap();
        let value = self.value.get_or_init(init);
        self.published.store(true, Ordering::Release);
        value
    }

    pub(crate) fn set(&self, value: T) -> Result<(), T> {
        let _setting = self.setting.lock().unwrap();
        self.value.set(value)?;
        self.published.store(true, Ordering::Release);
        Ok(())
    }
}

impl<T> Default for OnceLock<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: fmt::Debug> fmt::Debug for OnceLock<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("OnceLock").field(&self.value.get()).finish()
    }
}

/// `once_cell`'s `race::OnceBox` as loom sees it: the mocked [`OnceLock`] of a box, so that loom can run a thread
/// that misses a box another thread has just made.
pub(crate) struct OnceBox<T>(OnceLock<Box<T>>);

impl<T> OnceBox<T> {
    pub(crate) fn new() -> Self {
        Self(OnceLock::new())
    }

    pub(crate) fn get(&self) -> Option<&T> {
        self.0.get().map(|boxed| &**boxed)
    }

    pub(crate) fn get_or_init(&self, init: impl FnOnce() -> Box<T>) -> &T {
        self.0.get_or_init(init)
    }
}

impl<T: fmt::Debug> fmt::Debug for OnceBox<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
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
