//! A call's outcome, decided by the stack, as jsonrpsee's `MethodResponse`.

use jsonrpsee::{
    server::middleware::rpc::MethodResponse,
    types::{
        error::{SERVER_IS_BUSY_CODE, SERVER_IS_BUSY_MSG},
        ErrorObject as TheirError, Id as TheirId,
    },
};
use tower_cancel::{
    dialect::{CancelledReply, Lsp},
    error_map::error_object,
    BoxError, Cancelled, Dialect, ErrorObject, Panicked,
};

use crate::bridge::Answered;

/// The reply of call `id` for its outcome: jsonrpsee's own answer where the handler answered first, else the
/// error the outcome calls for (-32800 `Request cancelled` for every cancel, its timeout included; -32603 for a
/// panic).
pub(crate) fn render(id: TheirId<'static>, outcome: Result<Answered, BoxError>) -> MethodResponse {
    let error = match outcome {
        Ok(Answered(Some(reply))) => return reply,
        // A call always reaches the service below unless the stack settled it otherwise (then it is an error).
        Ok(Answered(None)) => ErrorObject::internal_error("the call was not answered"),
        Err(error) => failure(&error),
    };
    MethodResponse::error(id, theirs(error))
}

/// The error object for a failed outcome, as tower-cancel's error layer answers it.
fn failure(error: &BoxError) -> ErrorObject {
    if let Some(cancelled) = error.downcast_ref::<Cancelled>() {
        return match Lsp.cancelled_reply(cancelled.reason(), false) {
            CancelledReply::Error(object) => object,
            // LSP answers every cancel; nothing else is spoken here.
            CancelledReply::Nothing => ErrorObject::new(
                tower_cancel::message::code::REQUEST_CANCELLED,
                "Request cancelled",
            ),
        };
    }
    if let Some(panicked) = error.downcast_ref::<Panicked>() {
        tracing::error!("{panicked}");
    }
    error_object(&**error)
}

/// jsonrpsee's "server is busy" (-32009): a call past the bound on calls in flight, never run.
pub(crate) fn busy(id: TheirId<'static>) -> MethodResponse {
    MethodResponse::error(
        id,
        TheirError::borrowed(SERVER_IS_BUSY_CODE, SERVER_IS_BUSY_MSG, None),
    )
}

fn theirs(error: ErrorObject) -> TheirError<'static> {
    // Codes outside i32 cannot be written by jsonrpsee; none of ours is.
    let code =
        i32::try_from(error.code).unwrap_or(tower_cancel::message::code::INTERNAL_ERROR as i32);
    TheirError::owned(code, error.message, error.data)
}
