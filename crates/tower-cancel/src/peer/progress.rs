use std::{
    any::Any,
    panic::{catch_unwind, AssertUnwindSafe},
    sync::Mutex,
};

use tokio::time::Instant;

use crate::{message::Id, progress_update::ProgressUpdate};

/// Where the peer's progress reports for one call go: the caller's callback, and the time of the last one (which
/// pushes back the call's idle timeout).
pub(super) struct ProgressSlot {
    on_progress: Box<dyn Fn(ProgressUpdate) + Send + Sync>,
    last: Mutex<Option<Instant>>,
}

impl ProgressSlot {
    pub(super) fn new(on_progress: impl Fn(ProgressUpdate) + Send + Sync + 'static) -> Self {
        Self {
            on_progress: Box::new(on_progress),
            last: Mutex::new(None),
        }
    }

    /// When the last report arrived, if one did.
    pub(super) fn last(&self) -> Option<Instant> {
        *self.last.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A report for call `id`: counts as activity, and goes to the caller's callback. The callback runs on the
    /// transport's task, so a panic in it is caught and logged: unwinding further would end the connection, and
    /// every other call on it, for one caller's bug.
    pub(super) fn report(&self, id: &Id, update: ProgressUpdate) {
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| (self.on_progress)(update))) {
            tracing::error!(
                %id,
                panic = panic_message(&*panic),
                "a progress callback panicked; the report is dropped, the call goes on"
            );
        }
    }
}

/// The text a panic was raised with, where it has one.
fn panic_message(panic: &(dyn Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(not a string)")
}
