//! The memory of finished requests: how each of the last ones ended, kept for dialects that acknowledge a cancel
//! (ABP's `cancel-result`), so that a cancel arriving after its request ended is answered "already completed" or
//! "already cancelled" rather than "not found".
//!
//! # Bounds
//!
//! Bounded in entries and in bytes, like the early-cancel memory: an entry costs its id's heap bytes plus
//! [`ENTRY_OVERHEAD`]; the oldest entries are forgotten first, and an id larger than the whole budget is not kept.
//! A forgotten request is answered as an unknown one. Unlike the early-cancel memory, this one takes an entry for
//! every request that ends, so forgetting is O(1): the order is a queue beside the map, each queue slot naming the
//! map entry by its sequence number (a slot whose entry was replaced or taken is skipped when it reaches the front).

use std::collections::{HashMap, VecDeque};

use crate::message::Id;

/// The bytes an entry costs besides its id's text: the map's key and value, and the queue's slot with its copy of
/// the key.
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
    // Keyed by id alone: in a scope shared by connections, the last request of an id to end is the one kept.
    entries: HashMap<Id, Finished>,
    order: VecDeque<(Id, u64)>,
    next_seq: u64,
    bytes: usize,
    max_entries: usize,
    max_bytes: usize,
}

#[derive(Debug)]
struct Finished {
    conn: u64,
    seq: u64,
    bytes: usize,
    ended: Ended,
}

impl FinishedRequests {
    pub(super) fn new(max_entries: usize, max_bytes: usize) -> Self {
        Self {
            entries: HashMap::new(),
            order: VecDeque::new(),
            next_seq: 0,
            bytes: 0,
            max_entries,
            max_bytes,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Remember that request `id` of connection `conn` ended as `ended`, replacing what was remembered of an
    /// earlier request with that id (of any connection).
    pub(super) fn remember(&mut self, conn: u64, id: &Id, ended: Ended) {
        let bytes = cost(id);
        if self.max_entries == 0 || bytes > self.max_bytes {
            return;
        }
        self.forget(id);
        while self.entries.len() >= self.max_entries || self.bytes + bytes > self.max_bytes {
            if !self.forget_oldest() {
                break;
            }
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.bytes += bytes;
        let finished = Finished {
            conn,
            seq,
            bytes,
            ended,
        };
        self.entries.insert(id.clone(), finished);
        self.order.push_back((id.clone(), seq));
    }

    /// How request `id` of connection `conn` ended (of any connection, for `WHOLE_SCOPE`), if it is remembered.
    pub(super) fn get(&self, conn: u64, id: &Id) -> Option<Ended> {
        self.entries
            .get(id)
            .filter(|finished| conn == super::WHOLE_SCOPE || finished.conn == conn)
            .map(|finished| finished.ended)
    }

    /// Forget request `id` (a new request with that id is in flight).
    pub(super) fn forget(&mut self, id: &Id) {
        if let Some(finished) = self.entries.remove(id) {
            self.bytes -= finished.bytes;
        }
        // Its queue slot stays until it reaches the front, where it is skipped.
        self.compact();
    }

    fn forget_oldest(&mut self) -> bool {
        while let Some((key, seq)) = self.order.pop_front() {
            if self.entries.get(&key).is_some_and(|f| f.seq == seq) {
                if let Some(finished) = self.entries.remove(&key) {
                    self.bytes -= finished.bytes;
                }
                return true;
            }
        }
        false
    }

    /// Drop stale queue slots once they outnumber the live entries, so that a peer reusing ids cannot grow the
    /// queue without bound.
    fn compact(&mut self) {
        if self.order.len() > 2 * self.entries.len() + 16 {
            let entries = &self.entries;
            self.order
                .retain(|(key, seq)| entries.get(key).is_some_and(|f| f.seq == *seq));
        }
    }
}

fn cost(id: &Id) -> usize {
    let id_bytes = match id {
        Id::Number(_) => 0,
        // Twice: the map's key and the queue's copy.
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
        assert!(finished.order.len() <= 2 * finished.len() + 17);
        finished.forget(&Id::from("same"));
        assert_eq!((finished.len(), finished.bytes()), (0, 0));
    }
}
