//! What the cancel layer does with a message as it arrives, in the dialect of the request's scope: a cancel
//! consumed, a notification passed on, a request registered.

use std::sync::Arc;

use super::{
    settlement::{self, Settlement},
    GroupBy,
};
use crate::{
    context::RequestContext,
    dialect::{Dialect, Recognized},
    lifecycle::{self, Lifecycle},
    metrics::DialectLabel,
    outcome::CancelOutcome,
    reason::CancelReason,
    registry::DuplicateId,
    request::Request,
    scope::Connection,
    trace_context,
};

/// What became of a message at the cancel layer.
pub(super) enum Admitted {
    /// A cancel message (or a malformed one): handled here, never passed on.
    Consumed,
    /// A notification that is not a cancel: passed on to the service.
    Notification,
    /// A request whose id is already in flight on its connection: refused.
    Duplicate(DuplicateId),
    /// A request, registered: its context for the handler, and what settles it.
    Request(RequestContext, Settlement),
}

/// Admit `req`, which arrived on `connection`, under `dialect` (the scope's, or the layer's where the scope speaks
/// none). `progress` is the same dialect, shared, for the request's progress reports. Generic rather than
/// `&dyn Dialect`: a layer's own dialect (the presets' unit types) is then called directly.
pub(super) fn admit<X: Dialect + ?Sized>(
    dialect: &X,
    progress: &Arc<dyn Dialect>,
    connection: &Connection,
    group_by: Option<&GroupBy>,
    req: &Request,
) -> Admitted {
    let session = connection.session();
    let Some(id) = req.id().cloned() else {
        match dialect.recognize(req, session) {
            Recognized::Cancel(notice) => {
                let reason = CancelReason::peer(notice.reason);
                let outcome = connection.cancel(&notice.id, reason.clone());
                tracing::debug!(
                    dialect = dialect.name(),
                    id = %notice.id,
                    reason = reason.text().unwrap_or(""),
                    ?outcome,
                    "cancel received"
                );
                if let (CancelOutcome::Cancelled, Some(text)) = (outcome, reason.text()) {
                    tracing::info!(id = %notice.id, reason = text, "request cancelled by the peer");
                }
                return Admitted::Consumed;
            }
            Recognized::Malformed => {
                tracing::debug!(
                    dialect = dialect.name(),
                    params = req.params().map(|p| p.get()),
                    "malformed cancel ignored"
                );
                return Admitted::Consumed;
            }
            Recognized::CancelGroup(group) => {
                let cancelled = connection.cancel_group(&group.key, group.reason);
                tracing::debug!(
                    dialect = dialect.name(),
                    group = %group.key,
                    cancelled,
                    "group cancel received"
                );
                // Passed on: the application may own the group too (an SDK's own `session/cancel` handler, an
                // LSP progress token of its own).
                return Admitted::Notification;
            }
            Recognized::NotACancel => return Admitted::Notification,
        }
    };

    dialect.observe_request(req, session);
    let span = settlement::request_span(&id, req.method());
    // Before the span is first entered: its parent is fixed then.
    trace_context::adopt_incoming(dialect, &span, req);
    let lifecycle = if dialect.is_cancellable(req.method(), session) {
        Lifecycle::new(id, connection.key())
    } else {
        // Registered all the same (its id is in flight), and given a context (id, progress), but nothing can
        // cancel it: no timeout either.
        Lifecycle::uncancellable(id, connection.key())
    };
    let lifecycle = lifecycle::share(
        lifecycle
            .with_partial_results(dialect.allows_partial_result())
            .with_initializes(dialect.initializes(req.method())),
    );
    if dialect.ends_with_cancel(req.method()) {
        lifecycle.announce_end(progress.clone());
    }
    // Only what can be cancelled is grouped: a group cancel could not reach the rest.
    let group = group_by
        .filter(|_| lifecycle.is_cancellable())
        .and_then(|group_by| group_by.key(req));
    let registration = match connection.register(lifecycle.clone(), group) {
        Ok(registration) => registration,
        Err(duplicate) => {
            settlement::record_outcome(&span, "duplicate", None);
            return Admitted::Duplicate(duplicate);
        }
    };
    // The scope's own dialect is found through the request's connection when it reports; only the layer's, for a
    // scope that speaks none, is handed to the context (see `RequestContext::progress_format`). A request without
    // a connection reports to nobody.
    let layers_own = req.connection().is_some() && connection.scope().dialect().is_none();
    let context = RequestContext::new(lifecycle, layers_own.then(|| progress.clone()));
    let settlement = Settlement::new(
        registration,
        span,
        DialectLabel::new(dialect.name()),
        progress,
        req.method(),
    );
    Admitted::Request(context, settlement)
}
