//! [`CancelRpc`]: the middleware of one connection (jsonrpsee builds one for each WebSocket and each HTTP request).

use std::{
    borrow::Cow,
    fmt,
    future::Future,
    sync::{Arc, Mutex, OnceLock},
};

use futures_util::{
    future::{self, BoxFuture, Either},
    FutureExt,
};
use jsonrpsee::{
    core::server::BatchResponseBuilder,
    server::middleware::rpc::{
        Batch, BatchEntry, MethodResponse, Notification, Request, RpcServiceT,
    },
};
use tower_cancel_http::front::{Link, PrincipalScope, TooManyPrincipals};
use tower_service::Service;

use crate::{
    bridge::{Below, Carried},
    ids,
    layer::Config,
    reply,
};

/// The cancel message taken when [`cancel_messages`](crate::CancelRpcLayer::cancel_messages) is on (LSP's).
pub(crate) const CANCEL_METHOD: &str = "$/cancelRequest";

/// The middleware [`CancelRpcLayer`](crate::CancelRpcLayer) puts over the jsonrpsee service of one connection.
pub struct CancelRpc<S> {
    inner: Arc<S>,
    below: Arc<dyn Below>,
    config: Arc<Config>,
    // The connection's link, opened by its first call (whose HTTP extensions may name the principal whose scope
    // it joins), closed when jsonrpsee drops this middleware: once the connection is gone and its last call ended.
    link: OnceLock<Opened>,
    opening: Mutex<()>,
}

/// A connection's link, and the principal's scope it is an exchange of.
#[derive(Debug)]
pub(crate) struct Opened {
    // First: dropped (its calls cancelled) before the hold on the principal's scope goes.
    link: Link,
    principal: Option<PrincipalScope>,
}

impl Opened {
    pub(crate) fn new(link: Link, principal: Option<PrincipalScope>) -> Self {
        Self { link, principal }
    }
}

impl<S> CancelRpc<S>
where
    S: RpcServiceT<MethodResponse = MethodResponse> + Send + Sync + 'static,
{
    pub(crate) fn new(inner: S, config: Arc<Config>) -> Self {
        let inner = Arc::new(inner);
        Self {
            below: inner.clone(),
            inner,
            config,
            link: OnceLock::new(),
            opening: Mutex::new(()),
        }
    }
}

impl<S> CancelRpc<S> {
    fn opened(&self, extensions: &http::Extensions) -> Result<&Opened, TooManyPrincipals> {
        if let Some(opened) = self.link.get() {
            return Ok(opened);
        }
        // One opener: a link opened twice would close the loser's connection, and cancel its call, when dropped.
        let _only = self
            .opening
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(opened) = self.link.get() {
            return Ok(opened);
        }
        // Not kept when refused: the next call tries again.
        let opened = self.config.open(extensions)?;
        Ok(self.link.get_or_init(|| opened))
    }

    /// Register the call now (so that a cancel read next finds it) and give the future of its reply.
    fn start(
        &self,
        id: tower_cancel::Id,
        request: Request<'_>,
    ) -> impl Future<Output = MethodResponse> + Send + 'static {
        let their_id = request.id.clone().into_owned();
        let admitted = self.opened(&request.extensions).ok().and_then(|opened| {
            let quota = opened.principal.as_ref().map(PrincipalScope::quota);
            let admitted = self.config.front.admit_one(false, quota).ok()?;
            Some((opened, admitted))
        });
        let started = match admitted {
            Some((opened, admitted)) => {
                let Request {
                    method,
                    params,
                    extensions,
                    ..
                } = request;
                // Our request names the call (its id, its method) for the stack; the params stay in jsonrpsee's.
                let mut ours =
                    tower_cancel::Request::from_parts(Some(id), method.to_string(), None);
                opened.link.prepare(&mut ours, None);
                let mut call = jsonrpsee::types::Request::owned(
                    method.into_owned(),
                    params.map(Cow::into_owned),
                    their_id.clone(),
                );
                call.extensions = extensions;
                ours.extensions_mut().insert(Carried {
                    call,
                    below: self.below.clone(),
                });
                // The stack is always ready (its cancel layer waits for readiness inside each request's future).
                let mut stack = self.config.stack.clone();
                Ok((stack.call(ours), admitted))
            }
            // Past a bound on calls in flight (or no room for another principal): refused, never run.
            None => Err(reply::busy(their_id.clone())),
        };
        async move {
            match started {
                Ok((running, admitted)) => {
                    let outcome = running.await;
                    drop(admitted);
                    reply::render(their_id, outcome)
                }
                Err(busy) => busy,
            }
        }
    }

    /// Hand a cancel message to the stack, which applies it now (the call of that id on this connection, or a
    /// remembered early cancel); a malformed one is ignored there.
    fn cancel(&self, notification: Notification<'_>) {
        let Ok(opened) = self.opened(&notification.extensions) else {
            // No scope to cancel in (no room for another principal): nothing of this connection runs.
            return;
        };
        let params = notification.params.map(Cow::into_owned);
        let mut ours = tower_cancel::Request::from_parts(None, CANCEL_METHOD.to_owned(), params);
        opened.link.prepare(&mut ours, None);
        // Consumed in `call`: the future is ready, with nothing in it.
        drop(self.config.stack.clone().call(ours));
    }
}

impl<S> RpcServiceT for CancelRpc<S>
where
    S: RpcServiceT<
            MethodResponse = MethodResponse,
            NotificationResponse = MethodResponse,
            BatchResponse = MethodResponse,
        > + Send
        + Sync
        + 'static,
{
    type MethodResponse = MethodResponse;
    type NotificationResponse = MethodResponse;
    type BatchResponse = MethodResponse;

    fn call<'a>(&self, request: Request<'a>) -> impl Future<Output = MethodResponse> + Send + 'a {
        match ids::ours(&request.id) {
            Some(id) => Either::Left(self.start(id, request)),
            // No cancel could name it: jsonrpsee's own, untouched.
            None => Either::Right(self.inner.call(request)),
        }
    }

    fn batch<'a>(&self, batch: Batch<'a>) -> impl Future<Output = MethodResponse> + Send + 'a {
        // Element by element, all registered now and run at once: a cancel reaches each alone, and the others
        // are answered.
        let mut got_notification = false;
        let elements: Vec<BoxFuture<'a, Option<MethodResponse>>> = batch
            .into_iter()
            .map(|entry| match entry {
                Ok(BatchEntry::Call(request)) => self.call(request).map(Some).boxed(),
                Ok(BatchEntry::Notification(notification)) => {
                    got_notification = true;
                    self.notification(notification).map(|_| None).boxed()
                }
                Err(invalid) => {
                    let (error, id) = invalid.into_parts();
                    future::ready(Some(MethodResponse::error(id, error))).boxed()
                }
            })
            .collect();
        let limit = self.config.max_batch_reply_bytes;
        async move {
            let mut replies = BatchResponseBuilder::new_with_limit(limit);
            for reply in future::join_all(elements).await.into_iter().flatten() {
                if let Err(too_big) = replies.append(reply) {
                    return too_big;
                }
            }
            // As jsonrpsee answers: nothing for a batch of notifications, -32600 for an empty one.
            if replies.is_empty() && got_notification {
                MethodResponse::notification()
            } else {
                MethodResponse::from_batch(replies.finish())
            }
        }
    }

    fn notification<'a>(
        &self,
        notification: Notification<'a>,
    ) -> impl Future<Output = MethodResponse> + Send + 'a {
        if self.config.cancel_messages && notification.method == CANCEL_METHOD {
            self.cancel(notification);
            return Either::Left(future::ready(MethodResponse::notification()));
        }
        Either::Right(self.inner.notification(notification))
    }
}

impl<S> fmt::Debug for CancelRpc<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CancelRpc")
            .field("link", &self.link.get())
            .finish_non_exhaustive()
    }
}
