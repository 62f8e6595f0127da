//! The group index: which requests in flight are in which group of their connection (an ACP session's turn, the
//! request that created an LSP progress token), so that a group cancel reaches them in O(group size) instead of a
//! scan of the table.
//!
//! Made on the first grouped request of a scope (a scope that never groups has none), and kept under the
//! registry's lock with the in-flight table: a request joins its group when it is registered (or when
//! [`Registry::bind_group`](super::Registry::bind_group) binds it later) and leaves every group it is in when it
//! leaves the registry, so the index never holds a request that is not in flight.
//!
//! Which groups a request is in, for its way out, is kept in its lifecycle (with the rarely used parts, which a
//! grouped request has made anyway), each key shared with its group's entry here: no map of memberships, and no
//! copy of the key per member.

use std::sync::Arc;

use hashbrown::HashTable;

use super::{hasher::IdHasher, WHOLE_SCOPE};
use crate::{lifecycle::SharedLifecycle, message::Id};

pub(super) struct Groups {
    // One entry per (connection, key): the group's key is the peer's (a session id), so it is hashed with the
    // registry's secret seed like an id, and two connections' groups of one key are two entries of one hash.
    groups: HashTable<Group>,
    hasher: IdHasher,
}

struct Group {
    conn: u64,
    // Shared with each member's lifecycle (`Lifecycle::record_group`).
    key: Arc<Id>,
    members: Vec<SharedLifecycle>,
}

impl Groups {
    pub(super) fn new() -> Self {
        Self {
            groups: HashTable::new(),
            hasher: IdHasher::new(),
        }
    }

    /// How many groups have a member now.
    pub(super) fn len(&self) -> usize {
        self.groups.len()
    }

    /// Put `lifecycle` in the group `key` of its connection, as the group of its admission (`at_admission`) or
    /// one it is bound to later. Returns `false` if it was in it already.
    pub(super) fn join(
        &mut self,
        lifecycle: &SharedLifecycle,
        key: Id,
        at_admission: bool,
    ) -> bool {
        if lifecycle.in_group(&key) {
            return false;
        }
        let conn = lifecycle.conn();
        let hash = self.hasher.hash(&key);
        let shared = match self
            .groups
            .find_mut(hash, |group| group.conn == conn && *group.key == key)
        {
            Some(group) => {
                group.members.push(lifecycle.clone());
                group.key.clone()
            }
            None => {
                let key = Arc::new(key);
                let hasher = &self.hasher;
                self.groups.insert_unique(
                    hash,
                    Group {
                        conn,
                        key: key.clone(),
                        members: vec![lifecycle.clone()],
                    },
                    |group| hasher.hash(&group.key),
                );
                key
            }
        };
        lifecycle.record_group(shared, at_admission);
        true
    }

    /// Take `lifecycle` out of every group it is in; a group left empty goes.
    pub(super) fn leave(&mut self, lifecycle: &SharedLifecycle) {
        let conn = lifecycle.conn();
        let (groups, hasher) = (&mut self.groups, &self.hasher);
        lifecycle.leave_groups(|key| {
            let found = groups.find_entry(hasher.hash(key), |group| {
                group.conn == conn && *group.key == *key
            });
            let Ok(mut entry) = found else {
                return;
            };
            let members = &mut entry.get_mut().members;
            members.retain(|member| !SharedLifecycle::ptr_eq(member, lifecycle));
            if members.is_empty() {
                entry.remove();
            }
        });
    }

    /// The members of group `key` of connection `conn` (of every connection, for [`WHOLE_SCOPE`]).
    pub(super) fn members(&self, conn: u64, key: &Id) -> Vec<SharedLifecycle> {
        self.groups
            .iter_hash(self.hasher.hash(key))
            .filter(|group| (conn == WHOLE_SCOPE || group.conn == conn) && *group.key == *key)
            .flat_map(|group| group.members.iter().cloned())
            .collect()
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
    fn members_are_found_by_connection_and_key_and_leave_every_group() {
        let mut groups = Groups::new();
        let (a1, a2, b, other_conn) = (entry(1, 1), entry(2, 1), entry(3, 1), entry(1, 2));
        let (a, session_b) = (Id::from("a"), Id::from("b"));
        assert!(groups.join(&a1, a.clone(), true));
        assert!(!groups.join(&a1, a.clone(), false), "once per group");
        assert!(groups.join(&a2, a.clone(), true));
        assert!(
            groups.join(&a2, Id::from(7), false),
            "a request in two groups"
        );
        assert!(!groups.join(&a2, Id::from(7), false), "once per group");
        assert!(groups.join(&b, session_b.clone(), false));
        assert!(groups.join(&other_conn, a.clone(), true));
        assert_eq!(a2.group(), Some(&a), "the group of its admission");
        assert_eq!(
            b.group(),
            None,
            "bound later: not the group of its admission"
        );
        assert_eq!(groups.len(), 4);

        let in_a = groups.members(1, &a);
        assert_eq!(in_a.len(), 2);
        assert!(in_a.iter().all(|m| m.conn() == 1 && m.id() != &Id::from(3)));
        assert_eq!(groups.members(2, &a).len(), 1, "another connection's group");
        assert_eq!(groups.members(WHOLE_SCOPE, &a).len(), 3);
        assert!(groups.members(1, &Id::from("none")).is_empty());

        groups.leave(&a2);
        assert_eq!(groups.members(1, &a).len(), 1);
        assert!(
            groups.members(1, &Id::from(7)).is_empty(),
            "emptied groups go"
        );
        groups.leave(&a2);
        for member in [&a1, &b, &other_conn] {
            groups.leave(member);
        }
        assert_eq!(groups.len(), 0);
        assert!(
            !b.in_group(&session_b),
            "a bound group is forgotten as it is left"
        );
        assert!(
            a1.in_group(&a),
            "the group of its admission stays its handler's"
        );
    }
}
