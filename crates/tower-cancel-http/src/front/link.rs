//! A connection a front end has open: in its table while it lives (so a shutdown reaches it), the way its
//! requests are taken (counted, with the HTTP request's head), and its end, which is the client's hang-up.

use http::request::Parts;
use tower_cancel::{CancelReason, Connection, Incoming, Message, Request};

use super::Front;

/// What a client's hang-up does to the requests of a [`Link`]: dropping the link (hyper drops the response of a
/// client that went away) is the hang-up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnHangUp {
    /// Cancel them with reason `Disconnect` (also the ones not registered yet: they start out cancelled).
    Cancel,
    /// Let them run on to their end; their replies are dropped. For protocols where a disconnect is not a
    /// cancel (MCP `2025-11-25`), and for requests that outlive their HTTP request by design (RAP).
    RunOn,
}

impl OnHangUp {
    /// [`Cancel`](Self::Cancel) if `cancels`, else [`RunOn`](Self::RunOn).
    pub(crate) fn cancel_if(cancels: bool) -> Self {
        if cancels {
            Self::Cancel
        } else {
            Self::RunOn
        }
    }
}

/// One connection of a front end to its client (an HTTP request's [exchange](tower_cancel::Scope::connect_exchange), a
/// WebSocket's connection), open in the front end's table from [`Front::link`] until it is dropped.
///
/// While it is open, [`Front::shutdown`] closes it with reason `Shutdown`; one opened once the shutdown has begun
/// refuses its requests from the start. Its requests go through [`receive`](Self::receive) or
/// [`prepare`](Self::prepare), which count them in the front end's [`FrontStats`](super::FrontStats) and give
/// the handler the HTTP request's head. Dropping it is the client's hang-up, as its [`OnHangUp`] says.
#[derive(Debug)]
pub struct Link {
    connection: Connection,
    key: u64,
    on_hang_up: OnHangUp,
    front: Front,
}

impl Link {
    pub(super) fn new(front: Front, connection: Connection, on_hang_up: OnHangUp) -> Self {
        let key = front.core.state().links.open(&connection);
        Self {
            connection,
            key,
            on_hang_up,
            front,
        }
    }

    /// The connection.
    pub fn connection(&self) -> &Connection {
        &self.connection
    }

    /// Take a message read from the client ([`Connection::receive`]): a request is counted and, given `head`
    /// (the HTTP request's), carries its extensions and headers (see [`prepare`](Self::prepare)).
    pub fn receive(&self, message: Message, head: Option<&Parts>) -> Incoming {
        match self.connection.receive(message) {
            Incoming::Request(mut request) => {
                self.taken(&mut request, head);
                Incoming::Request(request)
            }
            other => other,
        }
    }

    /// Tie a request the front end made itself (from a RAP invocation, an ABP call) to this connection
    /// ([`Connection::prepare`]) and count it. Given `head`, the HTTP request's extensions become the request's
    /// (a principal an auth layer put there, for one), and its headers are added as an `http::HeaderMap`, for the
    /// handler to read.
    pub fn prepare(&self, request: &mut Request, head: Option<&Parts>) {
        self.connection.prepare(request);
        self.taken(request, head);
    }

    fn taken(&self, request: &mut Request, head: Option<&Parts>) {
        self.front.core.state().count_request();
        if let Some(head) = head {
            *request.extensions_mut() = head.extensions.clone();
            request.extensions_mut().insert(head.headers.clone());
        }
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        match self.on_hang_up {
            OnHangUp::Cancel => {
                // Also when nothing is registered yet: a request whose task has not started starts out cancelled.
                let cancelled = self.connection.close(CancelReason::Disconnect);
                if cancelled > 0 {
                    tracing::debug!(cancelled, "the client hung up: its requests are cancelled");
                }
            }
            OnHangUp::RunOn if self.connection.in_flight() > 0 => {
                tracing::debug!(
                    running = self.connection.in_flight(),
                    "the client hung up: its requests run on (a disconnect is not a cancel here)"
                );
            }
            OnHangUp::RunOn => {}
        }
        self.front.core.state().links.close(self.key);
    }
}
