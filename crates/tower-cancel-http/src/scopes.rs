//! Scopes kept by key across HTTP requests: a principal's, an MCP session's.
//!
//! An entry stays while requests use it (each holds a [`Lease`]) and for a while after the last one went (its
//! `linger`), so that a cancel POSTed a little before or after its request still finds the scope. Idle entries
//! past their linger are swept lazily when entries are added; the table never grows past its bound.

use std::{
    collections::HashMap,
    fmt,
    hash::Hash,
    ops::Deref,
    sync::{Arc, Mutex, MutexGuard},
    time::Duration,
};

use tokio::time::Instant;
use tower_cancel::{CancelReason, Scope};

/// What a table keeps per key: a scope and whatever the front end ties to it.
pub(crate) trait Scoped: Send + Sync + 'static {
    fn scope(&self) -> &Scope;

    /// The entry was taken out of the table by [`Scopes::remove`], its scope closed: stop whatever else of it runs.
    fn closed(&self) {}
}

impl Scoped for Scope {
    fn scope(&self) -> &Scope {
        self
    }
}

/// The table is full: no entry could be added.
#[derive(Debug)]
pub(crate) struct Full;

pub(crate) struct Scopes<K, V> {
    table: Arc<Mutex<Table<K, V>>>,
    linger: Duration,
    max: usize,
    evict_idle: bool,
}

struct Table<K, V> {
    entries: HashMap<K, Entry<V>>,
    last_sweep: Instant,
}

struct Entry<V> {
    value: Arc<V>,
    leases: usize,
    idle_since: Instant,
}

impl<K, V> Clone for Scopes<K, V> {
    fn clone(&self) -> Self {
        Self {
            table: self.table.clone(),
            linger: self.linger,
            max: self.max,
            evict_idle: self.evict_idle,
        }
    }
}

impl<K: Eq + Hash + Clone + Send + 'static, V: Scoped> Scopes<K, V> {
    pub(crate) fn new(linger: Duration, max: usize) -> Self {
        Self {
            table: Arc::new(Mutex::new(Table {
                entries: HashMap::new(),
                last_sweep: Instant::now(),
            })),
            linger,
            max,
            evict_idle: false,
        }
    }

    /// When the table is full, make room by dropping the entry idle for longest (no lease, nothing in flight),
    /// even within its linger, rather than refusing the new one: for entries that anyone may make (a RAP thread
    /// made by a cancel for it), so that they cannot lock out the ones doing work.
    pub(crate) fn evict_idle_when_full(mut self) -> Self {
        self.evict_idle = true;
        self
    }

    /// A lease on the entry of `key`, made by `make` if there is none.
    pub(crate) fn lease_or_insert(
        &self,
        key: K,
        make: impl FnOnce() -> V,
    ) -> Result<Lease<K, V>, Full> {
        let mut table = self.lock();
        if !table.entries.contains_key(&key) {
            self.make_room(&mut table)?;
            table.entries.insert(
                key.clone(),
                Entry {
                    value: Arc::new(make()),
                    leases: 0,
                    idle_since: Instant::now(),
                },
            );
        }
        Ok(self.lease_in(&mut table, key).expect("just inserted"))
    }

    /// A new entry under `key` (a key no one else can know, such as a freshly minted session id), leased.
    pub(crate) fn insert(&self, key: K, value: V) -> Result<Lease<K, V>, Full> {
        let mut table = self.lock();
        self.make_room(&mut table)?;
        table.entries.insert(
            key.clone(),
            Entry {
                value: Arc::new(value),
                leases: 0,
                idle_since: Instant::now(),
            },
        );
        Ok(self.lease_in(&mut table, key).expect("just inserted"))
    }

    /// A lease on the entry of `key`, if there is one.
    pub(crate) fn lease(&self, key: &K) -> Option<Lease<K, V>> {
        let mut table = self.lock();
        self.lease_in(&mut table, key.clone())
    }

    /// Take the entry of `key` out of the table and cancel what is in flight in its scope with `reason`.
    pub(crate) fn remove(&self, key: &K, reason: CancelReason) -> Option<Arc<V>> {
        let entry = self.lock().entries.remove(key)?;
        entry.value.scope().refuse_new(reason.clone());
        entry.value.scope().close(reason);
        entry.value.closed();
        Some(entry.value)
    }

    /// Take every entry out of the table and cancel what is in flight in their scopes with `reason` (a shutdown).
    pub(crate) fn remove_all(&self, reason: CancelReason) {
        let entries: Vec<Entry<V>> = self
            .lock()
            .entries
            .drain()
            .map(|(_, entry)| entry)
            .collect();
        for entry in entries {
            entry.value.scope().refuse_new(reason.clone());
            entry.value.scope().close(reason.clone());
            entry.value.closed();
        }
    }

    /// The entry of `key`, if there is one, without leasing it.
    pub(crate) fn get(&self, key: &K) -> Option<Arc<V>> {
        self.lock()
            .entries
            .get(key)
            .map(|entry| entry.value.clone())
    }

    /// How many entries the table holds.
    pub(crate) fn len(&self) -> usize {
        self.lock().entries.len()
    }

    fn lease_in(&self, table: &mut Table<K, V>, key: K) -> Option<Lease<K, V>> {
        let entry = table.entries.get_mut(&key)?;
        entry.leases += 1;
        Some(Lease {
            value: entry.value.clone(),
            key,
            table: self.table.clone(),
        })
    }

    fn make_room(&self, table: &mut Table<K, V>) -> Result<(), Full> {
        // Swept when full, and otherwise at most once per linger: the cost stays O(1) per insert on average.
        let now = Instant::now();
        if table.entries.len() >= self.max || now.duration_since(table.last_sweep) >= self.linger {
            Self::expire(table, now, self.linger);
        }
        if table.entries.len() >= self.max && self.evict_idle {
            let oldest = table
                .entries
                .iter()
                .filter(|(_, entry)| entry.leases == 0 && entry.value.scope().registry().is_empty())
                .min_by_key(|(_, entry)| entry.idle_since)
                .map(|(key, _)| key.clone());
            if let Some(oldest) = oldest {
                table.entries.remove(&oldest);
            }
        }
        if table.entries.len() < self.max {
            Ok(())
        } else {
            Err(Full)
        }
    }

    fn expire(table: &mut Table<K, V>, now: Instant, linger: Duration) -> usize {
        let before = table.entries.len();
        table.entries.retain(|_, entry| {
            entry.leases > 0
                || now.duration_since(entry.idle_since) < linger
                || !entry.value.scope().registry().is_empty()
        });
        table.last_sweep = now;
        before - table.entries.len()
    }

    fn lock(&self) -> MutexGuard<'_, Table<K, V>> {
        // A panic while the lock is held leaves the table consistent (no step of ours panics half-way).
        self.table
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl<K, V> fmt::Debug for Scopes<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scopes")
            .field("linger", &self.linger)
            .field("max", &self.max)
            .finish_non_exhaustive()
    }
}

/// A request's hold on a table entry; the entry's idle time starts when the last lease goes.
pub(crate) struct Lease<K: Eq + Hash, V> {
    value: Arc<V>,
    key: K,
    table: Arc<Mutex<Table<K, V>>>,
}

impl<K: Eq + Hash, V> Lease<K, V> {
    pub(crate) fn key(&self) -> &K {
        &self.key
    }
}

impl<K: Eq + Hash, V> Deref for Lease<K, V> {
    type Target = V;

    fn deref(&self) -> &V {
        &self.value
    }
}

impl<K: Eq + Hash, V> Drop for Lease<K, V> {
    fn drop(&mut self) {
        let mut table = self
            .table
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // The entry may be gone (a DELETE, or replaced): then there is nothing to count.
        if let Some(entry) = table.entries.get_mut(&self.key) {
            if Arc::ptr_eq(&entry.value, &self.value) {
                entry.leases -= 1;
                if entry.leases == 0 {
                    entry.idle_since = Instant::now();
                }
            }
        }
    }
}

impl<K: Eq + Hash, V> fmt::Debug for Lease<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tower_cancel::Scope;

    use super::{Full, Scopes};

    const LINGER: Duration = Duration::from_secs(60);

    #[tokio::test(start_paused = true)]
    async fn an_entry_outlives_its_last_lease_by_its_linger_then_goes() {
        let scopes = Scopes::<&str, Scope>::new(LINGER, 10);
        let lease = scopes.lease_or_insert("alice", Scope::new).unwrap();
        // A cancel for a request not yet arrived: remembered in that scope, so the scope can be told apart.
        lease.cancel(&1.into(), tower_cancel::CancelReason::peer(None));
        drop(lease);
        tokio::time::advance(LINGER / 2).await;
        // Within the linger the same scope is found again (a cancel POSTed just after its request ended).
        let again = scopes.lease_or_insert("alice", Scope::new).unwrap();
        assert!(
            again.registry().stats().remembered_bytes > 0,
            "the same scope"
        );
        assert_eq!(scopes.len(), 1);
        drop(again);
        tokio::time::advance(LINGER).await;
        // The next insert sweeps it (at most once per linger).
        let _bob = scopes.lease_or_insert("bob", Scope::new).unwrap();
        assert_eq!(scopes.len(), 1);
        assert!(scopes.lease(&"alice").is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_leased_entry_is_never_swept_and_a_full_table_refuses() {
        let scopes = Scopes::<u32, Scope>::new(LINGER, 2);
        let held = scopes.lease_or_insert(1, Scope::new).unwrap();
        let idle = scopes.lease_or_insert(2, Scope::new).unwrap();
        drop(idle);
        assert!(
            matches!(scopes.lease_or_insert(3, Scope::new), Err(Full)),
            "two kept, neither past its linger"
        );
        tokio::time::advance(LINGER * 2).await;
        // Full: the sweep takes the idle entry, never the leased one.
        let _three = scopes.lease_or_insert(3, Scope::new).unwrap();
        assert!(scopes.lease(&1).is_some() && scopes.lease(&2).is_none());
        drop(held);
    }

    #[tokio::test(start_paused = true)]
    async fn removing_an_entry_forgets_it_and_a_lease_left_on_it_is_harmless() {
        let scopes = Scopes::<u32, Scope>::new(LINGER, 10);
        let lease = scopes.lease_or_insert(1, Scope::new).unwrap();
        assert!(scopes
            .remove(&1, tower_cancel::CancelReason::Disconnect)
            .is_some());
        assert!(scopes
            .remove(&1, tower_cancel::CancelReason::Disconnect)
            .is_none());
        // A new entry under the same key is not miscounted by the old lease's drop.
        let fresh = scopes.lease_or_insert(1, Scope::new).unwrap();
        drop(lease);
        drop(fresh);
        assert_eq!(scopes.len(), 1);
    }
}
