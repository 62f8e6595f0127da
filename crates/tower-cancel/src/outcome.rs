//! How a request ended when it was neither its handler's answer nor a cancel ([`Panicked`], [`Unavailable`]; a
//! cancel's outcome, [`Cancelled`](crate::Cancelled), is with its reason), and what a cancel did
//! ([`CancelOutcome`], [`CancelAck`]).

use std::fmt;

/// The boxed error type of the layers.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

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
    source: BoxError,
}

impl Unavailable {
    /// The readiness failure `source`.
    pub fn new(source: BoxError) -> Self {
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

/// What a cancel did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CancelOutcome {
    /// The request was in flight and is now cancelled.
    Cancelled,
    /// The request was in flight but already settled (completed or cancelled by an earlier source).
    AlreadySettled,
    /// No such request in flight: the cancel is remembered in case the request arrives after it.
    Remembered,
    /// No such request in flight, and the registry keeps no early cancels
    /// ([`Registry::without_early_cancels`](crate::registry::Registry::without_early_cancels)): the cancel did
    /// nothing.
    NotFound,
}

/// What a cancel did, as a dialect that acknowledges cancels tells the peer (ABP's `cancel-result`). Decided by
/// the request's lifecycle, atomically with the race against its completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CancelAck {
    /// The request was running (or queued) and this cancel stopped it: its reply says it was cancelled.
    Cancelled,
    /// An earlier cancel (of any source: the peer, a timeout, a shutdown) stopped it already.
    AlreadyCancelled,
    /// Its handler's outcome won the race, or it had ended before: that outcome is its reply.
    AlreadyCompleted,
    /// No such request in flight nor remembered as finished. The cancel is remembered as an early one, so a
    /// request with that id arriving after it starts out cancelled, unless the registry keeps no early cancels
    /// ([`Registry::without_early_cancels`](crate::registry::Registry::without_early_cancels), the scope of a
    /// dialect such as ABP): then it did nothing, and a request of that id arriving after it runs.
    NotFound,
    /// The request is in flight but its dialect never lets it be cancelled (`initialize`).
    NotCancellable,
}

impl CancelAck {
    /// Whether the request ended, or will end, cancelled.
    pub fn cancelled(self) -> bool {
        matches!(self, CancelAck::Cancelled | CancelAck::AlreadyCancelled)
    }
}
