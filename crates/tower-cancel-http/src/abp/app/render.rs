//! What the app writes: the stack's replies as `call-result`s, and the app's own answers.

use tower_cancel::{
    dialect::abp::{self, read_error},
    Response,
};

use crate::abp::wire::{types, CallResult, CancelResult, Envelope, ErrorBody};

/// A call's reply from the stack as its `call-result`.
pub(super) fn call_result(reply: Response) -> CallResult {
    match reply.outcome {
        Ok(data) => CallResult::ok(data),
        Err(error) => {
            let error = read_error(&error);
            let mut result =
                CallResult::failed(ErrorBody::new(&error.code, error.message, error.retryable));
            if error.cancelled {
                result.cancelled = Some(true);
            }
            result
        }
    }
}

/// The `call-result` of a call the app refuses without running it, answering envelope `id`.
pub(super) fn refused_call(id: Option<String>, error: ErrorBody) -> Envelope {
    Envelope::new(types::CALL_RESULT, id, CallResult::failed(error))
}

/// The `cancel-result` of a cancel the app cannot take (before `initialize`).
pub(super) fn refused_cancel(id: Option<String>, call_id: String, error: ErrorBody) -> Envelope {
    let payload = CancelResult {
        call_id,
        cancelled: false,
        reason: None,
        error: Some(error),
    };
    Envelope::new(types::CANCEL_RESULT, id, payload)
}

/// An `error` envelope (an extension of ABP: the docs have no type for an envelope that cannot be answered as
/// what it claims to be).
pub(super) fn error(id: Option<String>, error: ErrorBody) -> Envelope {
    Envelope::new(types::ERROR, id, error)
}

/// The error of a call or cancel before `initialize`.
pub(super) fn not_initialized() -> ErrorBody {
    ErrorBody::new(
        abp::NOT_INITIALIZED,
        "the session is not initialized: send initialize first",
        true,
    )
}

/// An envelope that is not one.
pub(super) const INVALID_MESSAGE: &str = "INVALID_MESSAGE";
/// A type the app does not take.
pub(super) const NOT_IMPLEMENTED: &str = "NOT_IMPLEMENTED";
/// A call past the session's limit.
pub(super) const RATE_LIMITED: &str = "RATE_LIMITED";
