//! Sessions of the `2025-11-25` revision: `initialize` mints a random id, later POSTs name it, DELETE ends it.

use std::{fmt, fmt::Write, sync::Arc, time::Duration};

use tower_cancel::{dialect::Mcp, Scope};

use crate::{
    front::{Quota, Settings},
    scopes::{Full, Lease, Scoped, Scopes},
};

/// A session: the scope its requests share (a cancel POSTed in it reaches its requests only), and the count of
/// its requests in flight, bounded by the settings' `max_in_flight_per_scope`.
#[derive(Debug)]
pub(crate) struct Session {
    scope: Scope,
    pub(crate) in_flight: Quota,
    id: String,
    on_end: Option<OnEnd>,
}

/// Called with a session's id once the session is over: out of the table (ended, expired or evicted) and no
/// request of it left running.
#[derive(Clone)]
pub(crate) struct OnEnd(pub(crate) Arc<dyn Fn(&str) + Send + Sync>);

impl fmt::Debug for OnEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("OnEnd")
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Some(OnEnd(on_end)) = &self.on_end {
            // A panic of the user's callback must not unwind through the table's drop.
            let ended = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| on_end(&self.id)));
            if ended.is_err() {
                tracing::error!(session = %self.id, "the session-end callback panicked");
            }
        }
    }
}

impl Scoped for Session {
    fn scope(&self) -> &Scope {
        &self.scope
    }
}

pub(crate) type SessionLease = Lease<String, Session>;

/// The table of open sessions.
#[derive(Clone, Debug)]
pub(crate) struct Sessions {
    table: Scopes<String, Session>,
    on_end: Option<OnEnd>,
}

impl Sessions {
    /// Sessions idle for `idle` are dropped, and at most `max` are kept: when the table is full, a new session
    /// takes the place of the one idle for longest with nothing in flight (its client gets 404 and initializes
    /// again, as the revision says clients do), so that a flood of `initialize` cannot lock new clients out.
    pub(crate) fn new(idle: Duration, max: usize) -> Self {
        Self {
            table: Scopes::new(idle, max).evict_idle_when_full(),
            on_end: None,
        }
    }

    /// These sessions, `on_end` called with the id of each once it is over.
    pub(crate) fn on_end(mut self, on_end: Option<OnEnd>) -> Self {
        self.on_end = on_end;
        self
    }

    /// What is called once a session is over.
    pub(crate) fn end_hook(&self) -> Option<OnEnd> {
        self.on_end.clone()
    }

    /// A new session under a fresh random id; its scope attached to the replica when the server is one of
    /// several.
    pub(crate) fn open(&self, settings: &Settings) -> Result<SessionLease, Full> {
        let id = mint();
        let scope = settings.attach(|| replica_key(&id), None, Scope::with_dialect(Mcp));
        let in_flight = settings.scope_quota();
        let session = Session {
            scope,
            in_flight,
            id: id.clone(),
            on_end: self.on_end.clone(),
        };
        self.table.insert(id, session)
    }

    pub(crate) fn get(&self, id: &str) -> Option<SessionLease> {
        self.table.lease(&id.to_owned())
    }

    /// End a session: what it has in flight is cancelled with `reason`.
    pub(crate) fn close(&self, id: &str, reason: tower_cancel::CancelReason) -> bool {
        self.table.remove(&id.to_owned(), reason).is_some()
    }

    /// End every session (a shutdown): what they have in flight is cancelled with `reason`.
    pub(crate) fn close_all(&self, reason: tower_cancel::CancelReason) {
        self.table.remove_all(reason);
    }

    pub(crate) fn len(&self) -> usize {
        self.table.len()
    }
}

/// The key of session `id`'s scope on every replica.
pub(crate) fn replica_key(id: &str) -> String {
    format!("mcp:session:{id}")
}

/// 128 bits from the operating system's generator, as 32 hex digits (visible ASCII, as the revision asks).
fn mint() -> String {
    let mut bytes = [0u8; 16];
    // The OS generator failing is not something a server can go on from.
    getrandom::fill(&mut bytes).expect("the operating system's random generator failed");
    bytes
        .iter()
        .fold(String::with_capacity(32), |mut id, byte| {
            let _ = write!(id, "{byte:02x}");
            id
        })
}

#[cfg(test)]
mod tests {
    #[test]
    fn session_ids_are_long_random_and_visible_ascii() {
        let a = super::mint();
        let b = super::mint();
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
