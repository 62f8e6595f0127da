//! What a handler sees of its request's cancellation: [`RequestContext`].

use std::{fmt, sync::Arc};

use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

use crate::{
    dialect::Dialect,
    lifecycle::{Deadline, SharedLifecycle},
    message::Id,
    reason::CancelReason,
};

/// A request's cancellation context, given to the request by the cancel layer (see
/// [`Request::context`](crate::Request::context)).
///
/// Cloning is cheap: every clone observes the same request.
///
/// # Example
///
/// ```
/// use tower_cancel::{Request, ErrorObject};
///
/// async fn handler(req: Request) -> Result<serde_json::Value, ErrorObject> {
///     let ctx = req.context().cloned().expect("behind a CancelLayer");
///     tokio::select! {
///         _ = ctx.cancelled() => Err(ErrorObject::new(-32800, "stopped early")),
///         _ = tokio::time::sleep(std::time::Duration::from_millis(10)) => Ok(serde_json::json!("done")),
///     }
/// }
/// ```
#[derive(Clone)]
pub struct RequestContext {
    lifecycle: SharedLifecycle,
    // The cancel layer's dialect, for the request's progress reports, only where the request's connection cannot
    // name it: its scope speaks no dialect of its own. Otherwise the scope's dialect is the one, read through the
    // connection each report needs anyway (`progress::format_of`), so that a request does not pay a shared
    // handle's clone and drop.
    progress: Option<Arc<dyn Dialect>>,
}

impl RequestContext {
    pub(crate) fn new(lifecycle: SharedLifecycle, progress: Option<Arc<dyn Dialect>>) -> Self {
        Self {
            lifecycle,
            progress,
        }
    }

    /// The request's id.
    pub fn id(&self) -> &Id {
        self.lifecycle.id()
    }

    /// The group the request was put in at admission ([`CancelLayer::group_by_param`](crate::CancelLayer::group_by_param):
    /// its ACP session), if any. A group cancel of it ends the request with
    /// [`CancelReason::Group`](crate::CancelReason::Group).
    pub fn group(&self) -> Option<&Id> {
        self.lifecycle.group()
    }

    /// The token that fires when the request is cancelled, from any source. Hand out
    /// [`child_token`](CancellationToken::child_token)s to sub-tasks so they stop with the request.
    ///
    /// The token only reports: cancelling it does not cancel the request (use [`cancel`](Self::cancel)). It is
    /// made on the first call, so a handler that never asks for it costs no token.
    pub fn token(&self) -> &CancellationToken {
        self.lifecycle.token()
    }

    /// A token that fires when this request is cancelled, for in-process sub-operations (cancelling it does not
    /// cancel the request).
    pub fn child_token(&self) -> CancellationToken {
        self.lifecycle.token().child_token()
    }

    /// Resolves when the request is cancelled.
    pub fn cancelled(&self) -> WaitForCancellationFuture<'_> {
        self.lifecycle.token().cancelled()
    }

    /// Whether the request has been cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.lifecycle.is_cancelled()
    }

    /// Whether the request is still unsettled: neither answered nor cancelled.
    pub fn is_running(&self) -> bool {
        self.lifecycle.is_running()
    }

    /// Whether any source may cancel the request: `false` for the requests its dialect never lets be cancelled
    /// (`initialize`; in the ACP draft, everything before initialization). A timeout is a cancellation, so such a
    /// request gets no deadline either.
    pub fn is_cancellable(&self) -> bool {
        self.lifecycle.is_cancellable()
    }

    /// Why the request was cancelled, once it has been.
    pub fn reason(&self) -> Option<CancelReason> {
        self.lifecycle.reason().cloned()
    }

    /// Cancel the request from this side (reason [`CancelReason::Local`]). Returns `false` if it was already
    /// settled, or can never be cancelled (`initialize`).
    pub fn cancel(&self, reason: impl Into<String>) -> bool {
        self.cancel_with(CancelReason::local(reason))
    }

    /// Cancel the request for `reason`: the way every source of cancellation ends a request (a timeout layer's
    /// expiry is `cancel_with(CancelReason::Timeout)`). Returns `true` if this call settled the request; `false`
    /// if it was already settled (or another source's cancel is settling it now), or can never be cancelled.
    pub fn cancel_with(&self, reason: CancelReason) -> bool {
        self.lifecycle.cancel(reason)
    }

    /// The request's deadline, if a [`TimeoutLayer`](crate::timeout::TimeoutLayer) gave it one. With an idle
    /// window, progress reports push it back.
    pub fn deadline(&self) -> Option<Instant> {
        self.lifecycle.deadline().map(Deadline::at)
    }

    /// Give the request its deadline. Only the first call counts, so that the outermost timeout layer wins, and
    /// a request that cannot be cancelled takes none: returns whether this one was taken. Setting it does not
    /// arm a timer: the layer that sets it cancels the request when it passes ([`cancel_with`](Self::cancel_with)).
    pub fn set_deadline(&self, deadline: Deadline) -> bool {
        self.lifecycle.is_cancellable() && self.lifecycle.set_deadline(deadline)
    }

    /// Count activity on the request: pushes back an idle deadline (progress reports do this themselves).
    pub fn touch(&self) {
        if let Some(deadline) = self.lifecycle.deadline() {
            deadline.push_back(Instant::now());
        }
    }

    pub(crate) fn lifecycle(&self) -> &SharedLifecycle {
        &self.lifecycle
    }

    pub(crate) fn progress_format(&self) -> Option<&Arc<dyn Dialect>> {
        self.progress.as_ref()
    }
}

impl fmt::Debug for RequestContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequestContext")
            .field("id", self.id())
            .field("cancelled", &self.is_cancelled())
            .field("reason", &self.lifecycle.reason())
            .field("deadline", &self.deadline())
            .finish()
    }
}
