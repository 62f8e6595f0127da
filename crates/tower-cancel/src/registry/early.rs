//! The memory of early cancels: cancels for ids that are not in flight, kept so that a request arriving after its
//! own cancel starts out cancelled.
//!
//! # Bounds
//!
//! A [`Window`] bounded twice: in entries and in bytes. An entry costs its id's and its reason's heap bytes plus a
//! fixed overhead ([`ENTRY_OVERHEAD`]), so a peer that sends cancels with ids as long as a frame allows pins at
//! most the byte budget, not the entry count times the frame size. When either bound would be passed, the oldest
//! entries are forgotten first (in O(1) each); an entry larger than the whole budget is not remembered at all.
//!
//! # Invariants
//!
//! - One entry per (connection, id): a cancel already remembered changes nothing, neither its reason nor its age.
//! - A request takes the cancel of its own connection first, then the scope's (connection 0).
//! - A memory of no entries is off: it keeps nothing, and what it does not keep is not counted as dropped (the
//!   scope of a dialect whose cancels cannot overtake their requests, ABP's, keeps no early cancels at all).

use crate::{message::Id, reason::CancelReason, window::Window};

/// The bytes an entry is counted besides its id's and its reason's text: its slot in the window and its key's
/// place in the window's index.
pub(crate) const ENTRY_OVERHEAD: usize = 96;

/// Cancels for ids not in flight, keyed by the connection they came from (0: the whole scope) and the id.
#[derive(Debug)]
pub(super) struct EarlyCancels {
    window: Window<(u64, Id), CancelReason>,
    // No entries at all: a cancel for an id not in flight is for no request, and is forgotten.
    off: bool,
}

/// What [`EarlyCancels::remember`] did.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Remembered {
    /// Kept; `dropped` older entries were forgotten to make room.
    Kept { dropped: u64 },
    /// Already remembered: nothing changed.
    Again,
    /// Not kept: the entry alone is larger than the budget.
    TooLarge,
    /// Not kept: the memory is off (no entries).
    Off,
}

impl EarlyCancels {
    pub(super) fn new(max_entries: usize, max_bytes: usize) -> Self {
        Self {
            window: Window::new(max_entries, max_bytes).per_key(1),
            off: max_entries == 0,
        }
    }

    /// Whether this memory keeps nothing.
    pub(super) fn is_off(&self) -> bool {
        self.off
    }

    pub(super) fn len(&self) -> usize {
        self.window.len()
    }

    pub(super) fn bytes(&self) -> usize {
        self.window.bytes()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.window.is_empty()
    }

    pub(super) fn remember(&mut self, conn: u64, id: &Id, reason: CancelReason) -> Remembered {
        if self.off {
            return Remembered::Off;
        }
        let cost = cost(id, &reason);
        // Checked before the id is copied: an id too large to keep is not copied for nothing.
        if !self.window.admits(cost) {
            return Remembered::TooLarge;
        }
        let key = (conn, id.clone());
        if self.window.contains(&key) {
            return Remembered::Again;
        }
        match self.window.remember(key, reason, cost) {
            Some(dropped) => Remembered::Kept { dropped },
            None => Remembered::TooLarge,
        }
    }

    /// Take the cancel remembered for `id` on connection `conn`, or else for `id` in the whole scope.
    pub(super) fn take(&mut self, conn: u64, id: Id) -> Option<CancelReason> {
        let mut key = (conn, id);
        let found = self.window.take(&key);
        if found.is_some() || conn == 0 {
            return found;
        }
        key.0 = 0;
        self.window.take(&key)
    }
}

fn cost(id: &Id, reason: &CancelReason) -> usize {
    let id_bytes = match id {
        Id::Number(_) => 0,
        Id::String(s) => s.len(),
    };
    ENTRY_OVERHEAD + id_bytes + reason.text().map_or(0, str::len)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(text: &str) -> CancelReason {
        CancelReason::peer(Some(text.to_owned()))
    }

    #[test]
    fn the_oldest_is_forgotten_first_when_the_entries_run_out() {
        let mut early = EarlyCancels::new(2, usize::MAX);
        for id in 1..=3 {
            early.remember(1, &Id::from(id), CancelReason::peer(None));
        }
        assert_eq!(early.len(), 2);
        assert_eq!(early.take(1, Id::from(1)), None);
        assert!(early.take(1, Id::from(3)).is_some());
    }

    #[test]
    fn the_byte_budget_bounds_what_long_ids_and_reasons_pin() {
        let budget = 4 * 1024;
        let mut early = EarlyCancels::new(1024, budget);
        let long = "x".repeat(1000);
        for n in 0..64 {
            early.remember(1, &Id::from(format!("{n}{long}")), peer("r"));
            assert!(early.bytes() <= budget, "{} bytes", early.bytes());
        }
        assert!(early.len() < 5, "{} kept", early.len());
        // The newest are the ones kept.
        assert!(early.take(1, Id::from(format!("63{long}"))).is_some());
    }

    #[test]
    fn an_entry_larger_than_the_budget_is_not_kept() {
        let mut early = EarlyCancels::new(1024, 200);
        assert_eq!(
            early.remember(1, &Id::from("y".repeat(500)), peer("r")),
            Remembered::TooLarge
        );
        assert!(early.is_empty());
        assert_eq!(early.bytes(), 0);
    }

    #[test]
    fn a_scope_wide_cancel_reaches_any_connection_and_a_connections_only_its_own() {
        let mut early = EarlyCancels::new(16, usize::MAX);
        early.remember(0, &Id::from(5), CancelReason::Shutdown);
        early.remember(1, &Id::from(6), CancelReason::Timeout);
        assert_eq!(early.take(2, Id::from(6)), None, "connection 1's cancel");
        assert_eq!(early.take(2, Id::from(5)), Some(CancelReason::Shutdown));
        assert_eq!(early.take(1, Id::from(6)), Some(CancelReason::Timeout));
        assert_eq!(early.bytes(), 0);
    }

    #[test]
    fn a_memory_of_no_entries_keeps_nothing_and_says_it_is_off() {
        let mut early = EarlyCancels::new(0, usize::MAX);
        assert!(early.is_off());
        assert_eq!(
            early.remember(1, &Id::from(1), CancelReason::peer(None)),
            Remembered::Off
        );
        assert!(early.is_empty());
        assert_eq!(early.take(1, Id::from(1)), None);
    }

    #[test]
    fn remembering_twice_keeps_one_entry() {
        let mut early = EarlyCancels::new(16, usize::MAX);
        assert_eq!(
            early.remember(1, &Id::from(1), CancelReason::Timeout),
            Remembered::Kept { dropped: 0 }
        );
        assert_eq!(
            early.remember(1, &Id::from(1), CancelReason::Timeout),
            Remembered::Again
        );
        assert_eq!(early.len(), 1);
    }
}
