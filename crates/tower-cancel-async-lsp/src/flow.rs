//! What the adapter does with the `ControlFlow` an async-lsp service returns from `notify` and `emit`.

use std::ops::ControlFlow;

use tokio_util::sync::CancellationToken;

/// Applies `flow`, returned by the service for the notification or event `what`:
///
/// - `Continue`: nothing.
/// - `Break(Ok(()))`: the service asks to stop (its `exit` handler, async-lsp's `LifecycleLayer` on `exit`):
///   `exit` is cancelled, which ends [`AsyncLsp::serve`](crate::AsyncLsp::serve).
/// - `Break(Err(_))`: logged and ignored. async-lsp's own main loop stops on it, and its `Router` returns it for
///   every notification it has no handler for, and for params it cannot parse; a server speaking LSP ignores
///   such notifications, and bad input must never stop the connection.
pub(crate) fn apply(
    flow: ControlFlow<async_lsp::Result<()>>,
    exit: &CancellationToken,
    what: &str,
) {
    match flow {
        ControlFlow::Continue(()) => {}
        ControlFlow::Break(Ok(())) => {
            tracing::debug!(what, "the async-lsp service asked to stop");
            exit.cancel();
        }
        ControlFlow::Break(Err(error)) => {
            tracing::warn!(what, %error, "the async-lsp service failed; the connection goes on");
        }
    }
}
