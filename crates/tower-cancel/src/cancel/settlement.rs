//! The end of a request: its registry entry let go of, then how it ended reported (its span's `outcome`, the
//! metrics), exactly once, whether its response future resolved or was dropped.

use std::{fmt, sync::Arc};

use tracing::{span::Entered, Span};

use super::{traced::Traced, Panicked};
use crate::{
    dialect::Dialect,
    lifecycle::Lifecycle,
    message::Id,
    metrics::{self, DialectLabel},
    outcome::BoxError,
    reason::CancelReason,
    scope::{Connection, Registration},
};

/// The span every request with an id gets (see the crate docs' "Tracing"). Its `outcome` and `reason` are
/// recorded when it ends, and so are the OpenTelemetry fields of its reply (`Traced::record_end`). The RPC fields
/// are written twice, in the names of OpenTelemetry's semantic conventions as the issue asked for them (deprecated
/// since semconv 1.38) and in their current ones, as semconv's own migration does.
pub(super) fn request_span(id: &Id, method: &str) -> Span {
    tracing::debug_span!(
        "request",
        id = %id,
        method,
        outcome = tracing::field::Empty,
        reason = tracing::field::Empty,
        otel.name = method,
        otel.kind = "server",
        otel.status_code = tracing::field::Empty,
        otel.status_description = tracing::field::Empty,
        rpc.system = "jsonrpc",
        rpc.system.name = "jsonrpc",
        rpc.method = method,
        rpc.jsonrpc.version = "2.0",
        jsonrpc.protocol.version = "2.0",
        rpc.jsonrpc.request_id = %id,
        jsonrpc.request.id = %id,
        rpc.jsonrpc.error_code = tracing::field::Empty,
        rpc.response.status_code = tracing::field::Empty,
        error.type = tracing::field::Empty,
    )
}

/// Record a request's outcome on its span.
pub(super) fn record_outcome(span: &Span, outcome: &str, reason: Option<&str>) {
    span.record("outcome", outcome);
    if let Some(reason) = reason {
        span.record("reason", reason);
    }
}

/// A registered request until it settles. Dropping it unsettled (its response future dropped) settles it too.
pub(super) struct Settlement {
    // `None` once settled: dropping it removes the entry (and cancels a request nobody will read).
    registration: Option<Registration>,
    // Kept only when a subscriber enabled it: a disabled span is five words the request would carry for nothing,
    // the box one.
    span: Option<Box<Traced>>,
    // Zero-sized without the `metrics` feature.
    dialect: DialectLabel,
}

impl Settlement {
    /// `replies` is the dialect that renders the request's reply, and `method` the request's: what an enabled
    /// span records of its reply.
    pub(super) fn new(
        registration: Registration,
        span: Span,
        dialect: DialectLabel,
        replies: &Arc<dyn Dialect>,
        method: &str,
    ) -> Self {
        if registration.lifecycle().is_cancellable() {
            metrics::registered(dialect);
        }
        let span = (!span.is_disabled()).then(|| {
            let server_cancellable = replies.is_server_cancellable(method);
            let answers_group = replies.answers_group_cancel(method);
            Box::new(Traced::new(
                span,
                replies.clone(),
                server_cancellable,
                answers_group,
            ))
        });
        Self {
            registration: Some(registration),
            span,
            dialect,
        }
    }

    /// The request's lifecycle, until it settles.
    pub(super) fn lifecycle(&self) -> &Lifecycle {
        self.registration
            .as_ref()
            .expect("polled after settling")
            .lifecycle()
    }

    /// The connection the request came through, until it settles.
    pub(super) fn connection(&self) -> Option<&Connection> {
        self.registration.as_ref().map(Registration::connection)
    }

    /// Send the notice of the request's end, if its dialect announces it and this side ended it (see
    /// `Dialect::ends_with_cancel` and `Lifecycle::end_notice`; `answered`: its handler answered). Returns why it
    /// ended, if the notice was sent.
    pub(super) fn announce_end(&self, answered: bool) -> Option<CancelReason> {
        let registration = self.registration.as_ref()?;
        let lifecycle = registration.lifecycle();
        let notice = lifecycle.end_notice(answered)?;
        let connection = registration.connection();
        let sent = connection.outbox().send_request(&notice).is_ok();
        tracing::debug!(id = %lifecycle.id(), sent, "the request's end announced to the peer");
        Some(
            lifecycle
                .reason()
                .cloned()
                .unwrap_or_else(|| CancelReason::local("ended by this side")),
        )
    }

    /// Enter the request's span for one poll.
    pub(super) fn enter(&self) -> Option<Entered<'_>> {
        self.span.as_deref().map(|traced| traced.span().enter())
    }

    /// After a poll: if the request is cancelled, its span's `cancel` event (once).
    pub(super) fn note_cancel(&mut self) {
        if let (Some(traced), Some(registration)) = (&mut self.span, &self.registration) {
            if let Some(reason) = registration.lifecycle().reason() {
                traced.note_cancel(reason);
            }
        }
    }

    /// The request settled with `output` (the reply its future resolves to).
    pub(super) fn finish<T>(&mut self, output: &Result<T, BoxError>) {
        self.end(Some(output.as_ref().map(|_| ())));
    }

    fn end(&mut self, output: Option<Result<(), &BoxError>>) {
        let Some(registration) = &self.registration else {
            return;
        };
        // Settled first (a future dropped unsettled is cancelled), so that the outcome read below is the final one;
        // the entry goes when the registration is dropped, after.
        registration.let_go();
        let lifecycle = registration.lifecycle();
        if let Some(traced) = &mut self.span {
            let (outcome, reason) = outcome(lifecycle, output);
            record_outcome(traced.span(), outcome, reason);
            traced.record_end(lifecycle.reason(), output, outcome);
        }
        metrics::settled(self.dialect, lifecycle);
        self.registration = None;
    }
}

impl Drop for Settlement {
    fn drop(&mut self) {
        // Unsettled: the response future was dropped, and the registration's drop cancels the request.
        self.end(None);
    }
}

impl fmt::Debug for Settlement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settlement")
            .field(
                "id",
                &self.registration.as_ref().map(|r| r.lifecycle().id()),
            )
            .field("settled", &self.registration.is_none())
            .finish()
    }
}

/// The span's `outcome` (and `reason`) of a request once its registration is let go of: the lifecycle's word
/// first (a cancel that won is the outcome, whatever a cooperative handler answered), else the reply's. `None`
/// for a future dropped before its request settled.
fn outcome(
    lifecycle: &Lifecycle,
    output: Option<Result<(), &BoxError>>,
) -> (&'static str, Option<&'static str>) {
    if let Some(reason) = lifecycle.reason() {
        return ("cancelled", Some(metrics::reason_label(reason)));
    }
    match output {
        Some(Ok(())) => ("completed", None),
        Some(Err(error)) if error.is::<Panicked>() => ("panicked", None),
        Some(Err(_)) => ("failed", None),
        // Only a request that can never be cancelled gets here: a cancellable one was cancelled by the drop.
        None => ("dropped", None),
    }
}
