use std::{sync::Arc, time::Duration};

use http::Extensions;
use serde_json::Value;

use super::{CancelledReply, Dialect, Recognized};
use crate::{
    message::{Id, WireRequest},
    progress_update::{ProgressEvent, ProgressUpdate},
    reason::CancelReason,
    session::SessionState,
};

/// A dialect whose requests of some methods opted in to a distinct reply when the server cancels them (LSP's
/// ServerCancelled). Made by [`Lsp::server_cancellable`](super::Lsp::server_cancellable); everything else is the
/// wrapped dialect's.
#[derive(Clone, Debug)]
pub struct ServerCancellable<D> {
    dialect: D,
    methods: Arc<[String]>,
}

impl<D> ServerCancellable<D> {
    pub(crate) fn new<I, M>(dialect: D, methods: I) -> Self
    where
        I: IntoIterator<Item = M>,
        M: Into<String>,
    {
        Self {
            dialect,
            methods: methods.into_iter().map(Into::into).collect(),
        }
    }
}

impl<D: Dialect> Dialect for ServerCancellable<D> {
    fn name(&self) -> &'static str {
        self.dialect.name()
    }

    fn recognize(&self, notification: &WireRequest, session: &SessionState) -> Recognized {
        self.dialect.recognize(notification, session)
    }

    fn is_cancellable(&self, method: &str, session: &SessionState) -> bool {
        self.dialect.is_cancellable(method, session)
    }

    fn cancelled_reply(&self, reason: &CancelReason, server_cancellable: bool) -> CancelledReply {
        self.dialect.cancelled_reply(reason, server_cancellable)
    }

    fn initializes(&self, method: &str) -> bool {
        self.dialect.initializes(method)
    }

    fn is_server_cancellable(&self, method: &str) -> bool {
        // A handful of methods at most: a scan is cheaper than hashing.
        self.methods.iter().any(|m| m == method)
    }

    fn answers_group_cancel(&self, method: &str) -> bool {
        self.dialect.answers_group_cancel(method)
    }

    fn group_cancelled_result(&self, reason: &CancelReason) -> Value {
        self.dialect.group_cancelled_result(reason)
    }

    fn allows_partial_result(&self) -> bool {
        self.dialect.allows_partial_result()
    }

    fn cancel_message(&self, id: &Id, reason: &CancelReason) -> WireRequest {
        self.dialect.cancel_message(id, reason)
    }

    fn observe_request(&self, request: &WireRequest, session: &SessionState) {
        self.dialect.observe_request(request, session);
    }

    fn observe_response(&self, method: &str, result: &Value, session: &SessionState) {
        self.dialect.observe_response(method, result, session);
    }

    fn may_send_cancel(&self, method: &str, session: &SessionState) -> bool {
        self.dialect.may_send_cancel(method, session)
    }

    fn waits_after_cancel(&self) -> bool {
        self.dialect.waits_after_cancel()
    }

    fn progress_token(&self, request: &WireRequest, extensions: &Extensions) -> Option<Value> {
        self.dialect.progress_token(request, extensions)
    }

    fn progress_notification(
        &self,
        token: &Value,
        event: ProgressEvent<'_>,
    ) -> Option<WireRequest> {
        self.dialect.progress_notification(token, event)
    }

    fn read_progress(&self, notification: &WireRequest) -> Option<(Value, ProgressUpdate)> {
        self.dialect.read_progress(notification)
    }

    fn attach_progress_token(&self, params: &mut Value, token: &Value) -> bool {
        self.dialect.attach_progress_token(params, token)
    }

    fn progress_created(&self, outgoing: &WireRequest) -> Option<Id> {
        self.dialect.progress_created(outgoing)
    }

    fn create_progress(&self, token: &Id) -> Option<(&'static str, Value)> {
        self.dialect.create_progress(token)
    }

    fn attach_deadline(&self, params: &mut Value, field: &str, remaining: Duration) -> bool {
        self.dialect.attach_deadline(params, field, remaining)
    }

    fn carries_trace_context(&self) -> bool {
        self.dialect.carries_trace_context()
    }
}
