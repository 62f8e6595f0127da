//! One connection's task: hyper serving it, and the watchdog that closes it when it is idle too long, when the
//! table evicts it, or when the server shuts down.

use std::{convert::Infallible, pin::pin, sync::Arc};

use axum::{extract::Request, response::Response};
use futures_util::FutureExt;
use hyper_util::{
    rt::{TokioExecutor, TokioIo, TokioTimer},
    server::conn::auto::Builder,
};
use tokio::{
    io::{AsyncRead, AsyncWrite},
    time::{sleep_until, Instant},
};
use tokio_util::sync::CancellationToken;
use tower_service::Service;

use super::{
    counters::Counters,
    entry::Idle,
    in_flight::InFlight,
    limits::{Limits, CLOSE_GRACE, HTTP2_KEEP_ALIVE},
    slot_io::SlotIo,
    table::{Slot, Table},
};

/// What every connection of a listener shares.
#[derive(Debug)]
pub(super) struct Shared {
    builder: Builder<TokioExecutor>,
    limits: Limits,
    pub(super) table: Arc<Table>,
    /// Cancelled when the server shuts down: each connection then closes once its requests are answered.
    pub(super) shutdown: CancellationToken,
}

impl Shared {
    pub(super) fn new(limits: Limits, table: Arc<Table>) -> Self {
        let mut builder = Builder::new(TokioExecutor::new());
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_read_timeout);
        builder
            .http2()
            .timer(TokioTimer::new())
            .keep_alive_interval(HTTP2_KEEP_ALIVE)
            .keep_alive_timeout(HTTP2_KEEP_ALIVE)
            // WebSockets over HTTP/2 (RFC 8441), as axum's `serve` allows them.
            .enable_connect_protocol();
        Self {
            builder,
            limits,
            table,
            shutdown: CancellationToken::new(),
        }
    }
}

/// Why the watchdog is closing a connection.
#[derive(Clone, Copy, Debug)]
enum Closing {
    /// No first request within the header read timeout.
    HeadTimeout,
    Idle,
    ShuttingDown,
}

/// Serve `io` with `service` until the connection closes.
pub(super) async fn serve<I, S, A>(shared: Arc<Shared>, io: I, remote: A, service: S, slot: Slot)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: Service<Request, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
    A: Clone + Send + Sync + 'static,
{
    let entry = Arc::clone(slot.entry());
    let service = InFlight::new(service, Arc::clone(&entry), remote);
    let io = TokioIo::new(SlotIo::new(io, slot));
    let mut conn = pin!(shared.builder.serve_connection_with_upgrades(io, service));
    let limits = &shared.limits;
    let counters = &shared.table.counters;
    let mut closing: Option<Closing> = None;
    let mut watchdog = pin!(sleep_until(deadline(entry.idle(), limits)));
    loop {
        tokio::select! {
            result = conn.as_mut() => {
                ended(result, entry.idle(), limits, counters);
                break;
            }
            () = entry.evict.notified() => {
                conn.as_mut().graceful_shutdown();
                // One chance to say so (HTTP/2's GOAWAY) before the socket is closed.
                let closed_already = conn.as_mut().now_or_never().is_some();
                if closed_already || entry.in_flight() == 0 {
                    Counters::count(&counters.evicted);
                    tracing::debug!("connection evicted to make room for a new one");
                    break;
                }
                // A request came in as it was chosen: hyper closes the connection once it is answered, and the
                // newcomer looks for room elsewhere.
                shared.table.changed();
            }
            () = shared.shutdown.cancelled(), if closing.is_none() => {
                conn.as_mut().graceful_shutdown();
                closing = Some(Closing::ShuttingDown);
                watchdog.as_mut().reset(Instant::now() + CLOSE_GRACE);
            }
            () = entry.went_idle.notified(), if closing.is_none() => {
                watchdog.as_mut().reset(deadline(entry.idle(), limits));
            }
            () = &mut watchdog => {
                let now = Instant::now();
                if let Some(reason) = closing {
                    // A request in flight (or an HTTP/2 WebSocket) is let finish: hyper closes after it.
                    if entry.idle() != Idle::Busy {
                        tracing::debug!(?reason, "connection closed: it did not close in time");
                        break;
                    }
                    watchdog.as_mut().reset(now + CLOSE_GRACE);
                    continue;
                }
                let idle = entry.idle();
                let until = deadline(idle, limits);
                if until > now {
                    watchdog.as_mut().reset(until);
                    continue;
                }
                let reason = match idle {
                    Idle::Unserved(_) => {
                        Counters::count(&counters.head_timeouts);
                        Closing::HeadTimeout
                    }
                    Idle::Served(_) | Idle::Busy => {
                        Counters::count(&counters.idle_closed);
                        Closing::Idle
                    }
                };
                tracing::debug!(?reason, "closing a connection with no request in flight");
                conn.as_mut().graceful_shutdown();
                closing = Some(reason);
                watchdog.as_mut().reset(now + CLOSE_GRACE);
            }
        }
    }
}

/// Count how hyper's side of the connection ended.
fn ended(
    result: Result<(), Box<dyn std::error::Error + Send + Sync>>,
    idle: Idle,
    limits: &Limits,
    counters: &Counters,
) {
    match result {
        Err(error) => {
            let timed_out = error
                .downcast_ref::<hyper::Error>()
                .is_some_and(hyper::Error::is_timeout);
            if timed_out {
                Counters::count(&counters.head_timeouts);
                tracing::debug!("connection closed: a request's head did not arrive in time");
            } else {
                tracing::trace!(%error, "connection ended");
            }
        }
        // hyper times an HTTP/1 request's head from when it starts waiting for it, so an idle keep-alive
        // connection ends there, without an error, when the header read timeout is the shorter.
        Ok(()) => {
            if let Idle::Served(since) = idle {
                if since + limits.header_read_timeout <= Instant::now() {
                    Counters::count(&counters.idle_closed);
                    tracing::debug!("connection closed: idle past the header read timeout");
                }
            }
        }
    }
}

/// When the watchdog looks again: at the connection's idle deadline, or, while it is busy, an idle timeout
/// from now (its last request's end wakes it sooner).
fn deadline(idle: Idle, limits: &Limits) -> Instant {
    match idle {
        Idle::Busy => Instant::now() + limits.idle_timeout,
        Idle::Unserved(since) => since + limits.header_read_timeout,
        Idle::Served(since) => since + limits.idle_timeout,
    }
}
