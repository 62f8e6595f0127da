//! A cancel as it travels between replicas.

use std::time::SystemTime;

use crate::{message::Id, reason::CancelReason};

/// A cancel that missed on the replica that received it, on its way to the others.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RemoteCancel {
    /// The key of the scope it is for ([`Replica::scope`](super::Replica::scope)); it reaches that scope only.
    pub scope: String,
    /// The id of the request to cancel.
    pub id: Id,
    /// Why, as it was given where the cancel arrived (a peer's reason text is kept).
    pub reason: CancelReason,
    /// Who sent the cancel, if the front end knows (a principal), for logs and audit.
    pub canceller: Option<String>,
    /// The replica that published it (its own cancels come back to it on some buses: it ignores them).
    pub origin: String,
    /// When it was published, by the origin's wall clock: monotonic times mean nothing on another host.
    pub sent_at: SystemTime,
}

impl RemoteCancel {
    /// A cancel of request `id` in the scope `scope`, published now by `origin`.
    pub fn new(
        scope: impl Into<String>,
        id: Id,
        reason: CancelReason,
        origin: impl Into<String>,
    ) -> Self {
        Self {
            scope: scope.into(),
            id,
            reason,
            canceller: None,
            origin: origin.into(),
            sent_at: SystemTime::now(),
        }
    }

    /// The same, naming who sent it.
    pub fn canceller(mut self, canceller: Option<String>) -> Self {
        self.canceller = canceller;
        self
    }

    /// The heap bytes it holds, for the bounds of the windows that keep it.
    pub(crate) fn heap_bytes(&self) -> usize {
        let id = match &self.id {
            Id::String(s) => s.len(),
            Id::Number(_) => 0,
        };
        self.scope.len()
            + id
            + self.reason.text().map_or(0, str::len)
            + self.canceller.as_ref().map_or(0, String::len)
            + self.origin.len()
    }
}
