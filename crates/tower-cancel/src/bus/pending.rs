//! Remote cancels for scopes this replica has not made yet, kept until one is made under their key.
//!
//! # Bounds
//!
//! A [`Window`] keyed by the scope's key, bounded in entries and in bytes over all keys and in entries per key:
//! when a bound would be passed, the key's own oldest cancel goes first if the key is at its bound (a flood of
//! cancels for one scope cannot push out the others'), then the oldest overall. A cancel larger than the whole
//! budget is not kept.
//!
//! # Invariants
//!
//! - A key's cancels come back in the order they arrived, and taking them forgets them.

use super::RemoteCancel;
use crate::window::Window;

/// How many remote cancels a replica keeps for scopes it does not have, over all keys.
pub const PENDING_CAPACITY: usize = 4096;

/// How many bytes those may hold in all: their heap bytes (ids, keys, reasons) and 160 more each.
pub const PENDING_BYTES: usize = 1024 * 1024;

/// How many of them one key may hold: a flood of cancels for one scope cannot push out the others'.
pub const PENDING_PER_SCOPE: usize = 256;

/// What an entry costs besides its heap bytes: the cancel itself, its slot in the window and its key's place in
/// the window's index.
const ENTRY_OVERHEAD: usize = 160;

/// The window, by the key of the scope each cancel is for.
#[derive(Debug)]
pub(super) struct Pending {
    window: Window<String, RemoteCancel>,
}

impl Pending {
    pub(super) fn new(max_entries: usize, max_bytes: usize, max_per_scope: usize) -> Self {
        Self {
            window: Window::new(max_entries, max_bytes).per_key(max_per_scope),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.window.len()
    }

    #[cfg(test)]
    fn bytes(&self) -> usize {
        self.window.bytes()
    }

    /// Keep `cancel`. Returns how many older cancels were forgotten to make room (its key's oldest first when the
    /// key is at its own bound), or `None` if it is not kept at all (larger than the whole budget, or the window
    /// is off).
    pub(super) fn keep(&mut self, cancel: RemoteCancel) -> Option<u64> {
        let cost = cancel.heap_bytes() + ENTRY_OVERHEAD;
        self.window.remember(cancel.scope.clone(), cancel, cost)
    }

    /// Every cancel kept for `scope`, oldest first; the window forgets them.
    pub(super) fn take(&mut self, scope: &str) -> Vec<RemoteCancel> {
        self.window.take_all(scope)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{message::Id, reason::CancelReason};

    fn cancel(scope: &str, id: i64) -> RemoteCancel {
        RemoteCancel::new(scope, Id::Number(id), CancelReason::peer(None), "b")
    }

    fn ids(cancels: Vec<RemoteCancel>) -> Vec<Id> {
        cancels.into_iter().map(|c| c.id).collect()
    }

    #[test]
    fn a_key_gets_its_cancels_back_in_order_and_the_window_forgets_them() {
        let mut pending = Pending::new(16, PENDING_BYTES, 16);
        pending.keep(cancel("s", 1));
        pending.keep(cancel("t", 2));
        pending.keep(cancel("s", 3));
        assert_eq!(ids(pending.take("s")), vec![Id::Number(1), Id::Number(3)]);
        assert_eq!(pending.len(), 1);
        assert!(pending.take("s").is_empty());
        assert_eq!(ids(pending.take("t")), vec![Id::Number(2)]);
        assert_eq!((pending.len(), pending.bytes()), (0, 0));
    }

    #[test]
    fn the_oldest_overall_is_forgotten_first_when_full() {
        let mut pending = Pending::new(3, PENDING_BYTES, 3);
        for (scope, id) in [("s", 1), ("t", 2), ("s", 3)] {
            assert_eq!(pending.keep(cancel(scope, id)), Some(0));
        }
        assert_eq!(pending.keep(cancel("u", 4)), Some(1));
        assert_eq!(ids(pending.take("s")), vec![Id::Number(3)]);
        assert_eq!(ids(pending.take("t")), vec![Id::Number(2)]);
        assert_eq!(ids(pending.take("u")), vec![Id::Number(4)]);
    }

    #[test]
    fn one_key_cannot_push_out_the_others() {
        let mut pending = Pending::new(100, PENDING_BYTES, 2);
        pending.keep(cancel("quiet", 1));
        for id in 0..50 {
            pending.keep(cancel("flood", id));
        }
        assert_eq!(pending.len(), 3);
        assert_eq!(ids(pending.take("quiet")), vec![Id::Number(1)]);
        assert_eq!(
            ids(pending.take("flood")),
            vec![Id::Number(48), Id::Number(49)]
        );
    }

    #[test]
    fn bytes_are_bounded_and_a_huge_cancel_is_not_kept() {
        // Each of these costs its key (1 byte), its id (2) and the overhead: three fit.
        let budget = 3 * (ENTRY_OVERHEAD + 3);
        let mut pending = Pending::new(100, budget, 100);
        for id in 0..10 {
            let id = Id::String(format!("{id:02}"));
            pending.keep(RemoteCancel::new("s", id, CancelReason::Timeout, ""));
        }
        assert_eq!((pending.len(), pending.bytes()), (3, budget));
        let huge = Id::String("x".repeat(budget));
        assert_eq!(
            pending.keep(RemoteCancel::new("s", huge, CancelReason::Timeout, "")),
            None
        );
        assert_eq!(
            ids(pending.take("s")),
            vec![
                Id::String("07".into()),
                Id::String("08".into()),
                Id::String("09".into())
            ]
        );
    }

    #[test]
    fn the_order_queue_stays_bounded_when_keys_are_taken() {
        let mut pending = Pending::new(8, PENDING_BYTES, 8);
        for round in 0..10_000 {
            pending.keep(cancel(&format!("k{round}"), round));
            pending.take(&format!("k{round}"));
        }
        assert_eq!(pending.len(), 0);
        assert!(pending.window.slots() <= 64 + 1);
    }
}
