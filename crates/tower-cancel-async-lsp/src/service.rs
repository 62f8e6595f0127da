//! [`LspAdapter`]: an async-lsp [`LspService`] as the `tower::Service<Request>` that tower-cancel's stack wraps.

use std::{
    fmt,
    future::Future,
    pin::Pin,
    sync::{Arc, Mutex},
    task::{Context, Poll},
};

use async_lsp::{AnyNotification, AnyRequest, LspService, ResponseError};
use pin_project_lite::pin_project;
use serde_json::Value;
use tower_cancel::{ErrorObject, Id, Request};
use tower_service::Service;

use crate::{
    flow,
    hub::{lock, Entry, Hub},
    id,
};

/// An async-lsp [`LspService`] (a `Router`, maybe under async-lsp's layers) as a `tower::Service` of
/// tower-cancel's [`Request`]s: put [`CancelStack::lsp()`](tower_cancel::CancelStack::lsp) around it and serve it
/// with [`tower_cancel_io::Server`]. Made by [`AsyncLsp::service`](crate::AsyncLsp::service); clones share the
/// one service.
///
/// - A request calls the service's `call` (its id as async-lsp can hold it: see the crate docs) and answers with
///   what the handler's future gives; dropping that future (a cancel, a timeout, a close) stops the handler.
/// - A notification calls the service's `notify` at once, in the order of arrival. A `ControlFlow::Break(Err(_))`
///   (async-lsp's `Router` returns one for any notification it has no handler for) is logged, never the end of
///   the connection; a `Break(Ok(()))` (the service's `exit`) ends [`AsyncLsp::serve`](crate::AsyncLsp::serve).
/// - `$/cancelRequest` never reaches the service: the stack consumes it.
pub struct LspAdapter<S> {
    pub(crate) service: Arc<Mutex<S>>,
    pub(crate) hub: Arc<Hub>,
}

impl<S> Clone for LspAdapter<S> {
    fn clone(&self) -> Self {
        Self {
            service: self.service.clone(),
            hub: self.hub.clone(),
        }
    }
}

impl<S> fmt::Debug for LspAdapter<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LspAdapter")
            .field("handlers", &self.hub.handlers())
            .finish_non_exhaustive()
    }
}

impl<S> Service<Request> for LspAdapter<S>
where
    S: LspService<Response = Value>,
    ResponseError: From<S::Error>,
{
    type Response = Value;
    type Error = ErrorObject;
    type Future = HandlerFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ErrorObject>> {
        lock(&self.service)
            .poll_ready(cx)
            .map_err(|error| error_object(error.into()))
    }

    fn call(&mut self, req: Request) -> Self::Future {
        let params = match params(&req) {
            Ok(params) => params,
            Err(error) => return HandlerFuture::ready(Err(error)),
        };
        let Some(wire_id) = req.id() else {
            self.notify(&req, params);
            return HandlerFuture::ready(Ok(Value::Null));
        };
        let entry = self.hub.open(&req);
        let request = any_request(wire_id, req.method(), params);
        let future = lock(&self.service).call(request);
        HandlerFuture {
            handler: Some(future),
            ready: None,
            entry,
        }
    }
}

impl<S: LspService> LspAdapter<S> {
    fn notify(&self, req: &Request, params: Value) {
        let notification = any_notification(req.method(), params);
        let flow = lock(&self.service).notify(notification);
        flow::apply(flow, &self.hub.exit, req.method());
    }
}

/// The request's params as async-lsp takes them: JSON `null` when absent.
fn params(req: &Request) -> Result<Value, ErrorObject> {
    match req.params() {
        None => Ok(Value::Null),
        // Already read once as JSON; only a nesting past serde_json's depth limit fails here.
        Some(raw) => serde_json::from_str(raw.get()).map_err(ErrorObject::invalid_params),
    }
}

/// async-lsp's request and notification types are `#[non_exhaustive]`: they are made from JSON once, and each
/// one is a clone of that with its fields (all public) set.
fn any_request(wire_id: &Id, method: &str, params: Value) -> AnyRequest {
    static BLANK: std::sync::OnceLock<AnyRequest> = std::sync::OnceLock::new();
    let mut request = BLANK
        .get_or_init(|| {
            serde_json::from_str(r#"{"id":0,"method":""}"#).expect("a valid async-lsp request")
        })
        .clone();
    request.id = id::to_async_lsp(wire_id);
    request.method = method.to_owned();
    request.params = params;
    request
}

fn any_notification(method: &str, params: Value) -> AnyNotification {
    static BLANK: std::sync::OnceLock<AnyNotification> = std::sync::OnceLock::new();
    let mut notification = BLANK
        .get_or_init(|| {
            serde_json::from_str(r#"{"method":""}"#).expect("a valid async-lsp notification")
        })
        .clone();
    notification.method = method.to_owned();
    notification.params = params;
    notification
}

/// async-lsp's error object as tower-cancel's.
pub(crate) fn error_object(error: ResponseError) -> ErrorObject {
    let object = ErrorObject::new(error.code.0.into(), error.message);
    match error.data {
        Some(data) => object.with_data(data),
        None => object,
    }
}

pin_project! {
    /// The future of one call of an [`LspAdapter`]: the handler's future, polled between the marks that tie its
    /// requests to the client to it (see the crate docs, "Nested requests").
    pub struct HandlerFuture<F> {
        #[pin]
        handler: Option<F>,
        ready: Option<Result<Value, ErrorObject>>,
        // After `handler`: dropped after it, so that its nested requests are cancelled once it is gone.
        entry: Option<Entry>,
    }
}

impl<F> HandlerFuture<F> {
    fn ready(result: Result<Value, ErrorObject>) -> Self {
        Self {
            handler: None,
            ready: Some(result),
            entry: None,
        }
    }
}

impl<F> fmt::Debug for HandlerFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandlerFuture")
            .field("key", &self.entry.as_ref().map(Entry::key))
            .finish_non_exhaustive()
    }
}

impl<F, E> Future for HandlerFuture<F>
where
    F: Future<Output = Result<Value, E>>,
    ResponseError: From<E>,
{
    type Output = Result<Value, ErrorObject>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let Some(handler) = this.handler.as_pin_mut() else {
            let done = this.ready.take();
            return Poll::Ready(
                done.unwrap_or_else(|| {
                    Err(ErrorObject::internal_error("polled after it finished"))
                }),
            );
        };
        let polled = match this.entry {
            Some(entry) => entry.hub().poll_marked(entry.key(), || handler.poll(cx)),
            None => handler.poll(cx),
        };
        polled.map(|result| result.map_err(|error| error_object(error.into())))
    }
}
