//! Progress reports from a handler to the peer, in the dialect's shape.
//!
//! A request that carries a progress token (LSP's `workDoneToken`, MCP's `_meta.progressToken`) can report
//! progress: [`Request::progress`] gives a [`Progress`] handle, or `None` if the request carried no token (a
//! report must never be sent for a request that did not ask for it). Each report also counts as activity for a
//! [`TimeoutLayer`](crate::timeout::TimeoutLayer) with an idle window: it pushes the request's deadline back.
//!
//! Where the protocol lets this side create a token on the peer (LSP's `window/workDoneProgress/create`),
//! [`Request::create_progress`] does, and gives a [`Progress`] under it; the peer's cancel of that token
//! (`window/workDoneProgress/cancel`) cancels the request, and its first report says so (`"cancellable": true`).
//!
//! # Example
//!
//! ```
//! use tower_cancel::{progress::ProgressUpdate, ErrorObject, Request};
//!
//! async fn index(req: Request) -> Result<serde_json::Value, ErrorObject> {
//!     let progress = req.progress();
//!     for step in 1..=3u32 {
//!         // ... a step of the work ...
//!         if let Some(progress) = &progress {
//!             progress.report(ProgressUpdate::new(f64::from(step)).total(3.0).message("indexing"));
//!         }
//!     }
//!     Ok(serde_json::json!({ "indexed": 3 }))
//! }
//! ```

mod created;

use std::{fmt, sync::Arc};

use serde_json::Value;

pub use crate::progress_update::{ProgressEvent, ProgressUpdate};
use crate::{context::RequestContext, dialect::Dialect, outbox::Outbox, request::Request};

impl Request {
    /// A handle to report progress to the peer, if the request carried a progress token, passed a
    /// [`CancelLayer`](crate::CancelLayer) and came over a connection that can send (see
    /// [`progress`](crate::progress)).
    pub fn progress(&self) -> Option<Progress> {
        Progress::new(self)
    }
}

/// The dialect `request`'s progress reports are written in: the cancel layer's, where the request's scope speaks
/// none (its context holds it), else its scope's. `None` for a request that passed no cancel layer or came without
/// a connection (it has nobody to report to).
fn format_of(request: &Request) -> Option<&Arc<dyn Dialect>> {
    let context = request.context()?;
    let connection = request.connection()?;
    context
        .progress_format()
        .or_else(|| connection.scope().dialect())
}

/// Reports progress of one request to the peer. Dropping it ends the progress where the dialect has an end
/// (LSP's `end`).
pub struct Progress {
    token: Value,
    context: RequestContext,
    outbox: Outbox,
    format: Arc<dyn Dialect>,
    reported: std::sync::atomic::AtomicBool,
    // A token this side created (`Request::create_progress`): the peer may cancel the request by it.
    cancellable: bool,
}

impl Progress {
    fn new(request: &Request) -> Option<Self> {
        let format = format_of(request)?;
        let token = format.progress_token(request, request.extensions())?;
        Self::with_token(request, token, false)
    }

    /// Progress of `request` under `token`; `cancellable` for a token this side created.
    fn with_token(request: &Request, token: Value, cancellable: bool) -> Option<Self> {
        let context = request.context()?;
        let format = format_of(request)?.clone();
        let outbox = request.connection()?.outbox().clone();
        Some(Self {
            token,
            context: context.clone(),
            outbox,
            format,
            reported: Default::default(),
            cancellable,
        })
    }

    /// The request's progress token.
    pub fn token(&self) -> &Value {
        &self.token
    }

    /// Send a report, and push back the request's idle deadline. Returns `false` if the request is settled
    /// (answered or cancelled: progress stops with the request, as MCP requires) or the connection is gone;
    /// nothing is sent then.
    pub fn report(&self, update: ProgressUpdate) -> bool {
        if !self.context.is_running() {
            return false;
        }
        let first = !self
            .reported
            .swap(true, std::sync::atomic::Ordering::AcqRel);
        self.context.touch();
        let event = ProgressEvent::Report {
            first,
            update: &update,
            cancellable: self.cancellable,
        };
        match self.format.progress_notification(&self.token, event) {
            // Dropped, not queued, when the peer is not reading (see `Outbox::send_if_room`).
            Some(notification) => self.outbox.send_if_room(&notification).is_ok(),
            None => false,
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        // After the handler's answer nothing more is sent for the request, the end included: the answer ended it.
        // A cancelled request's progress is ended, before the dialect's cancelled reply (the handler is dropped
        // first).
        let answered = !self.context.is_running() && !self.context.is_cancelled();
        if *self.reported.get_mut() && !answered {
            if let Some(end) = self
                .format
                .progress_notification(&self.token, ProgressEvent::End)
            {
                let _ = self.outbox.send_if_room(&end);
            }
        }
    }
}

impl fmt::Debug for Progress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Progress")
            .field("token", &self.token)
            .field("request", self.context.id())
            .finish()
    }
}
