use std::fmt;

use crate::context::CancelReason;

/// The request was cancelled: the outcome of a request whose cancel won the race against its handler.
///
/// The [`ErrorMapLayer`](crate::ErrorMapLayer) turns it into the dialect's cancelled reply (or no reply).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cancelled {
    reason: CancelReason,
}

impl Cancelled {
    /// A cancellation for `reason`, for layers and services of your own that settle a request as cancelled.
    pub fn new(reason: CancelReason) -> Self {
        Self { reason }
    }

    /// Why the request was cancelled.
    pub fn reason(&self) -> &CancelReason {
        &self.reason
    }
}

impl fmt::Display for Cancelled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "request cancelled ({})", self.reason)
    }
}

impl std::error::Error for Cancelled {}
