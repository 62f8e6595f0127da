//! Progress reports from a handler to the peer, in the dialect's shape.
//!
//! A request that carries a progress token (LSP's `workDoneToken`, MCP's `_meta.progressToken`) can report
//! progress: [`Request::progress`] gives a [`Progress`] handle, or `None` if the request carried no token (a
//! report must never be sent for a request that did not ask for it). Each report also counts as activity for a
//! [`TimeoutLayer`](crate::timeout::TimeoutLayer) with an idle window: it pushes the request's deadline back.
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

use std::{fmt, sync::Arc};

use serde_json::Value;

use crate::{context::RequestContext, dialect::Dialect, message::Request, outbox::Outbox};

/// One progress report.
#[derive(Clone, Debug, PartialEq)]
pub struct ProgressUpdate {
    /// How far along: it should increase with each report.
    pub progress: f64,
    /// The total, if known.
    pub total: Option<f64>,
    /// A human-readable message.
    pub message: Option<String>,
}

impl ProgressUpdate {
    /// A report of `progress` (no total, no message).
    pub fn new(progress: f64) -> Self {
        Self {
            progress,
            total: None,
            message: None,
        }
    }

    /// Set the total.
    pub fn total(mut self, total: f64) -> Self {
        self.total = Some(total);
        self
    }

    /// Set the message.
    pub fn message(mut self, message: impl Into<String>) -> Self {
        self.message = Some(message.into());
        self
    }

    /// Progress as a percentage from 0 to 100, when there is a total to measure it against.
    pub fn percentage(&self) -> Option<u32> {
        let total = self.total.filter(|total| *total > 0.0)?;
        // The clamp makes the cast exact: NaN becomes 0, the rest is within 0..=100.
        Some((self.progress / total * 100.0).clamp(0.0, 100.0) as u32)
    }
}

/// What a dialect renders into a progress notification.
#[derive(Clone, Copy, Debug)]
pub enum ProgressEvent<'a> {
    /// A report; `first` is true for the first one of the request (LSP opens its progress with `begin`).
    Report {
        /// Whether this is the request's first report.
        first: bool,
        /// The report.
        update: &'a ProgressUpdate,
    },
    /// The handler is done reporting (LSP closes its progress with `end`).
    End,
}

/// The part of a dialect that progress needs, object-safe so a context can carry it.
pub(crate) trait ProgressFormat: Send + Sync {
    fn token(&self, request: &Request) -> Option<Value>;
    fn notification(&self, token: &Value, event: ProgressEvent<'_>) -> Option<Request>;
}

impl<D: Dialect> ProgressFormat for D {
    fn token(&self, request: &Request) -> Option<Value> {
        self.progress_token(request)
    }

    fn notification(&self, token: &Value, event: ProgressEvent<'_>) -> Option<Request> {
        self.progress_notification(token, event)
    }
}

/// Reports progress of one request to the peer. Dropping it ends the progress where the dialect has an end
/// (LSP's `end`).
pub struct Progress {
    token: Value,
    context: RequestContext,
    outbox: Outbox,
    format: Arc<dyn ProgressFormat>,
    reported: std::sync::atomic::AtomicBool,
}

impl Progress {
    pub(crate) fn new(request: &Request) -> Option<Self> {
        let context = request.context()?;
        let format = context.progress_format()?.clone();
        let outbox = request.connection()?.outbox().clone();
        let token = format.token(request)?;
        Some(Self {
            token,
            context: context.clone(),
            outbox,
            format,
            reported: Default::default(),
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
        };
        match self.format.notification(&self.token, event) {
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
            if let Some(end) = self.format.notification(&self.token, ProgressEvent::End) {
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
