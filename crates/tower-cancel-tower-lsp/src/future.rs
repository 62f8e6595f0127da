//! [`ResponseFuture`]: one request in tower-lsp, polled on the client side's turn, forgotten by tower-lsp when it
//! is dropped unfinished.

use std::{
    fmt,
    future::Future,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};

use futures_util::future::BoxFuture;
use serde_json::Value;
use tower_cancel::{BoxError, Peer};
use tower_lsp_server::jsonrpc;

use crate::{
    adapter::{Forget, LspAnswer},
    client::{ClientSide, HandlerEnd},
    convert,
};

/// The future of one request or notification given to an [`LspAdapter`](crate::LspAdapter).
#[must_use = "futures do nothing unless polled"]
pub struct ResponseFuture {
    answer: Option<BoxFuture<'static, LspAnswer>>,
    /// Armed until tower-lsp answered: dropping the future before that removes the request from its table.
    guard: Option<CancelGuard>,
    client: Arc<ClientSide>,
    peer: Option<Peer>,
    /// Cancels the requests the handler made to the client that still wait, when the handler's future ends.
    end: HandlerEnd,
    method: Box<str>,
}

impl fmt::Debug for ResponseFuture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("method", &self.method)
            .field("done", &self.answer.is_none())
            .finish_non_exhaustive()
    }
}

impl ResponseFuture {
    pub(crate) fn new(
        answer: BoxFuture<'static, LspAnswer>,
        guard: Option<CancelGuard>,
        client: Arc<ClientSide>,
        peer: Option<Peer>,
        method: &str,
    ) -> Self {
        Self {
            answer: Some(answer),
            guard,
            client,
            peer,
            end: HandlerEnd::default(),
            method: method.into(),
        }
    }
}

impl Future for ResponseFuture {
    type Output = Result<Value, BoxError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let Some(answer) = this.answer.as_mut() else {
            panic!("ResponseFuture polled after completion");
        };
        let polled = {
            // What the handler sends to the client during this poll is in the channel right after it: the turn,
            // held across both, keeps anyone else from taking it first.
            let mut turn = this.client.turn();
            let polled = answer.as_mut().poll(cx);
            this.client
                .drain(&mut turn, this.peer.as_ref(), Some(&mut this.end));
            polled
        };
        let Poll::Ready(answer) = polled else {
            return Poll::Pending;
        };
        // tower-lsp removed the request from its table itself; the handler's future is gone.
        this.answer = None;
        this.end.fire();
        let request = this.guard.take().is_some();
        Poll::Ready(convert::from_lsp(answer, &this.method, request))
    }
}

impl Drop for ResponseFuture {
    fn drop(&mut self) {
        // The handler first, then its entry in tower-lsp's table: the stack settles the request (and frees its id)
        // only after this drop, so a reused id always finds the table without it.
        if let Some(answer) = self.answer.take() {
            // What the handler sends as its future is dropped (a guard ending its `$/progress`) goes out now,
            // before the stack writes the cancelled reply, as what it sends during a poll does.
            let mut turn = self.client.turn();
            drop(answer);
            self.client.drain(&mut turn, self.peer.as_ref(), None);
        }
        if let Some(guard) = self.guard.take() {
            guard.fire();
        }
    }
}

/// A request's entry in tower-lsp's table, to remove if the request is dropped unfinished.
pub(crate) struct CancelGuard {
    adapter: Arc<dyn Forget>,
    id: jsonrpc::Id,
}

impl CancelGuard {
    pub(crate) fn new(adapter: Arc<dyn Forget>, id: jsonrpc::Id) -> Self {
        Self { adapter, id }
    }

    fn fire(self) {
        self.adapter.forget(&self.id);
    }
}
