//! The hasher of the registry's tables: foldhash (a few nanoseconds for an id, where SipHash takes tens), seeded
//! at random.
//!
//! # Why the seed must be secret
//!
//! Every id in these tables comes from the peer. With a seed the peer could know (a fixed one, or one derived
//! from nothing but addresses), it could pick ids that all land in one bucket and make each insert and lookup a
//! scan (HashDoS). The seeds here are drawn from std's `RandomState`, whose keys come from the operating system's
//! random source: one seed shared by the process, and one per table, so that what a peer learns of one table's
//! layout says nothing of another's.

use std::{
    collections::hash_map::RandomState,
    hash::{BuildHasher, Hash},
    sync::OnceLock,
};

use foldhash::{fast::SeedableRandomState, SharedSeed};

use crate::message::Id;

/// A randomly seeded foldhash [`BuildHasher`], one per table.
#[derive(Clone, Debug)]
pub(crate) struct IdHasher(SeedableRandomState);

impl IdHasher {
    pub(crate) fn new() -> Self {
        static SHARED: OnceLock<SharedSeed> = OnceLock::new();
        let shared = SHARED.get_or_init(|| SharedSeed::from_u64(secret()));
        Self(SeedableRandomState::with_seed(secret(), shared))
    }

    /// The hash of `value` under this table's seed.
    pub(crate) fn hash<T: Hash + ?Sized>(&self, value: &T) -> u64 {
        self.0.hash_one(value)
    }

    /// The hash of a request id under this table's seed: its number or its string alone, where `Id`'s own `Hash`
    /// hashes the enum's tag first, one more round per hash on every request's way in and out. A number and a
    /// string whose hashes meet are still told apart by the table, which compares the ids.
    pub(crate) fn hash_id(&self, id: &Id) -> u64 {
        match id {
            Id::Number(number) => self.0.hash_one(number),
            Id::String(string) => self.0.hash_one(string.as_str()),
        }
    }
}

impl Default for IdHasher {
    fn default() -> Self {
        Self::new()
    }
}

impl BuildHasher for IdHasher {
    type Hasher = <SeedableRandomState as BuildHasher>::Hasher;

    fn build_hasher(&self) -> Self::Hasher {
        self.0.build_hasher()
    }
}

/// 64 bits nobody outside the process can predict: std's `RandomState` is keyed from the OS's random source
/// (once per thread, then a new key each time), so the hash of a constant under a new one is such a value.
fn secret() -> u64 {
    // Loom replays each interleaving and needs every run of a model alike: where the ids land in the table decides
    // how often a close's walk of it starts over (`sweep.rs`), and so how many atomic operations a run makes.
    if cfg!(loom) {
        return 0x9e37_79b9_7f4a_7c15;
    }
    RandomState::new().hash_one(0x9e37_79b9_7f4a_7c15_u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_table_gets_a_seed_of_its_own() {
        let (a, b) = (IdHasher::new(), IdHasher::new());
        let id = Id::from(1);
        assert_eq!(a.hash(&id), a.hash(&id));
        assert_ne!(a.hash(&id), b.hash(&id), "two tables, two seeds");
        assert_ne!(a.hash(&Id::from(1)), a.hash(&Id::from("1")));
        assert_eq!(a.hash_id(&id), a.hash_id(&Id::from(1)));
        assert_ne!(a.hash_id(&id), b.hash_id(&id), "two tables, two seeds");
        assert_ne!(a.hash_id(&Id::from(7)), a.hash_id(&Id::from(8)));
    }
}
