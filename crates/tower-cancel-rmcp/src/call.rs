//! One request of the stack, handed to rmcp: it waits for rmcp's answer, and meanwhile sends the requests the
//! handler makes to the client through the request's child peer, and the notifications of a subscription on the
//! request's own stream. Dropped before the answer (the stack cancelled it: the client's cancel, a timeout, a
//! hang-up, a shutdown), it tells rmcp to cancel, so the handler's `ct` fires, and the requests it made to the
//! client are dropped, so each is cancelled on the wire (and answered to rmcp as cancelled, so that rmcp forgets
//! them too).

use std::{collections::HashMap, future::Future, pin::Pin, sync::Arc};

use futures_util::{stream::FuturesUnordered, StreamExt};
use rmcp::model::{ProgressToken, RequestId};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tower_cancel::{ErrorObject, Peer, PeerError, Request, RequestContext};

use crate::{
    link::{Event, Router},
    wire,
};

type NestedCall =
    Pin<Box<dyn Future<Output = (RequestId, Option<Result<Value, PeerError>>)> + Send>>;

/// Serve `req` (a request or a notification of the client) with the rmcp server behind `router`.
pub(crate) async fn call(router: Arc<Router>, req: Request) -> Result<Value, ErrorObject> {
    router.offer_fallback(req.connection().and_then(|c| c.peer()));
    if req.is_notification() {
        notify(&router, &req);
        return Ok(Value::Null);
    }
    let id = router.next_id();
    let mut message = wire::client_request(&req, id)?;
    if let rmcp::model::ClientJsonRpcMessage::Request(request) = &mut message {
        give_extensions(&req, &mut request.request);
    }
    let (events, mut receiver) = mpsc::unbounded_channel();
    router.register(id, events, req.progress());
    let guard = Settle {
        router: router.clone(),
        id,
        context: req.context().cloned(),
        answered: false,
    };
    router.send(message);

    // The handler's requests to the client ride the request's child peer: cancelled on the wire with it.
    let peer = req
        .peer()
        .or_else(|| req.connection().and_then(|c| c.peer().cloned()));
    let mut nested: FuturesUnordered<NestedCall> = FuturesUnordered::new();
    let mut stops: HashMap<RequestId, oneshot::Sender<()>> = HashMap::new();
    loop {
        tokio::select! {
            event = receiver.recv() => match event {
                Some(Event::Reply(result)) => {
                    guard.answered();
                    return result;
                }
                Some(Event::Notify { method, mut params }) => {
                    if let (Some(peer), Some(client_id)) = (peer.as_ref(), req.id()) {
                        wire::name_subscription(&mut params, client_id);
                        if peer.notify(method, params).is_err() {
                            tracing::debug!(id, "a subscription's notification found the stream closed");
                        }
                    }
                }
                Some(Event::Nested { id: nested_id, method, params }) => {
                    let (stop, stopped) = oneshot::channel();
                    stops.insert(nested_id.clone(), stop);
                    nested.push(nested_call(&router, peer.as_ref(), nested_id, method, params, stopped));
                }
                Some(Event::NestedCancelled(nested_id)) => {
                    // Dropping its stop ends the call, which sends the cancel.
                    stops.remove(&nested_id);
                }
                // The link is gone (the session ended): the stack's own cancel settles the request.
                None => std::future::pending::<()>().await,
            },
            Some((nested_id, answer)) = nested.next(), if !nested.is_empty() => {
                stops.remove(&nested_id);
                router.nested_done(id, &nested_id);
                if let Some(answer) = answer {
                    router.send(wire::nested_answer(nested_id, answer));
                }
            }
        }
    }
}

/// A client notification: to rmcp, unless it is about ids of the stack's (its cancels are the stack's to take).
fn notify(router: &Router, req: &Request) {
    if req.method() == "notifications/cancelled" {
        return;
    }
    if let Some(message) = wire::client_notification(req) {
        router.send(message);
    }
}

/// What the handler gets in `RequestContext::extensions` besides rmcp's: the request's connection (its registry,
/// its peer) and the extensions the transport gave the request (over HTTP: the headers, the revision).
fn give_extensions(req: &Request, request: &mut rmcp::model::ClientRequest) {
    let extensions = rmcp::model::GetExtensions::extensions_mut(request);
    if let Some(connection) = req.connection() {
        extensions.insert(connection.clone());
    }
    extensions.insert(req.extensions().clone());
}

/// The handler's request `id` to the client, sent through `peer`; ends with the client's answer, or with `None`
/// when rmcp gave it up (`stopped`). Dropped unanswered, the call sends the cancel.
fn nested_call(
    router: &Arc<Router>,
    peer: Option<&Peer>,
    id: RequestId,
    method: String,
    mut params: Value,
    stopped: oneshot::Receiver<()>,
) -> NestedCall {
    let Some(peer) = peer.cloned() else {
        return Box::pin(async move { (id, Some(Err(PeerError::Closed))) });
    };
    // rmcp asked with a progress token of its own: the client's reports come back to it under that token.
    let token = params
        .get_mut("_meta")
        .and_then(|meta| meta.as_object_mut())
        .and_then(|meta| meta.remove("progressToken"))
        .and_then(|token| serde_json::from_value::<ProgressToken>(token).ok());
    let call = match token {
        Some(token) => {
            let router = router.clone();
            peer.request_with_progress(method, params, move |update| {
                router.send(wire::nested_progress(&token, &update));
            })
        }
        None => peer.request(method, params),
    };
    Box::pin(async move {
        tokio::select! {
            answer = call => (id, Some(answer)),
            _ = stopped => (id, None),
        }
    })
}

/// Tells rmcp to cancel a request the stack gave up (dropped before rmcp answered).
struct Settle {
    router: Arc<Router>,
    id: i64,
    context: Option<RequestContext>,
    answered: bool,
}

impl Settle {
    fn answered(mut self) {
        self.answered = true;
    }
}

impl Drop for Settle {
    fn drop(&mut self) {
        if self.answered {
            return;
        }
        let Some(nested) = self.router.forget(self.id) else {
            return;
        };
        let reason = self
            .context
            .as_ref()
            .and_then(RequestContext::reason)
            .map(|reason| reason.to_string());
        tracing::debug!(
            id = self.id,
            ?reason,
            "request given up: rmcp's handler cancelled"
        );
        self.router.send(wire::cancel(self.id, reason));
        // Dropped with this request, each request the handler made to the client was cancelled on the wire; rmcp
        // keeps waiting for an answer to each (its pool of responders) until it gets one: this is it. After the
        // cancel, so that the handler hears `ct` first.
        for nested_id in nested {
            self.router
                .send(wire::nested_answer(nested_id, Err(PeerError::Cancelled)));
        }
    }
}
