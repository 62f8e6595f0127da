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

/// The handler panicked: the request's outcome is a failure (-32603), unless a cancel settled it first.
///
/// The cancel layer catches the panic where it decides the request's outcome; the panic's message stays in the
/// server's log (it may say things about the server the peer should not see).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Panicked {
    message: Option<String>,
}

impl Panicked {
    /// A panic with its payload's message, if it was a string.
    pub fn from_payload(payload: &(dyn std::any::Any + Send)) -> Self {
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned());
        Self { message }
    }

    /// The panic's message, if it had one.
    pub fn message(&self) -> Option<&str> {
        self.message.as_deref()
    }
}

impl fmt::Display for Panicked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.message {
            Some(message) => write!(f, "handler panicked: {message}"),
            None => f.write_str("handler panicked"),
        }
    }
}

impl std::error::Error for Panicked {}

/// The service failed readiness, so the request was never handed to it: answered -32603 `service unavailable`,
/// the service's error logged, not sent.
#[derive(Debug)]
pub struct Unavailable {
    source: crate::BoxError,
}

impl Unavailable {
    /// The readiness failure `source`.
    pub fn new(source: crate::BoxError) -> Self {
        Self { source }
    }
}

impl fmt::Display for Unavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("service unavailable")
    }
}

impl std::error::Error for Unavailable {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.source)
    }
}
