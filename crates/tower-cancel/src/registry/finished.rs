//! The memory of finished requests: how each of the last ones ended, kept for dialects that acknowledge a cancel
//! (ABP's `cancel-result`), so that a cancel arriving after its request ended is answered "already completed" or
//! "already cancelled" rather than "not found".
//!
//! # Bounds
//!
//! A [`Window`] bounded in entries and in bytes, like the early-cancel memory: an entry costs its id's heap bytes
//! (counted twice) plus [`ENTRY_OVERHEAD`]; the oldest entries are forgotten first, and an id larger than the whole
//! budget is not kept. A forgotten request is answered as an unknown one. Unlike the early-cancel memory, this one
//! takes an entry for every request that ends, which the window's O(1) forgetting of its oldest makes cheap.
//!
//! # Invariants
//!
//! - One entry per id, whatever its connection: in a scope shared by connections, the last request of an id to
//!   end is the one kept, as the newest entry.
//! - A request in flight is not remembered as finished: registering it forgets its id here.

use crate::{message::Id, window::Window};

/// The bytes an entry is counted besides its id's text: its slot in the window and its key's place in the
/// window's index.
pub(crate) const ENTRY_OVERHEAD: usize = 128;

/// How a finished request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Ended {
    /// Its handler's outcome was the reply.
    Completed,
    /// A cancel won, from any source.
    Cancelled,
}

#[derive(Debug)]
pub(super) struct FinishedRequests {
    window: Window<Id, Finished>,
}

#[derive(Debug)]
struct Finished {
    conn: u64,
    ended: Ended,
}

impl FinishedRequests {
    pub(super) fn new(max_entries: usize, max_bytes: usize) -> Self {
        Self {
            // One entry per id: remembering an id again replaces the entry, and makes it the newest.
            window: Window::new(max_entries, max_bytes).per_key(1),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.window.len()
    }

    pub(super) fn bytes(&self) -> usize {
        self.window.bytes()
    }

    /// Remember that request `id` of connection `conn` ended as `ended`, replacing what was remembered of an
    /// earlier request with that id (of any connection).
    pub(super) fn remember(&mut self, conn: u64, id: &Id, ended: Ended) {
        // What was forgotten to make room is not counted: a forgotten request is answered as an unknown one.
        let _dropped = self
            .window
            .remember(id.clone(), Finished { conn, ended }, cost(id));
    }

    /// How request `id` of connection `conn` ended (of any connection, for `WHOLE_SCOPE`), if it is remembered.
    pub(super) fn get(&self, conn: u64, id: &Id) -> Option<Ended> {
        self.window
            .get(id)
            .filter(|finished| conn == super::WHOLE_SCOPE || finished.conn == conn)
            .map(|finished| finished.ended)
    }

    /// Forget request `id` (a new request with that id is in flight).
    pub(super) fn forget(&mut self, id: &Id) {
        self.window.forget(id);
    }
}

fn cost(id: &Id) -> usize {
    let id_bytes = match id {
        Id::Number(_) => 0,
        // Twice, though the window holds one copy: the budgets in use (`DEFAULT_FINISHED_BYTES`, and those callers
        // pass) are sized on this count and `Stats::finished_bytes` reports it. An over-count errs on the safe side.
        Id::String(s) => 2 * s.len(),
    };
    ENTRY_OVERHEAD + id_bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_is_forgotten_first() {
        let mut finished = FinishedRequests::new(2, usize::MAX);
        finished.remember(1, &Id::from(1), Ended::Completed);
        finished.remember(1, &Id::from(2), Ended::Cancelled);
        finished.remember(1, &Id::from(3), Ended::Completed);
        assert_eq!(finished.len(), 2);
        assert_eq!(finished.get(1, &Id::from(1)), None);
        assert_eq!(finished.get(1, &Id::from(2)), Some(Ended::Cancelled));
        assert_eq!(finished.get(1, &Id::from(3)), Some(Ended::Completed));
        assert_eq!(finished.get(2, &Id::from(3)), None, "another connection's");
    }

    #[test]
    fn the_byte_budget_bounds_long_ids() {
        let budget = 8 * 1024;
        let mut finished = FinishedRequests::new(1024, budget);
        let long = "x".repeat(1000);
        for n in 0..64 {
            finished.remember(1, &Id::from(format!("{n}{long}")), Ended::Completed);
            assert!(finished.bytes() <= budget, "{} bytes", finished.bytes());
        }
        assert!(finished.len() <= 4, "{} kept", finished.len());
        assert!(finished.get(1, &Id::from(format!("63{long}"))).is_some());
        finished.remember(1, &Id::from("y".repeat(budget)), Ended::Completed);
        assert!(
            finished.bytes() <= budget,
            "an id over the budget is not kept"
        );
    }

    #[test]
    fn reusing_an_id_keeps_one_entry_and_the_queue_bounded() {
        let mut finished = FinishedRequests::new(8, usize::MAX);
        for _ in 0..1000 {
            finished.remember(1, &Id::from("same"), Ended::Completed);
        }
        finished.remember(1, &Id::from("same"), Ended::Cancelled);
        assert_eq!(finished.len(), 1);
        assert_eq!(finished.get(1, &Id::from("same")), Some(Ended::Cancelled));
        assert!(finished.window.slots() <= 2 * finished.len() + 17);
        finished.forget(&Id::from("same"));
        assert_eq!((finished.len(), finished.bytes()), (0, 0));
    }
}
