//! The handle that starts a connection's graceful shutdown.

use tokio_util::sync::CancellationToken;

/// Starts a graceful shutdown of one connection (see [`Server::shutdown_handle`](crate::Server::shutdown_handle)).
/// Cloning gives another handle to the same connection; handles of several connections can be driven by one signal.
#[derive(Clone, Debug, Default)]
pub struct ShutdownHandle {
    token: CancellationToken,
}

impl ShutdownHandle {
    /// Stop taking work: new requests are answered as cancelled with reason Shutdown, the ones in flight get the
    /// drain timeout to finish, then the rest are cancelled (reading goes on meanwhile, for cancels and replies).
    pub fn shutdown(&self) {
        self.token.cancel();
    }

    /// Whether shutdown was asked for.
    pub fn is_shutting_down(&self) -> bool {
        self.token.is_cancelled()
    }

    pub(crate) fn token(&self) -> &CancellationToken {
        &self.token
    }
}
