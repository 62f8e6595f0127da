//! A bounded window: a map from keys to values that keeps the newest entries within a count and a byte budget,
//! forgetting the oldest first.
//!
//! What a peer or another replica sends ahead of its use is kept in such a window for a while: the registry's
//! early cancels (`registry/early.rs`) and finished requests (`registry/finished.rs`), the bus's cancels for
//! scopes not here yet (`bus/pending.rs`). A flood of it pins no more than the bounds, and the newest survives it.
//!
//! # Bounds
//!
//! A window is bounded three times: in entries, in bytes, and in entries per key. An entry costs what its owner
//! says (its heap bytes plus a fixed overhead, so that long ids count for what they hold). An entry that would pass
//! a bound makes room first: its key's oldest entry goes when the key is at its own bound (a flood under one key
//! pushes out its own entries, not the others'), then the window's oldest until both other bounds hold. An entry
//! that alone costs more than the whole budget is refused: keeping it would mean forgetting everything else, and it
//! would still not fit.
//!
//! # Invariants
//!
//! - After every call: at most `max_entries` entries, at most `max_bytes` bytes (the sum of the entries' costs),
//!   at most `max_per_key` entries under one key.
//! - Arrival order is kept twice, as linked lists through the slots: the window's order over every entry (linked
//!   both ways, since a key's entries leave from anywhere in it), and each key's run over its own (linked forwards:
//!   they leave from its front only). A key's run is in the window's order, so the window's oldest entry is the
//!   first of its key's run: forgetting it takes the list's head and one lookup of its run, never a scan.
//! - A key is stored once, in its entries' slots; the index holds runs, found by hashing through the key of their
//!   first slot (as the registry's in-flight table does), so a key costs no second copy.
//! - A slot freed is reused before the storage grows: it never holds more slots than the most entries held at
//!   once, however many keys come and go.

use std::{
    borrow::Borrow,
    collections::hash_map::RandomState,
    fmt,
    hash::{BuildHasher, Hash},
    mem,
};

use hashbrown::HashTable;

/// No slot: the end of a list.
const NIL: usize = usize::MAX;

/// A map from `K` to the values kept under it, bounded in entries, bytes and entries per key, oldest out first.
pub(crate) struct Window<K, V> {
    // Keys are chosen by the peer (ids) or by other replicas: std's hasher, randomly keyed, so that no sender can
    // aim every key at one bucket.
    hasher: RandomState,
    index: HashTable<Run>,
    slots: Vec<Slot<K, V>>,
    // The first free slot; each free slot names the next.
    free: usize,
    // The window's order, oldest to newest.
    oldest: usize,
    newest: usize,
    len: usize,
    bytes: usize,
    max_entries: usize,
    max_bytes: usize,
    max_per_key: usize,
}

/// Where one key's entries are: its run, oldest first.
#[derive(Clone, Copy, Debug)]
struct Run {
    first: usize,
    last: usize,
    len: usize,
}

enum Slot<K, V> {
    Held(Entry<K, V>),
    Free { next: usize },
}

struct Entry<K, V> {
    key: K,
    value: V,
    cost: usize,
    // Its neighbours in the window's order.
    older: usize,
    newer: usize,
    // The next (newer) entry of its key.
    next_of_key: usize,
}

impl<K: Hash + Eq, V> Window<K, V> {
    /// An empty window of at most `max_entries` entries costing `max_bytes` in all, any number of them under one
    /// key. A window of no entries keeps nothing.
    pub(crate) fn new(max_entries: usize, max_bytes: usize) -> Self {
        Self {
            hasher: RandomState::new(),
            index: HashTable::new(),
            slots: Vec::new(),
            free: NIL,
            oldest: NIL,
            newest: NIL,
            len: 0,
            bytes: 0,
            max_entries,
            max_bytes,
            max_per_key: usize::MAX,
        }
    }

    /// The same window holding at most `max` entries under one key (0: nothing at all).
    pub(crate) fn per_key(mut self, max: usize) -> Self {
        self.max_per_key = max;
        self
    }

    /// How many entries it holds.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// What its entries cost in all.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether an entry costing `cost` would be kept (by forgetting older ones if need be): the window is on and
    /// the entry alone fits the budget.
    pub(crate) fn admits(&self, cost: usize) -> bool {
        self.max_entries > 0 && self.max_per_key > 0 && cost <= self.max_bytes
    }

    /// Keep `value` under `key` as the newest entry, costing `cost`. Returns how many entries were forgotten to
    /// make room (the key's own oldest first if it is at its bound, then the window's oldest), or `None`, the
    /// window unchanged, if it does not [admit](Self::admits) the entry.
    pub(crate) fn remember(&mut self, key: K, value: V, cost: usize) -> Option<u64> {
        if !self.admits(cost) {
            return None;
        }
        // Hashed once: every lookup of this key below reuses it.
        let hash = self.hasher.hash_one(&key);
        let mut dropped = 0;
        let own = self
            .index
            .find(hash, |run| self.slots[run.first].key() == &key)
            .copied();
        if let Some(Run { first, len, .. }) = own {
            if len >= self.max_per_key {
                self.pop_first(hash, |_, run| run.first == first);
                dropped += 1;
            }
        }
        // `bytes <= max_bytes` always, so the subtraction cannot wrap (a sum could, with a budget of usize::MAX).
        while self.len >= self.max_entries || cost > self.max_bytes - self.bytes {
            // The loop ends with an empty window at the latest: the window is on and the entry fits the budget.
            if !self.forget_oldest() {
                break;
            }
            dropped += 1;
        }
        self.push(hash, key, value, cost, own.is_some());
        Some(dropped)
    }

    /// Whether anything is kept under `key`.
    pub(crate) fn contains<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.run(key).is_some()
    }

    /// The oldest value kept under `key`.
    pub(crate) fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.run(key)
            .map(|run| &self.slots[run.first].entry().value)
    }

    /// Take the oldest value kept under `key` out of the window.
    pub(crate) fn take<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        self.pop_first(hash, |slots, run| slots[run.first].key().borrow() == key)
    }

    /// Take every value kept under `key` out of the window, oldest first.
    pub(crate) fn take_all<Q>(&mut self, key: &Q) -> Vec<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let mut values = Vec::new();
        if let Some(run) = self.remove_run(key) {
            values.reserve_exact(run.len);
            self.release_run(run, |value| values.push(value));
        }
        values
    }

    /// Forget every value kept under `key`. Returns how many there were.
    pub(crate) fn forget<Q>(&mut self, key: &Q) -> usize
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let Some(run) = self.remove_run(key) else {
            return 0;
        };
        self.release_run(run, drop);
        run.len
    }

    fn run<Q>(&self, key: &Q) -> Option<&Run>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        self.index
            .find(hash, |run| self.slots[run.first].key().borrow() == key)
    }

    /// Take `key`'s run out of the index; its slots are still held.
    fn remove_run<Q>(&mut self, key: &Q) -> Option<Run>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        let slots = &self.slots;
        let found = self
            .index
            .find_entry(hash, |run| slots[run.first].key().borrow() == key);
        found.ok().map(|entry| entry.remove().0)
    }

    /// Release every slot of `run` (already out of the index), oldest first, giving each value to `each`.
    fn release_run(&mut self, run: Run, mut each: impl FnMut(V)) {
        let mut slot = run.first;
        while slot != NIL {
            let next = self.slots[slot].entry().next_of_key;
            each(self.release(slot));
            slot = next;
        }
    }

    /// Forget the window's oldest entry. Returns whether there was one.
    fn forget_oldest(&mut self) -> bool {
        let oldest = self.oldest;
        if oldest == NIL {
            return false;
        }
        let hash = self.hasher.hash_one(self.slots[oldest].key());
        // The window's oldest is the oldest of its key: its run is the one that starts there.
        self.pop_first(hash, |_, run| run.first == oldest).is_some()
    }

    /// Take out the first entry of the run of hash `hash` that `is_run` picks.
    fn pop_first(&mut self, hash: u64, is_run: impl Fn(&[Slot<K, V>], &Run) -> bool) -> Option<V> {
        let slots = &self.slots;
        let Ok(mut found) = self.index.find_entry(hash, |run| is_run(slots, run)) else {
            return None;
        };
        let run = found.get_mut();
        let first = run.first;
        let next = self.slots[first].entry().next_of_key;
        if next == NIL {
            found.remove();
        } else {
            run.first = next;
            run.len -= 1;
        }
        Some(self.release(first))
    }

    /// Put a new entry at the newest end of the window and of its key's run (`had_run`: whether the key had one
    /// before room was made; if not, it has none now).
    fn push(&mut self, hash: u64, key: K, value: V, cost: usize, had_run: bool) {
        let older = self.newest;
        let slot = self.alloc(Entry {
            key,
            value,
            cost,
            older,
            newer: NIL,
            next_of_key: NIL,
        });
        if older == NIL {
            self.oldest = slot;
        } else {
            self.slots[older].entry_mut().newer = slot;
        }
        self.newest = slot;
        self.len += 1;
        self.bytes += cost;

        // Looked up again, if there was one: making room may have emptied the key's run, or moved its start. A key
        // new to the window (the common case) pays for no second lookup.
        let slots = &self.slots;
        let key = slots[slot].key();
        let run = if had_run {
            self.index
                .find_mut(hash, |run| slots[run.first].key() == key)
        } else {
            None
        };
        match run {
            Some(run) => {
                let last = run.last;
                run.last = slot;
                run.len += 1;
                self.slots[last].entry_mut().next_of_key = slot;
            }
            None => {
                let hasher = &self.hasher;
                let slots = &self.slots;
                self.index.insert_unique(
                    hash,
                    Run {
                        first: slot,
                        last: slot,
                        len: 1,
                    },
                    |run| hasher.hash_one(slots[run.first].key()),
                );
            }
        }
    }

    fn alloc(&mut self, entry: Entry<K, V>) -> usize {
        if self.free == NIL {
            self.slots.push(Slot::Held(entry));
            return self.slots.len() - 1;
        }
        let slot = self.free;
        match mem::replace(&mut self.slots[slot], Slot::Held(entry)) {
            Slot::Free { next } => self.free = next,
            Slot::Held(_) => unreachable!("the free list names a held slot"),
        }
        slot
    }

    /// Free `slot` (already out of its key's run) and take it out of the window's order.
    fn release(&mut self, slot: usize) -> V {
        let freed = Slot::Free { next: self.free };
        let Slot::Held(entry) = mem::replace(&mut self.slots[slot], freed) else {
            unreachable!("a list names a free slot");
        };
        self.free = slot;
        match entry.older {
            NIL => self.oldest = entry.newer,
            older => self.slots[older].entry_mut().newer = entry.newer,
        }
        match entry.newer {
            NIL => self.newest = entry.older,
            newer => self.slots[newer].entry_mut().older = entry.older,
        }
        self.len -= 1;
        self.bytes -= entry.cost;
        entry.value
    }
}

impl<K, V> Slot<K, V> {
    fn entry(&self) -> &Entry<K, V> {
        match self {
            Slot::Held(entry) => entry,
            Slot::Free { .. } => unreachable!("a list names a free slot"),
        }
    }

    fn entry_mut(&mut self) -> &mut Entry<K, V> {
        match self {
            Slot::Held(entry) => entry,
            Slot::Free { .. } => unreachable!("a list names a free slot"),
        }
    }

    fn key(&self) -> &K {
        &self.entry().key
    }
}

impl<K, V> fmt::Debug for Window<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Window")
            .field("len", &self.len)
            .field("bytes", &self.bytes)
            .field("max_entries", &self.max_entries)
            .field("max_bytes", &self.max_bytes)
            .field("max_per_key", &self.max_per_key)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
impl<K: Hash + Eq, V> Window<K, V> {
    /// The slots the storage holds, free ones included.
    pub(crate) fn slots(&self) -> usize {
        self.slots.len()
    }

    /// Every entry, oldest first, after checking the invariants.
    pub(crate) fn entries(&self) -> Vec<(&K, &V)> {
        let mut entries = Vec::new();
        let (mut slot, mut older, mut bytes) = (self.oldest, NIL, 0);
        while slot != NIL {
            let entry = self.slots[slot].entry();
            assert_eq!(entry.older, older, "the order is linked both ways");
            let run = self.run(&entry.key).expect("every key held has a run");
            assert!(run.len <= self.max_per_key);
            entries.push((&entry.key, &entry.value));
            bytes += entry.cost;
            (older, slot) = (slot, entry.newer);
        }
        assert_eq!(older, self.newest);
        assert_eq!((entries.len(), bytes), (self.len, self.bytes));
        assert!(self.len <= self.max_entries && self.bytes <= self.max_bytes);
        let runs: usize = self.index.iter().map(|run| run.len).sum();
        assert_eq!(runs, self.len, "each entry is in one run");
        entries
    }
}

#[cfg(test)]
mod tests {
    use std::{cell::Cell, hash::Hasher};

    use super::*;

    fn keys<V>(window: &Window<&'static str, V>) -> Vec<&'static str> {
        window.entries().into_iter().map(|(key, _)| *key).collect()
    }

    #[test]
    fn the_oldest_is_forgotten_first_when_the_entries_run_out() {
        let mut window = Window::new(3, usize::MAX);
        for key in ["a", "b", "c"] {
            assert_eq!(window.remember(key, (), 1), Some(0));
        }
        assert_eq!(window.remember("d", (), 1), Some(1));
        assert_eq!(keys(&window), ["b", "c", "d"]);
        // Taking one from the middle leaves the order of the others.
        assert_eq!(window.take("c"), Some(()));
        assert_eq!(window.remember("e", (), 1), Some(0));
        assert_eq!(window.remember("f", (), 1), Some(1));
        assert_eq!(keys(&window), ["d", "e", "f"]);
    }

    #[test]
    fn the_byte_budget_forgets_as_many_of_the_oldest_as_it_takes() {
        let mut window = Window::new(100, 10);
        for key in ["a", "b", "c", "d", "e"] {
            window.remember(key, (), 2);
        }
        assert_eq!(window.bytes(), 10);
        assert_eq!(
            window.remember("big", (), 7),
            Some(4),
            "7 bytes free only once a, b, c, d are gone"
        );
        assert_eq!(keys(&window), ["e", "big"]);
        assert_eq!((window.len(), window.bytes()), (2, 9));
        // Exactly the budget is within it.
        assert_eq!(window.remember("all", (), 10), Some(2));
        assert_eq!((keys(&window), window.bytes()), (vec!["all"], 10));
    }

    #[test]
    fn an_entry_larger_than_the_budget_is_refused_and_the_window_left_alone() {
        let mut window = Window::new(100, 10);
        window.remember("a", 1, 4);
        window.remember("b", 2, 4);
        assert!(!window.admits(11));
        assert_eq!(window.remember("huge", 3, 11), None);
        assert_eq!(keys(&window), ["a", "b"]);
        assert_eq!(window.bytes(), 8);
        // A window of no entries, or of no entries per key, keeps nothing.
        for mut off in [Window::new(0, 10), Window::new(10, 10).per_key(0)] {
            assert_eq!(off.remember("a", 1, 1), None);
            assert!(off.is_empty());
        }
    }

    #[test]
    fn a_key_at_its_bound_forgets_its_own_oldest_first() {
        let mut window = Window::new(4, usize::MAX).per_key(2);
        window.remember("quiet", 0, 1);
        for n in 1..=5 {
            window.remember("flood", n, 1);
        }
        assert_eq!(window.get("flood"), Some(&4), "the key's oldest");
        assert_eq!(window.take_all("flood"), [4, 5]);
        assert_eq!(window.take_all("quiet"), [0]);
        assert!(window.is_empty());

        // At its own bound and the window full: one of the key's, then the window's oldest.
        let mut window = Window::new(3, usize::MAX).per_key(2);
        window.remember("a", 1, 1);
        window.remember("b", 2, 1);
        window.remember("a", 3, 1);
        assert_eq!(window.remember("a", 4, 1), Some(1));
        assert_eq!(keys(&window), ["b", "a", "a"]);
        assert_eq!(window.remember("c", 5, 1), Some(1));
        assert_eq!(keys(&window), ["a", "a", "c"]);
    }

    #[test]
    fn one_entry_per_key_replaces_and_makes_it_the_newest() {
        let mut window = Window::new(3, usize::MAX).per_key(1);
        for key in ["a", "b", "c"] {
            window.remember(key, key, 1);
        }
        assert_eq!(window.remember("a", "again", 1), Some(1));
        assert_eq!(keys(&window), ["b", "c", "a"]);
        assert_eq!(window.get("a"), Some(&"again"));
        assert_eq!(window.remember("d", "d", 1), Some(1));
        assert_eq!(keys(&window), ["c", "a", "d"]);
    }

    #[test]
    fn forgetting_and_taking_keep_the_counts_and_reuse_the_slots() {
        let mut window = Window::new(8, usize::MAX);
        for round in 0..10_000 {
            // A key of its own each round; what `take` leaves is forgotten by the bound later.
            let key = format!("k{round}");
            window.remember(key.clone(), round, 3);
            window.remember(key.clone(), round, 3);
            match round % 3 {
                0 => assert_eq!(window.forget(key.as_str()), 2),
                1 => assert_eq!(window.take_all(key.as_str()), [round, round]),
                _ => assert_eq!(window.take(key.as_str()), Some(round)),
            }
            assert!(window.slots() <= 8, "{} slots", window.slots());
        }
        assert_eq!(window.len(), window.entries().len());
        assert_eq!(window.bytes(), 3 * window.len());
        assert_eq!((window.forget("none"), window.take("none")), (0, None));
        assert!(window.take_all("none").is_empty());
    }

    /// A key that counts how often it is hashed and compared.
    #[derive(Debug)]
    struct Counted(u64);

    thread_local! {
        static HASHED: Cell<usize> = const { Cell::new(0) };
        static COMPARED: Cell<usize> = const { Cell::new(0) };
    }

    impl Hash for Counted {
        fn hash<H: Hasher>(&self, state: &mut H) {
            HASHED.with(|c| c.set(c.get() + 1));
            self.0.hash(state);
        }
    }

    impl PartialEq for Counted {
        fn eq(&self, other: &Self) -> bool {
            COMPARED.with(|c| c.set(c.get() + 1));
            self.0 == other.0
        }
    }

    impl Eq for Counted {}

    #[test]
    fn forgetting_the_oldest_does_not_depend_on_how_many_are_held() {
        const HELD: u64 = 100_000;
        let mut window = Window::new(HELD as usize, usize::MAX).per_key(1);
        for n in 0..HELD {
            window.remember(Counted(n), n, 1);
        }
        let (hashed, compared) = (HASHED.with(Cell::get), COMPARED.with(Cell::get));
        assert_eq!(window.remember(Counted(HELD), HELD, 1), Some(1));
        let hashed = HASHED.with(Cell::get) - hashed;
        let compared = COMPARED.with(Cell::get) - compared;
        // The new key once, the oldest once to find its run (found by slot, not by key), no scan of the others.
        assert_eq!(hashed, 2);
        // The new key against the keys whose hash shares its tag: rarely any, whatever the window holds, where a
        // scan would compare thousands.
        assert!(compared <= 16, "{compared} keys compared");
        assert_eq!(window.get(&Counted(0)), None);
        assert_eq!(window.get(&Counted(1)), Some(&1));
        assert_eq!(window.len(), HELD as usize);
    }

    /// The window against a plain list doing the same thing by scanning, over a long random run of every call.
    #[test]
    fn it_does_what_a_scanned_list_does() {
        struct Model {
            entries: Vec<(u8, u32, usize)>,
            max_entries: usize,
            max_bytes: usize,
            max_per_key: usize,
        }
        impl Model {
            fn remember(&mut self, key: u8, value: u32, cost: usize) -> Option<u64> {
                if self.max_entries == 0 || self.max_per_key == 0 || cost > self.max_bytes {
                    return None;
                }
                let mut dropped = 0;
                if self.entries.iter().filter(|e| e.0 == key).count() >= self.max_per_key {
                    let first = self.entries.iter().position(|e| e.0 == key).unwrap();
                    self.entries.remove(first);
                    dropped += 1;
                }
                while self.entries.len() >= self.max_entries
                    || self.entries.iter().map(|e| e.2).sum::<usize>() + cost > self.max_bytes
                {
                    self.entries.remove(0);
                    dropped += 1;
                }
                self.entries.push((key, value, cost));
                Some(dropped)
            }
            fn take_all(&mut self, key: u8) -> Vec<u32> {
                let taken = self
                    .entries
                    .iter()
                    .filter(|e| e.0 == key)
                    .map(|e| e.1)
                    .collect();
                self.entries.retain(|e| e.0 != key);
                taken
            }
        }

        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move |below: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % below
        };
        for (max_entries, max_bytes, max_per_key) in [(8, 40, 3), (16, 1000, 1), (5, 12, 100)] {
            let mut window = Window::new(max_entries, max_bytes).per_key(max_per_key);
            let mut model = Model {
                entries: Vec::new(),
                max_entries,
                max_bytes,
                max_per_key,
            };
            for value in 0..20_000 {
                let key = next(12) as u8;
                match next(10) {
                    0..=5 => {
                        let cost = next(max_bytes as u64 + 3) as usize;
                        assert_eq!(
                            window.remember(key, value, cost),
                            model.remember(key, value, cost)
                        );
                    }
                    6 => {
                        let first = model.entries.iter().position(|e| e.0 == key);
                        let expected = first.map(|at| model.entries.remove(at).1);
                        assert_eq!(window.take(&key), expected);
                    }
                    7 => assert_eq!(window.take_all(&key), model.take_all(key)),
                    8 => assert_eq!(window.forget(&key), model.take_all(key).len()),
                    _ => {
                        let first = model.entries.iter().find(|e| e.0 == key);
                        assert_eq!(window.get(&key), first.map(|e| &e.1));
                        assert_eq!(window.contains(&key), first.is_some());
                    }
                }
                let held: Vec<_> = window
                    .entries()
                    .into_iter()
                    .map(|(k, v)| (*k, *v))
                    .collect();
                let expected: Vec<_> = model.entries.iter().map(|e| (e.0, e.1)).collect();
                assert_eq!(held, expected);
            }
        }
    }
}
