use serde_json::Value;

use crate::{
    context::CancelReason,
    dialect::Dialect,
    message::{Id, Request},
    progress::ProgressUpdate,
    scope::SessionState,
};

/// The part of a dialect a peer needs, object-safe so that `Peer` (and a `Scope`) is one type for every dialect.
pub(crate) trait PeerDialect: Send + Sync {
    fn name(&self) -> &'static str;
    fn cancel_message(&self, id: &Id, reason: &CancelReason) -> Request;
    fn may_send_cancel(&self, method: &str, session: &SessionState) -> bool;
    fn waits_after_cancel(&self) -> bool;
    fn observe_response(&self, method: &str, result: &Value, session: &SessionState);
    fn read_progress(&self, notification: &Request) -> Option<(Value, ProgressUpdate)>;
    fn attach_progress_token(&self, params: &mut Value, token: &Value) -> bool;
}

impl<D: Dialect> PeerDialect for D {
    fn name(&self) -> &'static str {
        Dialect::name(self)
    }

    fn cancel_message(&self, id: &Id, reason: &CancelReason) -> Request {
        Dialect::cancel_message(self, id, reason)
    }

    fn may_send_cancel(&self, method: &str, session: &SessionState) -> bool {
        Dialect::may_send_cancel(self, method, session)
    }

    fn waits_after_cancel(&self) -> bool {
        Dialect::waits_after_cancel(self)
    }

    fn observe_response(&self, method: &str, result: &Value, session: &SessionState) {
        Dialect::observe_response(self, method, result, session);
    }

    fn read_progress(&self, notification: &Request) -> Option<(Value, ProgressUpdate)> {
        Dialect::read_progress(self, notification)
    }

    fn attach_progress_token(&self, params: &mut Value, token: &Value) -> bool {
        Dialect::attach_progress_token(self, params, token)
    }
}
