//! A request's end as the read loop answers it, whichever way the request ran: its id and its outcome, a panic
//! included.

use std::future::Future;

use futures_util::FutureExt;
use tower_cancel::{
    error_map,
    unwind::{CatchUnwind, Payload},
    BoxError, Id, Response,
};

/// What a request gives back: the service's reply (none for a notification, or a cancel its dialect answers with
/// silence), or its failure, boxed.
pub(crate) type Outcome = Result<Option<Response>, BoxError>;

/// A request's id and its outcome: what the read loop answers.
pub(crate) type Settled = (Option<Id>, Outcome);

/// A request polled by the read loop: its outcome with its id.
pub(crate) fn outcome_of<F, E>(id: Option<Id>, future: F) -> impl Future<Output = Settled>
where
    F: Future<Output = Result<Option<Response>, E>>,
    E: Into<BoxError>,
{
    // A safety net for services without a cancel layer (which catches its handlers' panics itself): a panic is
    // answered as the stack answers one, and the connection goes on.
    CatchUnwind::new(future).map(move |caught| (id, outcome(caught)))
}

/// The outcome of a request's future run under the net ([`CatchUnwind`]).
pub(crate) fn outcome<E: Into<BoxError>>(
    caught: Result<Result<Option<Response>, E>, Payload>,
) -> Outcome {
    match caught {
        Ok(result) => result.map_err(Into::into),
        Err(payload) => Err(panicked(payload)),
    }
}

/// A caught panic as the failure the stack answers -32603; its message goes to the log only.
pub(crate) fn panicked(payload: Payload) -> BoxError {
    error_map::caught_panic(payload)
}
