//! The requests in flight: one entry per request, each a pointer to its lifecycle, which holds the id. The id is
//! stored once and hashed once per operation (`hashbrown::HashTable`, keyed through the lifecycle), where a
//! `HashMap<Id, _>` keeps a second copy of every id as its key.
//!
//! In a scope shared by connections, two connections may each have a request of the same id in flight: they are
//! two entries of the same hash, told apart by their connection. A lookup by id visits the entries of that hash
//! only, so it stays O(1) whatever the number of requests in flight.

use hashbrown::{hash_table::Entry, HashTable};

use super::{hasher::IdHasher, DuplicateId, WHOLE_SCOPE};
use crate::{lifecycle::SharedLifecycle, message::Id};

pub(super) struct InFlight {
    entries: HashTable<SharedLifecycle>,
    hasher: IdHasher,
    // Every insert tried so far (a duplicate's too): what tells a close's pass whether the table may have moved
    // its entries meanwhile (`sweep.rs`).
    inserts: u64,
}

impl InFlight {
    pub(super) fn new() -> Self {
        Self {
            entries: HashTable::new(),
            hasher: IdHasher::new(),
            inserts: 0,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Add `lifecycle`, unless its connection already has a request of its id in flight. One probe of the table
    /// finds a duplicate or the slot the request goes in.
    pub(super) fn insert(&mut self, lifecycle: &SharedLifecycle) -> Result<(), DuplicateId> {
        let (id, conn) = (lifecycle.id(), lifecycle.conn());
        let hasher = &self.hasher;
        // Counted before the probe: it makes room first, so even an insert refused as a duplicate may move entries.
        self.inserts += 1;
        match self.entries.entry(
            hasher.hash_id(id),
            |other| other.conn() == conn && other.id() == id,
            |entry| hasher.hash_id(entry.id()),
        ) {
            Entry::Occupied(_) => Err(DuplicateId(id.clone())),
            Entry::Vacant(slot) => {
                slot.insert(lifecycle.clone());
                Ok(())
            }
        }
    }

    /// Take `lifecycle` out (this very request, not another of its id). Returns whether it was in.
    pub(super) fn remove(&mut self, lifecycle: &SharedLifecycle) -> bool {
        let hash = self.hasher.hash_id(lifecycle.id());
        match self
            .entries
            .find_entry(hash, |entry| SharedLifecycle::ptr_eq(entry, lifecycle))
        {
            Ok(entry) => {
                entry.remove();
                true
            }
            Err(_) => false,
        }
    }

    /// The requests `id` of connection `conn`, or of every connection for [`WHOLE_SCOPE`].
    pub(super) fn matching<'a>(
        &'a self,
        conn: u64,
        id: &'a Id,
    ) -> impl Iterator<Item = &'a SharedLifecycle> + 'a {
        self.entries
            .iter_hash(self.hasher.hash_id(id))
            .filter(move |entry| (conn == WHOLE_SCOPE || entry.conn() == conn) && entry.id() == id)
    }

    /// Whether a request `id` is in flight, on any connection.
    pub(super) fn contains(&self, id: &Id) -> bool {
        self.matching(WHOLE_SCOPE, id).next().is_some()
    }

    /// Every request in flight.
    pub(super) fn iter(&self) -> impl Iterator<Item = &SharedLifecycle> {
        self.entries.iter()
    }

    // The table by position, for a pass that lets go of the lock between chunks (`sweep.rs`). Positions hold
    // until the table grows or rehashes, which it does only on an insert that finds no `room` left.

    /// How many buckets the table has: positions run from 0 to this.
    pub(super) fn buckets(&self) -> usize {
        self.entries.num_buckets()
    }

    /// The request at position `bucket`, if one is there.
    pub(super) fn at(&self, bucket: usize) -> Option<&SharedLifecycle> {
        self.entries.get_bucket(bucket)
    }

    /// How many more requests the table takes before an insert may move its entries (grow it, or rehash it in
    /// place). Removals never move entries.
    pub(super) fn room(&self) -> usize {
        self.entries.capacity() - self.entries.len()
    }

    /// How many inserts were tried so far, refused duplicates included (each may have moved the entries).
    pub(super) fn inserts(&self) -> u64 {
        self.inserts
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lifecycle::Lifecycle;

    fn entry(id: impl Into<Id>, conn: u64) -> SharedLifecycle {
        SharedLifecycle::new(Lifecycle::new(id.into(), conn))
    }

    #[test]
    fn one_id_on_two_connections_is_two_entries_and_each_is_removed_alone() {
        let mut table = InFlight::new();
        let (a, b) = (entry("x", 1), entry("x", 2));
        table.insert(&a).unwrap();
        table.insert(&b).unwrap();
        assert_eq!(table.insert(&entry("x", 1)), Err(DuplicateId("x".into())));
        assert_eq!(table.len(), 2);
        assert_eq!(table.matching(WHOLE_SCOPE, &"x".into()).count(), 2);
        let x = Id::from("x");
        let on_two: Vec<_> = table.matching(2, &x).collect();
        assert!(on_two.len() == 1 && SharedLifecycle::ptr_eq(on_two[0], &b));
        assert!(
            !table.remove(&entry("x", 1)),
            "another request of the same id"
        );
        assert!(table.remove(&a));
        assert!(table.contains(&"x".into()));
        assert!(table.remove(&b));
        assert!(!table.contains(&"x".into()));
        assert_eq!(table.len(), 0);
    }

    #[test]
    fn many_entries_grow_the_table_and_stay_reachable() {
        let mut table = InFlight::new();
        let entries: Vec<_> = (0..10_000).map(|n| entry(n, 1 + n as u64 % 3)).collect();
        entries.iter().for_each(|e| table.insert(e).unwrap());
        assert!(entries
            .iter()
            .all(|e| table.matching(e.conn(), e.id()).count() == 1));
        entries.iter().for_each(|e| assert!(table.remove(e)));
        assert_eq!(table.len(), 0);
    }
}
