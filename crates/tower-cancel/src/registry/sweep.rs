//! A pass over the requests in flight that lets go of the registry's lock between chunks, for a close: collecting
//! a million requests in one pass under the lock takes tens of milliseconds (a cache miss each) that nothing else
//! of the scope can use the table for, and that the closing task cannot give back to its executor.
//!
//! The pass walks the table's buckets in order, a chunk per lock. Between two chunks, other connections of the
//! scope may insert and remove requests. A removal never moves an entry; an insert may, when the table grows or
//! rehashes in place, and then what the cursor has passed may lie ahead of it again, and what it has not, behind.
//! The table only does either on an insert that finds no room left ([`InFlight::room`]), so the pass notes the
//! room and the count of inserts at the end of each chunk, and starts over when more inserts than that room came
//! in between (requests it reaches twice are settled already, and passed over by their cancel). A request of the
//! closing connection inserted after the pass began is no concern of the pass: its connection refuses new
//! requests before the pass begins, so such a request starts out cancelled.
//!
//! A table moves its entries seldom (when it doubles, or when its removed entries' tombstones have used up its
//! room), and the pass notes the room anew after every chunk, so starting over is rare. Still, so that a scope
//! whose other connections insert without pause cannot keep a close from ending, a pass that had to start over
//! [`MAX_RESTARTS`] times takes the rest of the table in one chunk.

use super::in_flight::InFlight;
use crate::lifecycle::{Lifecycle, SharedLifecycle};

/// How many buckets one chunk visits at most: a few hundred microseconds of cache misses, however sparse the
/// closing connection's requests are in the table. Small in tests, so that they cover the resumed pass.
#[cfg(not(test))]
const CHUNK_BUCKETS: usize = 4096;
#[cfg(test)]
const CHUNK_BUCKETS: usize = 4;

/// How many times a pass starts over before it takes the rest of the table under one lock.
const MAX_RESTARTS: u32 = 4;

/// Where a pass over the table is, between two chunks.
#[derive(Debug, Default)]
pub(super) struct Sweep {
    // The next bucket to visit.
    next: usize,
    // The table's shape at the end of the last chunk: its bucket count, the inserts it had taken, and how many
    // more it could take without moving entries. `None` before the first chunk.
    last: Option<Shape>,
    restarts: u32,
}

#[derive(Debug, Clone, Copy)]
struct Shape {
    buckets: usize,
    inserts: u64,
    room: usize,
}

impl Shape {
    fn of(table: &InFlight) -> Self {
        Self {
            buckets: table.buckets(),
            inserts: table.inserts(),
            room: table.room(),
        }
    }
}

impl Sweep {
    /// Visit the next chunk of `table`, which the caller holds locked until this returns: up to [`CHUNK_BUCKETS`]
    /// buckets, stopping early once `picked` holds `want` requests; the requests that `which` picks are added to
    /// `picked`. Returns whether the pass is over.
    pub(super) fn next_chunk(
        &mut self,
        table: &InFlight,
        which: impl Fn(&Lifecycle) -> bool,
        want: usize,
        picked: &mut Vec<SharedLifecycle>,
    ) -> bool {
        if let Some(last) = self.last {
            let moved = table.buckets() != last.buckets
                || table.inserts().wrapping_sub(last.inserts) > last.room as u64;
            if moved {
                tracing::debug!(
                    at = self.next,
                    "the table may have moved its entries during a close's pass: starting it over"
                );
                self.next = 0;
                self.restarts += 1;
            }
        }
        let (chunk, want) = if self.restarts >= MAX_RESTARTS {
            (usize::MAX, usize::MAX)
        } else {
            (CHUNK_BUCKETS, want)
        };
        let end = table.buckets().min(self.next.saturating_add(chunk));
        while self.next < end && picked.len() < want {
            if let Some(lifecycle) = table.at(self.next).filter(|lifecycle| which(lifecycle)) {
                picked.push(lifecycle.clone());
            }
            self.next += 1;
        }
        self.last = Some(Shape::of(table));
        self.next >= table.buckets()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Id;

    fn entry(id: i64, conn: u64) -> SharedLifecycle {
        SharedLifecycle::new(Lifecycle::new(Id::from(id), conn))
    }

    /// Run a pass for connection 1 to its end, calling `between` after every chunk (what other connections do
    /// meanwhile); the distinct requests it picked.
    fn pass(table: &mut InFlight, mut between: impl FnMut(&mut InFlight)) -> Vec<Id> {
        let mut sweep = Sweep::default();
        let mut picked = Vec::new();
        while !sweep.next_chunk(table, |l| l.conn() == 1, usize::MAX, &mut picked) {
            between(table);
        }
        let mut ids: Vec<Id> = picked.iter().map(|l| l.id().clone()).collect();
        ids.sort_by_key(|id| format!("{id:?}"));
        ids.dedup();
        ids
    }

    #[test]
    fn a_pass_in_chunks_reaches_every_request_of_its_connection_and_no_other() {
        let mut table = InFlight::new();
        let entries: Vec<_> = (0..100).map(|n| entry(n, 1 + n as u64 % 2)).collect();
        entries.iter().for_each(|e| table.insert(e).unwrap());
        let mut chunks = 0;
        let picked = pass(&mut table, |_| chunks += 1);
        assert!(chunks > 10, "the pass let go between chunks ({chunks})");
        let expected: Vec<Id> = (0..100).filter(|n| n % 2 == 0).map(Id::from).collect();
        let mut expected = expected;
        expected.sort_by_key(|id| format!("{id:?}"));
        assert_eq!(picked, expected);
    }

    // The two tests below run many tables (each hashes with a seed of its own), since whether a move puts a
    // request behind the cursor depends on where the hashes send it.

    #[test]
    fn a_table_that_grows_during_the_pass_is_passed_over_again() {
        for _ in 0..200 {
            let mut table = InFlight::new();
            let closing: Vec<_> = (0..20).map(|n| entry(n, 1)).collect();
            closing.iter().for_each(|e| table.insert(e).unwrap());
            let buckets = table.buckets();
            let mut others = Vec::new();
            let picked = pass(&mut table, |table| {
                // Another connection's requests arrive, enough to grow the table twice.
                for _ in 0..8 {
                    if others.len() < 60 {
                        let other = entry(1000 + others.len() as i64, 2);
                        table.insert(&other).unwrap();
                        others.push(other);
                    }
                }
            });
            assert!(table.buckets() >= 4 * buckets);
            assert_eq!(picked.len(), 20, "every request of the closing connection");
        }
    }

    #[test]
    fn a_table_that_rehashes_in_place_during_the_pass_is_passed_over_again() {
        let mut rehashed = 0;
        for _ in 0..200 {
            // A table filled to its last place, the closing connection's requests the last in (some land past
            // their first choice of place, which a rehash gives back to them), then emptied of the others: their
            // places left as tombstones, not free, so that the next inserts use up the table's room while it holds
            // few requests, and it rehashes in place rather than grow. (Where a removal leaves a tombstone
            // depends on its neighbours, hence the retries until most do.)
            let (mut table, _closing) = loop {
                let mut table = InFlight::new();
                let mut earlier = Vec::new();
                while table.buckets() < 256 || table.room() > 8 {
                    let other = entry(100 + earlier.len() as i64, 2);
                    table.insert(&other).unwrap();
                    earlier.push(other);
                }
                let closing: Vec<_> = (0..8).map(|n| entry(n, 1)).collect();
                closing.iter().for_each(|e| table.insert(e).unwrap());
                earlier.iter().for_each(|e| assert!(table.remove(e)));
                if table.room() < 128 {
                    break (table, closing);
                }
            };
            let buckets = table.buckets();
            let mut next = 10_000;
            let (mut chunks, mut rehashes) = (0, 0);
            let picked = pass(&mut table, |table| {
                chunks += 1;
                if chunks != table.buckets() / CHUNK_BUCKETS / 2 {
                    return;
                }
                // Halfway through the pass, another connection's requests come and go, until one's insert
                // rehashes the table: the one thing that gives it more room.
                let mut passing = Vec::new();
                for _ in 0..100_000 {
                    let room = table.room();
                    let other = entry(next, 2);
                    next += 1;
                    table.insert(&other).unwrap();
                    passing.push(other);
                    if table.room() > room {
                        rehashes += 1;
                        break;
                    }
                    if passing.len() == 20 {
                        passing.drain(..).for_each(|e| assert!(table.remove(&e)));
                    }
                }
                passing.drain(..).for_each(|e| assert!(table.remove(&e)));
            });
            assert_eq!(table.buckets(), buckets, "in place, not grown");
            assert_eq!(picked.len(), 8, "every request of the closing connection");
            rehashed += rehashes;
        }
        // The churn does not rehash every table (its removals may leave free places rather than tombstones).
        assert!(
            rehashed >= 50,
            "{rehashed} of 200 tables rehashed in place during the pass"
        );
    }
}
