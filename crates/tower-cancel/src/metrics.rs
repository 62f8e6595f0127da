//! Metrics for a server operator, through the [`metrics`](https://docs.rs/metrics/0.24) facade (cargo feature
//! `metrics`, off by default).
//!
//! With the feature on, the cancel layer and the registry record into whatever recorder the application installed
//! (a Prometheus exporter, a StatsD one, a test's own; with none, the facade drops everything). With it off, the
//! recording functions are empty and inlined away and the per-request state keeps no cancel instant: the hot path
//! pays nothing. The names below are constants either way, for dashboards and tests.
//!
//! | name | type | labels | counts |
//! |---|---|---|---|
//! | `tower_cancel_requests_registered_total` | counter | `dialect` | requests registered by a cancel layer |
//! | `tower_cancel_requests_completed_total` | counter | `dialect` | registered requests whose handler's outcome was the reply (its result, its own error, a panic or a readiness failure before any cancel) |
//! | `tower_cancel_requests_cancelled_total` | counter | `dialect`, `reason` | registered requests that ended cancelled |
//! | `tower_cancel_early_cancels_remembered_total` | counter | none | cancels for an id not in flight, remembered in case the request follows |
//! | `tower_cancel_early_cancels_dropped_total` | counter | none | remembered early cancels forgotten to make room, or never kept because they alone passed the byte budget |
//! | `tower_cancel_cancel_to_settle_seconds` | histogram | `dialect`, `reason` | per cancelled request, the seconds from its cancel (the move to cancelled) to its settling (its response future resolved or was dropped, and its entry removed) |
//!
//! Label values:
//!
//! - `dialect` is the cancel layer's [`Dialect::name`](crate::Dialect::name): `lsp`, `acp`, `acp-draft`, `mcp`,
//!   or your dialect's.
//! - `reason` is the source of the cancel that won: `peer`, `timeout`, `disconnect`, `shutdown`, `parent`,
//!   `local` (a response future dropped before its request settled is a `local` cancel).
//!
//! The request counters follow the registry's [`Stats`](crate::registry::Stats): requests the dialect never lets
//! be cancelled (`initialize`; in the ACP draft, everything before initialization) and refused duplicates are not
//! counted, so `registered = completed + cancelled + in flight` per dialect. The early-cancel counters have no
//! `dialect`: the registry that keeps early cancels is the scope's, and a scope's cancels may come from outside
//! any cancel layer ([`Registry::cancel`](crate::Registry::cancel)).
//!
//! A request that starts out cancelled (its early cancel was remembered, or its connection refuses new work) is
//! counted as registered and cancelled, with the reason of that cancel.
//!
//! # Example
//!
//! ```
//! use tower_cancel::metrics;
//!
//! // What a dashboard asks: the share of requests cancelled by their deadline.
//! let timed_out = format!(
//!     "sum(rate({}{{reason=\"timeout\"}}[5m])) / sum(rate({}[5m]))",
//!     metrics::REQUESTS_CANCELLED,
//!     metrics::REQUESTS_REGISTERED,
//! );
//! assert!(timed_out.starts_with("sum(rate(tower_cancel_requests_cancelled_total{reason=\"timeout\"}"));
//!
//! // With the feature on, describe the metrics to the recorder once it is installed (units, help texts).
//! # #[cfg(feature = "metrics")]
//! metrics::describe();
//! ```

use crate::reason::CancelReason;

/// Counter: requests registered by a cancel layer. Label `dialect`.
pub const REQUESTS_REGISTERED: &str = "tower_cancel_requests_registered_total";
/// Counter: registered requests whose handler's outcome was the reply. Label `dialect`.
pub const REQUESTS_COMPLETED: &str = "tower_cancel_requests_completed_total";
/// Counter: registered requests that ended cancelled. Labels `dialect`, `reason`.
pub const REQUESTS_CANCELLED: &str = "tower_cancel_requests_cancelled_total";
/// Counter: cancels for an id not in flight that were remembered. No labels.
pub const EARLY_CANCELS_REMEMBERED: &str = "tower_cancel_early_cancels_remembered_total";
/// Counter: remembered early cancels forgotten to make room, or never kept. No labels.
pub const EARLY_CANCELS_DROPPED: &str = "tower_cancel_early_cancels_dropped_total";
/// Histogram, in seconds: from a request's cancel to its settling. Labels `dialect`, `reason`.
pub const CANCEL_TO_SETTLE_SECONDS: &str = "tower_cancel_cancel_to_settle_seconds";

/// The `reason` label of a cancel: its source, without the text a peer or local code may have given (label values
/// must stay few).
pub(crate) fn reason_label(reason: &CancelReason) -> &'static str {
    match reason {
        CancelReason::Peer { .. } => "peer",
        CancelReason::Timeout => "timeout",
        CancelReason::Disconnect => "disconnect",
        CancelReason::Shutdown => "shutdown",
        CancelReason::Parent => "parent",
        CancelReason::Local { .. } => "local",
        CancelReason::Group { .. } => "group",
    }
}

#[cfg(feature = "metrics")]
pub use recording::describe;
pub(crate) use recording::{
    early_cancel_remembered, early_cancels_dropped, registered, settled, DialectLabel,
};

#[cfg(feature = "metrics")]
mod recording {
    use ::metrics::{counter, describe_counter, describe_histogram, histogram, Unit};
    use tokio::time::Instant;

    use super::*;
    use crate::lifecycle::Lifecycle;

    /// Give the installed recorder each metric's unit and description (Prometheus' `# HELP` lines). Call it once,
    /// after installing the recorder; recording works without it.
    pub fn describe() {
        describe_counter!(
            REQUESTS_REGISTERED,
            Unit::Count,
            "Requests registered by a tower-cancel layer"
        );
        describe_counter!(
            REQUESTS_COMPLETED,
            Unit::Count,
            "Registered requests whose handler's outcome was the reply"
        );
        describe_counter!(
            REQUESTS_CANCELLED,
            Unit::Count,
            "Registered requests that ended cancelled, by the source of the cancel"
        );
        describe_counter!(
            EARLY_CANCELS_REMEMBERED,
            Unit::Count,
            "Cancels for an id not in flight, remembered in case the request follows"
        );
        describe_counter!(
            EARLY_CANCELS_DROPPED,
            Unit::Count,
            "Remembered early cancels forgotten to make room, or too large to keep"
        );
        describe_histogram!(
            CANCEL_TO_SETTLE_SECONDS,
            Unit::Seconds,
            "Seconds from a request's cancel to its settling (reply decided, entry removed)"
        );
    }

    /// The dialect a cancel layer records its requests under.
    #[derive(Clone, Copy, Debug)]
    pub(crate) struct DialectLabel(&'static str);

    impl DialectLabel {
        pub(crate) fn new(name: &'static str) -> Self {
            Self(name)
        }
    }

    pub(crate) fn registered(dialect: DialectLabel) {
        counter!(REQUESTS_REGISTERED, "dialect" => dialect.0).increment(1);
    }

    /// Count how a registered request ended. Call once its entry is removed: that moment ends the histogram's
    /// sample.
    pub(crate) fn settled(dialect: DialectLabel, lifecycle: &Lifecycle) {
        if !lifecycle.is_cancellable() {
            return;
        }
        if lifecycle.is_completed() {
            counter!(REQUESTS_COMPLETED, "dialect" => dialect.0).increment(1);
            return;
        }
        // Settled and not completed is cancelled (a registration let go of unsettled cancels first).
        let reason = lifecycle.reason().map_or("local", reason_label);
        counter!(REQUESTS_CANCELLED, "dialect" => dialect.0, "reason" => reason).increment(1);
        if let Some(at) = lifecycle.cancelled_at() {
            let seconds = Instant::now().saturating_duration_since(at).as_secs_f64();
            histogram!(CANCEL_TO_SETTLE_SECONDS, "dialect" => dialect.0, "reason" => reason)
                .record(seconds);
        }
    }

    pub(crate) fn early_cancel_remembered() {
        counter!(EARLY_CANCELS_REMEMBERED).increment(1);
    }

    pub(crate) fn early_cancels_dropped(count: u64) {
        // A series that only ever moves when the window overflows: absent until then.
        if count > 0 {
            counter!(EARLY_CANCELS_DROPPED).increment(count);
        }
    }
}

// The same functions, empty: without the feature a call site compiles to nothing, and the label is zero-sized.
#[cfg(not(feature = "metrics"))]
mod recording {
    use crate::lifecycle::Lifecycle;

    #[derive(Clone, Copy, Debug)]
    pub(crate) struct DialectLabel;

    impl DialectLabel {
        #[inline(always)]
        pub(crate) fn new(_name: &'static str) -> Self {
            Self
        }
    }

    #[inline(always)]
    pub(crate) fn registered(_dialect: DialectLabel) {}

    #[inline(always)]
    pub(crate) fn settled(_dialect: DialectLabel, _lifecycle: &Lifecycle) {}

    #[inline(always)]
    pub(crate) fn early_cancel_remembered() {}

    #[inline(always)]
    pub(crate) fn early_cancels_dropped(_count: u64) {}
}
