//! The handle that starts a connection's graceful shutdown.

use crate::signal::Signal;

/// Starts a graceful shutdown of one connection (see [`Server::shutdown_handle`](crate::Server::shutdown_handle)).
/// Cloning gives another handle to the same connection; handles of several connections can be driven by one signal.
#[derive(Clone, Debug, Default)]
pub struct ShutdownHandle {
    signal: Signal,
}

impl ShutdownHandle {
    /// Stop taking work: new requests are answered as cancelled with reason Shutdown, the ones in flight get the
    /// drain timeout to finish, then the rest are cancelled (reading goes on meanwhile, for cancels and replies).
    pub fn shutdown(&self) {
        self.signal.fire();
    }

    /// Whether shutdown was asked for.
    pub fn is_shutting_down(&self) -> bool {
        self.signal.has_fired()
    }

    pub(crate) fn signal(&self) -> &Signal {
        &self.signal
    }
}
