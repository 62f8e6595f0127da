//! What one progress report says ([`ProgressUpdate`]), and what a dialect renders into a progress notification
//! ([`ProgressEvent`]): plain data, shared by the dialects, the handler's [`Progress`](crate::progress::Progress)
//! and a [`Peer`](crate::Peer)'s progress callbacks.

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
        /// Whether the peer may cancel the work under this progress: a token this side created
        /// ([`Request::create_progress`](crate::Request::create_progress)), whose cancel (LSP's
        /// `window/workDoneProgress/cancel`) cancels the request. LSP's `begin` says `"cancellable": true` then.
        cancellable: bool,
    },
    /// The handler is done reporting (LSP closes its progress with `end`).
    End,
}
