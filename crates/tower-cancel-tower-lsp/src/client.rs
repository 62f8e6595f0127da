//! tower-lsp's side towards the client: what its `Client` sends (through the `ClientSocket`) goes out through the
//! connection's [`Peer`], and every answer goes back into the socket.
//!
//! # Which handler made a request
//!
//! tower-lsp's `Client` puts a request in the socket's channel and waits for its answer; nothing in the message
//! says which handler sent it. The adapter tells by time: each handler is polled with the channel locked, and what
//! the channel holds right after that poll was put there during it, by that handler. Such a request goes out
//! through the handler's child [`Peer`] (`Request::peer`), so that cancelling the handler cancels it on the wire,
//! and it is also cancelled when the handler's future ends (finished or dropped) while the request still waits:
//! nobody reads its answer then. Everything else (sent by a task of the server's own, or while no handler runs) is taken by a forwarding task,
//! under the same lock, and sent through the connection's peer.
//!
//! The attribution is exact for what a handler's own future sends. A task the server spawned itself, running on
//! another worker thread at the same instant as a handler's poll, could have its request taken for that handler's:
//! that request would then be cancelled if the handler is. All of this needs the lock to be held across the poll,
//! so with [`Server::spawn_requests`](https://docs.rs/tower-cancel-io) the handlers of one connection are polled
//! one at a time (on the connection's own task, the default, they are anyway).
//!
//! # Every request is answered
//!
//! tower-lsp frees a waiter only when its answer arrives. Whatever happens to a request sent for it (the client's
//! answer, a cancel, a timeout, the connection closing, no peer at all), an answer goes back into the socket.

use std::{
    future::poll_fn,
    pin::Pin,
    sync::{
        atomic::{AtomicBool, AtomicUsize, Ordering},
        Arc, Mutex, MutexGuard, PoisonError,
    },
    task::{Context, Poll, Wake, Waker},
};

use futures_util::{future, task::AtomicWaker, Sink, Stream};
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tower_cancel::Peer;
use tower_lsp_server::{
    jsonrpc::{self, Response},
    ClientSocket, Loopback,
};

use crate::convert::client_answer;

/// The server's messages to the client (the socket's stream half; its type is public only through `Loopback`).
type RequestStream = <ClientSocket as Loopback>::RequestStream;
/// Where the client's answers go (the socket's sink half).
type ResponseSink = <ClientSocket as Loopback>::ResponseSink;

/// The two halves of tower-lsp's `ClientSocket`, and the forwarding task's wake-ups.
#[derive(Debug)]
pub(crate) struct ClientSide {
    /// The server's messages to the client. Its lock is the turn: held across a handler's poll and the drain
    /// after it, and by the forwarding task while it drains.
    requests: Mutex<RequestStream>,
    /// Where the client's answers go (tower-lsp's table of waiters).
    responses: Mutex<ResponseSink>,
    relay: Arc<Relay>,
    forwarding: AtomicBool,
    /// The server's requests sent to the client whose answer tower-lsp has not been given yet.
    waiting: AtomicUsize,
    /// Stops the forwarding task: the adapter is gone.
    stop: CancellationToken,
}

/// The channel's waker whoever drains it: always the forwarding task's, so that a message put in the channel while
/// no handler runs wakes it, whichever handler polled the channel last.
#[derive(Debug, Default)]
struct Relay {
    task: AtomicWaker,
}

impl Wake for Relay {
    fn wake(self: Arc<Self>) {
        self.task.wake();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.task.wake();
    }
}

/// The turn: while it is held, no one else takes messages from the channel.
pub(crate) type Turn<'a> = MutexGuard<'a, RequestStream>;

impl ClientSide {
    pub(crate) fn new(socket: ClientSocket) -> Self {
        let (requests, responses) = Loopback::split(socket);
        Self {
            requests: Mutex::new(requests),
            responses: Mutex::new(responses),
            relay: Arc::default(),
            forwarding: AtomicBool::new(false),
            waiting: AtomicUsize::new(0),
            stop: CancellationToken::new(),
        }
    }

    /// Take the turn (a handler about to be polled).
    pub(crate) fn turn(&self) -> Turn<'_> {
        // A handler that panicked while polled leaves the stream as it was: go on with it.
        self.requests.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Send everything in the channel through `peer` (the handler's child, or the connection's); the requests
    /// among it end with `handler` when one is given. Returns `true` when the channel is closed (the server
    /// exited).
    pub(crate) fn drain(
        self: &Arc<Self>,
        turn: &mut Turn<'_>,
        peer: Option<&Peer>,
        mut handler: Option<&mut HandlerEnd>,
    ) -> bool {
        let waker = Waker::from(self.relay.clone());
        let mut cx = Context::from_waker(&waker);
        loop {
            match Pin::new(&mut **turn).poll_next(&mut cx) {
                Poll::Ready(Some(message)) => self.forward(message, peer, handler.as_deref_mut()),
                Poll::Ready(None) => return true,
                Poll::Pending => return false,
            }
        }
    }

    fn forward(
        self: &Arc<Self>,
        message: jsonrpc::Request,
        peer: Option<&Peer>,
        handler: Option<&mut HandlerEnd>,
    ) {
        let (method, id, params) = message.into_parts();
        match (id, peer) {
            (None, Some(peer)) => {
                if peer.notify(method.into_owned(), params).is_err() {
                    tracing::debug!(
                        "a notification to the client was dropped: the connection is closed"
                    );
                }
            }
            (None, None) => tracing::debug!(%method, "no peer to send the notification to"),
            (Some(id), Some(peer)) => {
                let mut call = peer.request(method.into_owned(), params);
                if let Some(handler) = handler {
                    // Nobody reads the answer once the handler's future is gone: stop waiting at once (the client
                    // is sent the cancel), and give tower-lsp's waiter its -32800 now, not when (if ever) the
                    // client answers the cancelled request.
                    call = call.cancel_on(handler.token()).wait_after_cancel(false);
                }
                // Sent now, in order; its answer (or its end) is awaited on a task of its own: the handler may be
                // dropped while it waits, and tower-lsp's waiter must be answered all the same.
                self.waiting.fetch_add(1, Ordering::SeqCst);
                let side = self.clone();
                tokio::spawn(async move {
                    let answer = call.await;
                    side.answer(Response::from_parts(id, client_answer(answer)));
                    side.waiting.fetch_sub(1, Ordering::SeqCst);
                });
            }
            (Some(id), None) => {
                tracing::debug!(%method, "no peer to send the request to: answered with an error");
                let error = jsonrpc::Error::internal_error();
                self.answer(Response::from_parts(id, Err::<Value, _>(error)));
            }
        }
    }

    /// The server's requests sent to the client and not answered into tower-lsp yet.
    pub(crate) fn waiting(&self) -> usize {
        self.waiting.load(Ordering::SeqCst)
    }

    /// Give tower-lsp the answer to one of its requests.
    fn answer(&self, response: Response) {
        let mut sink = self
            .responses
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let waker = futures_util::task::noop_waker_ref();
        let mut cx = Context::from_waker(waker);
        // Never pending; an error only once the server exited, when no one waits any more.
        if let Poll::Ready(Ok(())) = Pin::new(&mut *sink).poll_ready(&mut cx) {
            let _ = Pin::new(&mut *sink).start_send(response);
        }
    }

    /// Start the task that forwards what is sent while no handler runs, through the connection's `peer`: once.
    pub(crate) fn forward_from(self: &Arc<Self>, peer: Option<&Peer>) {
        let Some(peer) = peer.cloned() else { return };
        if self.forwarding.swap(true, Ordering::AcqRel) {
            return;
        }
        let side = self.clone();
        tokio::spawn(async move {
            let stop = side.stop.clone();
            let drained = poll_fn(|cx| {
                side.relay.task.register(cx.waker());
                let mut turn = side.turn();
                if side.drain(&mut turn, Some(&peer), None) {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            });
            future::select(std::pin::pin!(drained), std::pin::pin!(stop.cancelled())).await;
        });
    }

    /// Stop forwarding (the adapter is gone).
    pub(crate) fn stop(&self) {
        self.stop.cancel();
    }
}

/// The end of one handler's future: what its requests to the client are cancelled on (made with its first one:
/// most handlers make none). Fires when dropped.
#[derive(Debug, Default)]
pub(crate) struct HandlerEnd {
    token: Option<CancellationToken>,
}

impl HandlerEnd {
    fn token(&mut self) -> CancellationToken {
        self.token
            .get_or_insert_with(CancellationToken::new)
            .clone()
    }

    /// The handler's future ended: its requests still waiting are cancelled.
    pub(crate) fn fire(&mut self) {
        if let Some(token) = self.token.take() {
            token.cancel();
        }
    }
}

impl Drop for HandlerEnd {
    fn drop(&mut self) {
        self.fire();
    }
}
