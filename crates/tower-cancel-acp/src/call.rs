//! One request of the stack, handed to the SDK: it waits for the SDK's answer, and meanwhile sends the requests the
//! agent makes to the client in it through the request's child peer. Dropped before the answer (the stack
//! cancelled it: the client's `$/cancel_request`, a timeout, the end of the input, a shutdown), it sends the SDK
//! `$/cancel_request` for it, so the handler's `RequestCancellation` fires, and the requests the agent made to the
//! client are dropped, so each is cancelled on the wire.

use std::{collections::HashMap, future::Future, pin::Pin, sync::Arc};

use agent_client_protocol::RawJsonRpcId;
use futures::{stream::FuturesUnordered, StreamExt};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tower_cancel::{dialect::Acp, ErrorObject, Peer, PeerError, Request, RequestContext};

use crate::{
    link::{Event, Router},
    wire,
};

/// Ends with the client's answer, or `None` when the agent withdrew the request (it wants no answer then).
type NestedCall =
    Pin<Box<dyn Future<Output = (RawJsonRpcId, Option<Result<Value, PeerError>>)> + Send>>;

/// Serve `req` (a request or a notification of the client) with the SDK connection behind `router`.
pub(crate) async fn call(router: Arc<Router>, req: Request) -> Result<Value, ErrorObject> {
    router.offer_fallback(req.connection().and_then(|c| c.peer()));
    if req.is_notification() {
        // A cancel is the stack's to take; anything else is the agent's (`session/cancel` too, which a stack that
        // groups by session has acted on already).
        if req.method() != Acp::CANCEL_METHOD {
            if let Some(frame) = wire::notification(&req) {
                router.send(frame);
            }
        }
        return Ok(Value::Null);
    }
    let mut request = wire::request(&req, 0)?;
    router.ready().await;
    let id = router.next_id();
    request.id = RawJsonRpcId::Number(id);
    let session = (req.method() == "session/prompt")
        .then(|| req.params_as::<Value>().ok())
        .flatten()
        .and_then(|params| wire::session_id(&params));
    let (events, mut receiver) = mpsc::unbounded_channel();
    if !router.register(id, events, session) {
        return Err(ErrorObject::internal_error("agent stopped"));
    }
    let guard = Settle {
        router: router.clone(),
        id,
        context: req.context().cloned(),
        answered: false,
    };
    router.send(wire::request_frame(request));

    // The agent's requests to the client ride the request's child peer: cancelled on the wire with it.
    let peer = req
        .peer()
        .or_else(|| req.connection().and_then(|c| c.peer().cloned()));
    let mut nested: FuturesUnordered<NestedCall> = FuturesUnordered::new();
    let mut stops: HashMap<RawJsonRpcId, oneshot::Sender<()>> = HashMap::new();
    loop {
        tokio::select! {
            event = receiver.recv() => match event {
                Some(Event::Reply(result)) => {
                    guard.answered();
                    return result;
                }
                Some(Event::Nested { id: nested_id, method, params }) => {
                    let (stop, stopped) = oneshot::channel();
                    stops.insert(nested_id.clone(), stop);
                    nested.push(nested_call(peer.as_ref(), nested_id, method, params, stopped));
                }
                Some(Event::NestedCancelled(nested_id)) => {
                    // Dropping its stop ends the call, which sends the cancel.
                    stops.remove(&nested_id);
                }
                // Never: the table holds the sender until it sends the reply.
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

/// The agent's request `id` to the client, sent through `peer`; ends with the client's answer, or `None` when the
/// agent withdrew it (`stopped`). Dropped unanswered, the call sends the cancel on the wire.
fn nested_call(
    peer: Option<&Peer>,
    id: RawJsonRpcId,
    method: String,
    params: Value,
    stopped: oneshot::Receiver<()>,
) -> NestedCall {
    let Some(peer) = peer.cloned() else {
        return Box::pin(async move { (id, Some(Err(PeerError::Closed))) });
    };
    let call = peer.request(method, params);
    Box::pin(async move {
        tokio::select! {
            answer = call => (id, Some(answer)),
            _ = stopped => (id, None),
        }
    })
}

/// Tells the SDK to cancel a request the stack gave up (dropped before the SDK answered), and answers the agent's
/// requests to the client left open in it as cancelled (the client was sent the cancel for each).
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
        let Some((_, nested)) = self.router.take(self.id) else {
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
            "request given up: the agent's handler cancelled"
        );
        self.router
            .send(wire::cancel(RawJsonRpcId::Number(self.id)));
        for id in nested {
            self.router
                .send(wire::nested_answer(id, Err(PeerError::Cancelled)));
        }
    }
}
