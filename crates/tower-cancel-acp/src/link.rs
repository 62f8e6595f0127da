//! One SDK connection: the agent served by the SDK's own loop over its in-memory [`Channel`] of raw JSON-RPC
//! frames, and the table of the stack's requests it is working on.
//!
//! The SDK sees ids of the bridge's own (a counter): the client's ids stay with the stack. A client reusing the id
//! of a cancelled request is never answered by the old handler, and an answer for a request the stack has already
//! settled finds no entry and is dropped.
//!
//! The SDK has no marker of the request a handler's request to the client was made in (rmcp's
//! `OriginatingRequestId`): ACP gives one instead. Every request of an agent to its client names its `sessionId`,
//! and a session has at most one prompt turn at a time, so a request for session `S` belongs to the `session/prompt`
//! of `S` in flight, and goes out through that prompt's child [`Peer`], cancelled with it.

use std::{
    collections::HashMap,
    panic::AssertUnwindSafe,
    pin::pin,
    sync::{
        atomic::{AtomicBool, AtomicI64, Ordering},
        Arc, Mutex, MutexGuard, OnceLock,
    },
};

use agent_client_protocol::{
    Channel, Client, ConnectTo, RawJsonRpcId, RawJsonRpcMessage, RawJsonRpcNotification,
    RawJsonRpcRequest, RawJsonRpcResponse, TransportFrame,
};
use futures::{channel::mpsc as frames, FutureExt, StreamExt};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot, watch};
use tower_cancel::{dialect::Acp, ErrorObject, Peer};

use crate::wire;

/// What the bridge tells a request of the stack waiting on the SDK.
#[derive(Debug)]
pub(crate) enum Event {
    /// The SDK's answer (the last event).
    Reply(Result<Value, ErrorObject>),
    /// The agent made a request to the client (`id` is the SDK's), to be sent through the request's child peer.
    Nested {
        id: RawJsonRpcId,
        method: String,
        params: Value,
    },
    /// The agent withdrew its request `id` to the client (the SDK sent `$/cancel_request` for it).
    NestedCancelled(RawJsonRpcId),
}

/// A request of the stack that the SDK is working on.
struct Pending {
    events: mpsc::UnboundedSender<Event>,
    /// The session of a `session/prompt`: the agent's requests to the client that name it belong to this request.
    session: Option<String>,
    /// The SDK's ids of the requests the agent made to the client in this request, still open.
    nested: Vec<RawJsonRpcId>,
}

#[derive(Default)]
struct Table {
    /// By the bridge's id.
    calls: HashMap<i64, Pending>,
    /// A session -> the bridge's id of its prompt in flight.
    prompts: HashMap<String, i64>,
    /// The SDK's id of a request the agent made to the client -> the bridge's id of the prompt it was made in.
    nested: HashMap<RawJsonRpcId, i64>,
    /// The agent's requests to the client made outside any prompt, sent on the connection: their stop switches.
    loose: HashMap<RawJsonRpcId, oneshot::Sender<()>>,
}

/// The part the requests share: the table, and the way to the SDK.
pub(crate) struct Router {
    table: Mutex<Table>,
    next_id: AtomicI64,
    to_sdk: frames::UnboundedSender<TransportFrame>,
    /// The connection's peer: for the agent's notifications (`session/update`) and its requests made outside a
    /// prompt. Offered by every request; the first one that has one sets it.
    fallback: OnceLock<Peer>,
    /// The SDK's connection has ended: no request can be served by it any more.
    ended: AtomicBool,
    /// The bridge's id of the replayed `initialize` of a connection that took over, until the SDK answers it.
    replay: Option<i64>,
    /// Whether requests may go to the SDK: at once, or once it answered the replayed `initialize` (the SDK refuses
    /// every request until its initialization is complete).
    ready: watch::Sender<bool>,
}

/// One SDK connection, ended when this is dropped (the SDK sees its input close).
pub(crate) struct Link {
    router: Arc<Router>,
}

impl Link {
    /// Serve `agent` with the SDK's own loop on a task of its own. `replay`: the client's `initialize`, to send
    /// first (its answer dropped) when this connection takes over from one that ended.
    pub(crate) fn start<A: ConnectTo<Client>>(
        agent: A,
        replay: Option<&tower_cancel::WireRequest>,
    ) -> Self {
        let (ours, sdk_end) = Channel::duplex();
        let (from_sdk, to_sdk) = ours.into_parts();
        let replay = replay.and_then(|initialize| wire::request(initialize, 0).ok());
        let replay = replay.map(wire::request_frame);
        let router = Arc::new(Router {
            table: Mutex::new(Table::default()),
            next_id: AtomicI64::new(1),
            to_sdk,
            fallback: OnceLock::new(),
            ended: AtomicBool::new(false),
            replay: replay.is_some().then_some(0),
            ready: watch::Sender::new(replay.is_none()),
        });
        if let Some(initialize) = replay {
            router.send(initialize);
        }
        tokio::spawn(run(agent, sdk_end, from_sdk, router.clone()));
        Self { router }
    }

    pub(crate) fn router(&self) -> &Arc<Router> {
        &self.router
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        // The SDK reads the end of its input and ends its connection, dropping every handler still running.
        self.router.to_sdk.close_channel();
    }
}

/// The SDK's connection, and what it sends routed as it comes. When it ends (its input closed, an error, or a
/// handler's panic, which the SDK does not catch: it unwinds the whole connection), every request it was working
/// on is answered -32603.
async fn run<A: ConnectTo<Client>>(
    agent: A,
    sdk_end: Channel,
    mut from_sdk: frames::UnboundedReceiver<TransportFrame>,
    router: Arc<Router>,
) {
    let mut sdk =
        pin!(AssertUnwindSafe(ConnectTo::<Client>::connect_to(agent, sdk_end)).catch_unwind());
    let outcome = loop {
        tokio::select! {
            biased;
            frame = from_sdk.next() => match frame {
                Some(frame) => router.route(frame),
                None => break (&mut sdk).await,
            },
            outcome = &mut sdk => {
                while let Ok(frame) = from_sdk.try_recv() {
                    router.route(frame);
                }
                break outcome;
            }
        }
    };
    let reason = match outcome {
        Ok(Ok(())) => "agent stopped".to_owned(),
        Ok(Err(error)) => format!("agent stopped: {}", error.message),
        Err(_) => "agent stopped: a handler panicked".to_owned(),
    };
    router.end(&reason);
}

impl Router {
    /// Waits until requests may go to the SDK (see `ready`).
    pub(crate) async fn ready(&self) {
        let mut ready = self.ready.subscribe();
        let _ = ready.wait_for(|ready| *ready).await;
    }

    pub(crate) fn next_id(&self) -> i64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the SDK's connection has ended.
    pub(crate) fn has_ended(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }

    /// The connection's peer, if no request has given it yet.
    pub(crate) fn offer_fallback(&self, peer: Option<&Peer>) {
        if self.fallback.get().is_none() {
            if let Some(peer) = peer {
                let _ = self.fallback.set(peer.clone());
            }
        }
    }

    /// Register request `id` (a prompt of `session`, if it is one); `false` once the SDK's connection has ended.
    pub(crate) fn register(
        &self,
        id: i64,
        events: mpsc::UnboundedSender<Event>,
        session: Option<String>,
    ) -> bool {
        let mut table = self.lock();
        // Checked under the lock `end` takes: a request registered here is answered by `end` if it comes later.
        if self.has_ended() {
            return false;
        }
        if let Some(session) = &session {
            table.prompts.insert(session.clone(), id);
        }
        table.calls.insert(
            id,
            Pending {
                events,
                session,
                nested: Vec::new(),
            },
        );
        true
    }

    /// Remove request `id` (answered or given up): the SDK's ids of the agent's requests it left open.
    pub(crate) fn take(
        &self,
        id: i64,
    ) -> Option<(mpsc::UnboundedSender<Event>, Vec<RawJsonRpcId>)> {
        let mut table = self.lock();
        let pending = table.calls.remove(&id)?;
        if let Some(session) = &pending.session {
            if table.prompts.get(session) == Some(&id) {
                table.prompts.remove(session);
            }
        }
        for nested in &pending.nested {
            table.nested.remove(nested);
        }
        Some((pending.events, pending.nested))
    }

    /// Forget the agent's request `id` to the client, made in request `origin` (answered or given up).
    pub(crate) fn nested_done(&self, origin: i64, id: &RawJsonRpcId) {
        let mut table = self.lock();
        table.nested.remove(id);
        if let Some(pending) = table.calls.get_mut(&origin) {
            pending.nested.retain(|n| n != id);
        }
    }

    pub(crate) fn send(&self, frame: TransportFrame) {
        // Only fails once the SDK's connection has ended: `end` answers the requests then.
        if self.to_sdk.unbounded_send(frame).is_err() {
            tracing::debug!("the SDK's connection has ended: frame dropped");
        }
    }

    /// The sizes of the table: requests, prompts, the agent's requests to the client (in prompts, and loose).
    pub(crate) fn sizes(&self) -> (usize, usize, usize, usize) {
        let table = self.lock();
        (
            table.calls.len(),
            table.prompts.len(),
            table.nested.len(),
            table.loose.len(),
        )
    }

    /// The SDK's connection ended: every request still waiting is answered -32603 `reason`.
    fn end(&self, reason: &str) {
        let table = {
            let mut table = self.lock();
            self.ended.store(true, Ordering::Release);
            std::mem::take(&mut *table)
        };
        // Whoever waits for the replayed `initialize` finds the connection ended.
        self.ready.send_replace(true);
        if !table.calls.is_empty() {
            tracing::error!(
                reason,
                requests = table.calls.len(),
                "the SDK's connection ended with requests in flight"
            );
        }
        for (_, pending) in table.calls {
            let _ = pending
                .events
                .send(Event::Reply(Err(ErrorObject::internal_error(reason))));
        }
    }

    /// A frame the SDK sends: to the request waiting for it, to the client, or dropped.
    fn route(self: &Arc<Self>, frame: TransportFrame) {
        let TransportFrame::Single(message) = frame else {
            tracing::warn!("the SDK sent a malformed frame: dropped");
            return;
        };
        match message {
            RawJsonRpcMessage::Response(response) => self.answer(response),
            RawJsonRpcMessage::Request(request) => self.nested(request),
            RawJsonRpcMessage::Notification(notification) => self.notification(notification),
        }
    }

    /// The SDK's answer: to the request, if it still waits (the stack may have settled it already).
    fn answer(&self, response: RawJsonRpcResponse) {
        let (id, result) = match response {
            RawJsonRpcResponse::Result { id, result } => (id, Ok(result)),
            RawJsonRpcResponse::Error { id, error } => (id, Err(wire::error_object(&error))),
        };
        let RawJsonRpcId::Number(id) = id else { return };
        if Some(id) == self.replay {
            if let Err(error) = &result {
                tracing::warn!(%error, "the agent that took over refused the replayed initialize");
            }
            self.ready.send_replace(true);
            return;
        }
        match self.take(id) {
            Some((events, nested)) => {
                let _ = events.send(Event::Reply(result));
                // The request is over: its requests still open are dropped with it (cancelled on the wire).
                for id in nested {
                    self.send(wire::nested_answer(
                        id,
                        Err(tower_cancel::PeerError::Cancelled),
                    ));
                }
            }
            None => tracing::trace!(id, "the SDK answered a request already settled: dropped"),
        }
    }

    /// A request of the agent's to the client: through the child peer of its session's prompt, or else on the
    /// connection.
    fn nested(self: &Arc<Self>, request: RawJsonRpcRequest) {
        let (method, params) = wire::method_and_params(&request.method, request.params);
        let id = request.id;
        {
            let mut table = self.lock();
            let origin = wire::session_id(&params).and_then(|s| table.prompts.get(&s).copied());
            // Every prompt of `prompts` is in `calls` (`take` removes both).
            if let Some((origin, pending)) =
                origin.and_then(|origin| Some((origin, table.calls.get_mut(&origin)?)))
            {
                let event = Event::Nested {
                    id: id.clone(),
                    method: method.clone(),
                    params: params.clone(),
                };
                if pending.events.send(event).is_ok() {
                    pending.nested.push(id.clone());
                    table.nested.insert(id, origin);
                    return;
                }
            }
        }
        let Some(peer) = self.fallback.get() else {
            self.send(wire::nested_answer(
                id,
                Err(tower_cancel::PeerError::Closed),
            ));
            return;
        };
        // Made outside any prompt: sent on the connection, not cancelled with any request of the client's. The
        // agent can still withdraw it (`$/cancel_request`), which cancels it on the wire.
        let (stop, stopped) = oneshot::channel();
        self.lock().loose.insert(id.clone(), stop);
        let call = peer.request(method, params);
        let router = self.clone();
        tokio::spawn(async move {
            tokio::select! {
                answer = call => {
                    router.lock().loose.remove(&id);
                    router.send(wire::nested_answer(id, answer));
                }
                // Withdrawn by the agent (or its connection ended): dropping the call sends the cancel.
                _ = stopped => {}
            }
        });
    }

    fn notification(&self, notification: RawJsonRpcNotification) {
        if &*notification.method == Acp::CANCEL_METHOD {
            let Some(id) = wire::cancelled_id(notification.params.as_ref()) else {
                return;
            };
            let mut table = self.lock();
            if let Some(stop) = table.loose.remove(&id) {
                drop(stop);
                return;
            }
            if let Some(pending) = table
                .nested
                .get(&id)
                .and_then(|origin| table.calls.get(origin))
            {
                let _ = pending.events.send(Event::NestedCancelled(id));
            }
            return;
        }
        let Some(peer) = self.fallback.get() else {
            return;
        };
        let (method, params) = wire::method_and_params(&notification.method, notification.params);
        let _ = peer.notify(method, params);
    }
}
