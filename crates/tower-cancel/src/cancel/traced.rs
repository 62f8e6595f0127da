//! The span of a request that a subscriber traces: what it records beyond its `outcome`, in OpenTelemetry's
//! words (the RPC attributes of the reply, the span's status, the `cancel` event). Kept only for an enabled span,
//! so that a request nobody traces pays nothing for it.

use std::sync::Arc;

use tracing::Span;

use crate::{
    dialect::{CancelledReply, Dialect},
    error_map::error_object,
    message::ErrorObject,
    metrics,
    outcome::BoxError,
    reason::{CancelReason, Cancelled},
};

/// An enabled request span, with what its end needs to say which reply the request got.
pub(super) struct Traced {
    span: Span,
    // The dialect that renders the request's reply (the one the cancel layer read it in), and whether the
    // request's method opted in to a distinct server-cancel reply: the error code of a cancelled request is the
    // code of that reply.
    dialect: Arc<dyn Dialect>,
    server_cancellable: bool,
    // Whether a group cancel ends the request with a result rather than an error (ACP's `session/prompt`): then
    // its reply has no error code.
    answers_group: bool,
    // The `cancel` event was emitted: once per request.
    cancel_noted: bool,
}

impl Traced {
    pub(super) fn new(
        span: Span,
        dialect: Arc<dyn Dialect>,
        server_cancellable: bool,
        answers_group: bool,
    ) -> Self {
        Self {
            span,
            dialect,
            server_cancellable,
            answers_group,
            cancel_noted: false,
        }
    }

    pub(super) fn span(&self) -> &Span {
        &self.span
    }

    /// The request was cancelled for `reason`: the span's `cancel` event, the first time only. Emitted when the
    /// request's future first sees the cancel, or at its end if it never polled after it (dropped).
    pub(super) fn note_cancel(&mut self, reason: &CancelReason) {
        if std::mem::replace(&mut self.cancel_noted, true) {
            return;
        }
        tracing::info!(
            parent: &self.span,
            cancel.reason = metrics::reason_label(reason),
            cancel.source = source(reason),
            cancel.text = reason.text(),
            "cancel"
        );
    }

    /// Record how the request ended: `reason` if a cancel won, `output` what its future resolved to (`None`:
    /// dropped unsettled), `outcome` the span's word for it.
    pub(super) fn record_end(
        &mut self,
        reason: Option<&CancelReason>,
        output: Option<Result<(), &BoxError>>,
        outcome: &str,
    ) {
        if let Some(reason) = reason {
            self.note_cancel(reason);
        }
        let reply = output
            .and_then(Result::err)
            .and_then(|error| self.reply_error(error));
        let span = &self.span;
        if let Some(reply) = &reply {
            span.record("rpc.jsonrpc.error_code", reply.code);
            span.record("rpc.response.status_code", reply.code.to_string());
        }
        // `error.type`: why the request did not complete. The cancel's reason where a cancel won (the issue's
        // choice, finer than the reply's code, which is the same -32800 for every LSP cancel), else the code of
        // the handler's error.
        let failed = matches!(outcome, "failed" | "panicked");
        match (reason, &reply) {
            (Some(reason), _) => span.record("error.type", metrics::reason_label(reason)),
            (None, Some(reply)) if failed => span.record("error.type", reply.code.to_string()),
            _ => span,
        };
        // Status error for a timeout and a handler that failed. A peer's cancel (and the other cancels) leave it
        // unset: whether a cancel the caller asked for is an error is not settled in OpenTelemetry's conventions,
        // and the caller got what it asked for.
        let timed_out = matches!(reason, Some(CancelReason::Timeout));
        if timed_out || failed {
            span.record("otel.status_code", "error");
            let description = match &reply {
                Some(reply) => reply.message.as_str(),
                None if timed_out => "timeout",
                None => outcome,
            };
            span.record("otel.status_description", description);
        }
    }

    /// The error reply the request gets for `error`, as the error map renders it (it runs after this layer):
    /// the dialect's cancelled reply (`None` where the dialect sends none), or the handler's error.
    fn reply_error(&self, error: &BoxError) -> Option<ErrorObject> {
        match error.downcast_ref::<Cancelled>() {
            Some(cancelled) if cancelled.was_announced() => None,
            Some(cancelled)
                if self.answers_group
                    && matches!(cancelled.reason(), CancelReason::Group { .. }) =>
            {
                None
            }
            Some(cancelled) => {
                match self
                    .dialect
                    .cancelled_reply(cancelled.reason(), self.server_cancellable)
                {
                    CancelledReply::Error(object) => Some(object),
                    CancelledReply::Nothing => None,
                }
            }
            None => Some(error_object(&**error)),
        }
    }
}

/// Which side decided the cancel: the peer (its cancel message, its hang-up) or this side (a deadline, a
/// shutdown, a parent's cancel, its own code).
fn source(reason: &CancelReason) -> &'static str {
    match reason {
        CancelReason::Peer { .. } | CancelReason::Group { .. } | CancelReason::Disconnect => "peer",
        CancelReason::Timeout
        | CancelReason::Shutdown
        | CancelReason::Parent
        | CancelReason::Local { .. } => "local",
    }
}
