//! How many sessions an app has open, against its limit. A session's slot is taken before its WebSocket is
//! accepted, so that an upgrade past the limit is refused (503) instead of opened, and two upgrades racing for
//! the last slot cannot both have it.

use std::sync::{
    atomic::{AtomicUsize, Ordering},
    Arc,
};

/// One open session (or one being opened), until dropped.
#[derive(Debug)]
pub(super) struct Slot(Arc<AtomicUsize>);

/// A slot, if fewer than `max` are taken from `open`.
pub(super) fn take(open: &Arc<AtomicUsize>, max: usize) -> Option<Slot> {
    open.fetch_update(Ordering::AcqRel, Ordering::Acquire, |now| {
        (now < max).then_some(now + 1)
    })
    .ok()?;
    Some(Slot(open.clone()))
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_slot_past_the_limit_until_one_is_let_go() {
        let open = Arc::new(AtomicUsize::new(0));
        let first = take(&open, 2).unwrap();
        let _second = take(&open, 2).unwrap();
        assert!(take(&open, 2).is_none());
        drop(first);
        let third = take(&open, 2);
        assert!(third.is_some());
        assert_eq!(open.load(Ordering::Acquire), 2);
        drop(third);
        assert_eq!(open.load(Ordering::Acquire), 1);
    }
}
