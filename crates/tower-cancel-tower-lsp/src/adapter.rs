//! [`LspAdapter`]: tower-lsp's `LspService` as the inner service of tower-cancel's LSP stack.

use std::{
    fmt,
    sync::{Arc, Mutex, PoisonError},
    task::{Context, Poll},
};

use futures_util::FutureExt;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tower_cancel::{BoxError, Request};
use tower_lsp_server::{jsonrpc, ClientSocket, LanguageServer, LspService};
use tower_service::Service;

use crate::{
    client::ClientSide,
    convert,
    future::{CancelGuard, ResponseFuture},
    ids::{cancel_params, Aliases},
};

/// A tower-lsp-server [`LspService`] and its [`ClientSocket`], as a `Service<Request>` to put under
/// [`CancelStack::lsp()`](tower_cancel::CancelStack::lsp) and serve with `tower_cancel_io::Server::with_stack`.
///
/// One adapter serves one connection (tower-lsp's service holds one conversation's state). Cheap to clone: the
/// clones share the service.
///
/// - Each request is handed to the service as it arrives (its readiness is not waited for: tower-lsp's is pending
///   while `initialize` runs, without a wake-up, and its routes are always ready); its future is what the stack
///   races against cancels, timeouts and the connection closing.
/// - When the stack drops a request's future before it finished, the adapter removes the request from tower-lsp's
///   own table at once (it gives the service a `$/cancelRequest` for it), so the id can be used again.
/// - The client's `$/cancelRequest` never reaches tower-lsp: the stack takes it (it also remembers one that
///   arrives before its request).
/// - A request tower-lsp answers with nothing (a `$/` method it does not know) gets -32601.
/// - What the server sends to the client through tower-lsp's `Client` goes out through the connection's peer; a
///   request sent by a handler through that handler's child peer, so that cancelling the handler cancels it on
///   the wire too (see the crate docs).
pub struct LspAdapter<S> {
    shared: Arc<Shared<S>>,
}

struct Shared<S> {
    service: Mutex<LspService<S>>,
    client: Arc<ClientSide>,
    aliases: Aliases,
    exited: CancellationToken,
}

impl<S> Clone for LspAdapter<S> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl<S> fmt::Debug for LspAdapter<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LspAdapter")
            .field("exited", &self.shared.exited.is_cancelled())
            .finish_non_exhaustive()
    }
}

impl<S: LanguageServer> LspAdapter<S> {
    /// Adapt the pair `LspService::new` or `LspService::build(..).finish()` returns.
    pub fn new((service, socket): (LspService<S>, ClientSocket)) -> Self {
        Self {
            shared: Arc::new(Shared {
                service: Mutex::new(service),
                client: Arc::new(ClientSide::new(socket)),
                aliases: Aliases::default(),
                exited: CancellationToken::new(),
            }),
        }
    }

    /// How many requests the server sent to the client (through tower-lsp's `Client`) still wait for their
    /// answer: each is answered into tower-lsp (freeing its waiter) when the client answers, when it is cancelled
    /// or times out, or when the connection closes. 0 once the connection is idle.
    pub fn client_requests_waiting(&self) -> usize {
        self.shared.client.waiting()
    }

    /// Cancelled once the client sent `exit`: end the process (or the connection) then, as LSP says.
    pub fn exited(&self) -> CancellationToken {
        self.shared.exited.clone()
    }
}

impl<S: LanguageServer> Shared<S> {
    fn call(&self, req: jsonrpc::Request) -> futures_util::future::BoxFuture<'static, LspAnswer> {
        self.service
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .call(req)
    }
}

/// What tower-lsp's service answers.
pub(crate) type LspAnswer = Result<Option<jsonrpc::Response>, tower_lsp_server::ExitedError>;

/// What a [`CancelGuard`] needs of the adapter: to remove a request from tower-lsp's table.
pub(crate) trait Forget: Send + Sync {
    /// Remove the request of inner id `id` from tower-lsp's table of running requests.
    fn forget(&self, id: &jsonrpc::Id);
}

impl<S: LanguageServer> Forget for Shared<S> {
    fn forget(&self, id: &jsonrpc::Id) {
        let cancel = jsonrpc::Request::build("$/cancelRequest")
            .params(cancel_params(id))
            .finish();
        // tower-lsp's `$/cancelRequest` runs to its end in one poll: it removes the entry and aborts the (already
        // dropped) handler. A waker is never needed.
        let mut cx = Context::from_waker(futures_util::task::noop_waker_ref());
        if self.call(cancel).poll_unpin(&mut cx).is_pending() {
            tracing::warn!(%id, "tower-lsp did not take the cancel in one poll");
        }
    }
}

impl<S> Drop for Shared<S> {
    fn drop(&mut self) {
        self.client.stop();
    }
}

impl<S: LanguageServer> Service<Request> for LspAdapter<S> {
    type Response = Value;
    type Error = BoxError;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request) -> Self::Future {
        let shared = &self.shared;
        let root = req.connection().and_then(|c| c.peer());
        shared.client.forward_from(root);
        // The handler's child peer (the stack's CascadeLayer gives it), or the connection's.
        let peer = req.peer().or_else(|| root.cloned());
        let inner_id = req.id().map(|id| shared.aliases.inner_id(id));
        let answer = shared.call(convert::to_lsp(&req, inner_id.clone()));
        if req.method() == "exit" {
            shared.exited.cancel();
        }
        let guard = inner_id.map(|id| CancelGuard::new(shared.clone(), id));
        ResponseFuture::new(answer, guard, shared.client.clone(), peer, req.method())
    }
}
