//! One rmcp server, served by rmcp's own loop over an in-memory transport of typed messages, and the table of the
//! stack's requests it is working on.
//!
//! Typed, not bytes: an rmcp handler's request to the client carries, in its extensions (never on the wire),
//! [`OriginatingRequestId`], the id of the request it was made in; that is how the request it makes is sent
//! through *that* request's child [`Peer`](tower_cancel::Peer) and cancelled with it.
//!
//! rmcp sees ids of the bridge's own (a counter): the client's ids stay with the stack. rmcp forgets a
//! cancelled request, so a client reusing a cancelled id would otherwise be answered by the old handler; and the
//! stack has already settled a request whose rmcp answer comes late, so that answer finds no entry and is dropped.

use std::{
    borrow::Cow,
    collections::HashMap,
    convert::Infallible,
    future::{ready, Future},
    sync::{
        atomic::{AtomicI64, Ordering},
        Arc, Mutex, MutexGuard, OnceLock,
    },
};

use rmcp::{
    model::{
        ClientJsonRpcMessage, NumberOrString, RequestId, ServerJsonRpcMessage, ServerNotification,
    },
    service::{
        serve_directly_with_ct, OriginatingRequestId, RoleServer, RxJsonRpcMessage,
        TxJsonRpcMessage,
    },
    transport::Transport,
};
use serde_json::Value;
use tokio::sync::mpsc;
use tower_cancel::{progress::Progress, progress::ProgressUpdate, ErrorObject, Peer};

use crate::{guarded::Guarded, wire};

/// What the bridge tells a request of the stack waiting on rmcp.
#[derive(Debug)]
pub(crate) enum Event {
    /// rmcp's answer (the last event).
    Reply(Result<Value, ErrorObject>),
    /// The handler made a request to the client (`id` is rmcp's), to be sent through the request's child peer.
    Nested {
        id: RequestId,
        method: String,
        params: Value,
    },
    /// The handler gave up its request `id` to the client (rmcp sent `notifications/cancelled` for it).
    NestedCancelled(RequestId),
    /// A notification that belongs to this request's stream: one naming it as its subscription (the
    /// acknowledgment of a `subscriptions/listen`, what rmcp's `SubscriptionSink` sends on it). `params` still
    /// name the subscription by the bridge's id.
    Notify { method: String, params: Value },
}

/// A request of the stack that rmcp is working on.
struct Pending {
    events: mpsc::UnboundedSender<Event>,
    progress: Option<(String, Arc<Progress>)>,
    /// rmcp's ids of the requests the handler made to the client in this request, still open.
    nested: Vec<RequestId>,
}

#[derive(Default)]
struct Table {
    /// By the bridge's id.
    calls: HashMap<i64, Pending>,
    /// The client's progress token (its JSON text) -> the bridge's id.
    progress: HashMap<String, i64>,
    /// rmcp's id of a request the handler made to the client -> the bridge's id of the request it was made in.
    nested: HashMap<RequestId, i64>,
}

/// The part the transport shares: the table, and the way to rmcp.
pub(crate) struct Router {
    table: Mutex<Table>,
    to_rmcp: mpsc::UnboundedSender<ClientJsonRpcMessage>,
    next_id: AtomicI64,
    /// Where a message of the handler's that belongs to no request goes (a log, a list changed): the peer of the
    /// first connection seen, if it has one.
    fallback: OnceLock<Peer>,
}

/// One rmcp server: its loop runs until the link is dropped, which cancels its token, and with it every
/// handler's `ct` still running.
pub(crate) struct Link {
    router: Arc<Router>,
    // Holds rmcp's loop: dropping it cancels the loop's token (its `DropGuard`).
    _running: Box<dyn std::any::Any + Send + Sync>,
}

impl Link {
    /// Start serving `service` (inside a tokio runtime).
    pub(crate) fn start<S>(service: S) -> Self
    where
        S: rmcp::Service<RoleServer> + 'static,
    {
        let (to_rmcp, from_bridge) = mpsc::unbounded_channel();
        let router = Arc::new(Router {
            table: Mutex::new(Table::default()),
            to_rmcp,
            next_id: AtomicI64::new(1),
            fallback: OnceLock::new(),
        });
        let transport = Wire {
            from_bridge,
            router: router.clone(),
        };
        let running = serve_directly_with_ct(Guarded(service), transport, None, Default::default());
        Self {
            router,
            _running: Box::new(running),
        }
    }

    pub(crate) fn router(&self) -> &Arc<Router> {
        &self.router
    }
}

impl Router {
    fn lock(&self) -> MutexGuard<'_, Table> {
        // No step under the lock panics half-way; a poisoned table is still consistent.
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A fresh id for rmcp, never reused by this link.
    pub(crate) fn next_id(&self) -> i64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Remember `peer` as where messages of no request go, if none is yet.
    pub(crate) fn offer_fallback(&self, peer: Option<&Peer>) {
        if self.fallback.get().is_none() {
            if let Some(peer) = peer {
                let _ = self.fallback.set(peer.clone());
            }
        }
    }

    /// Put request `id` in the table, its events to `events`, its progress reported through `progress`.
    pub(crate) fn register(
        &self,
        id: i64,
        events: mpsc::UnboundedSender<Event>,
        progress: Option<Progress>,
    ) {
        let progress = progress.map(|p| (wire::token_key(p.token()), Arc::new(p)));
        let mut table = self.lock();
        if let Some((token, _)) = &progress {
            table.progress.insert(token.clone(), id);
        }
        table.calls.insert(
            id,
            Pending {
                events,
                progress,
                nested: Vec::new(),
            },
        );
    }

    /// Take request `id` out of the table, if it was there (rmcp has not answered it): the ids of the requests its
    /// handler made to the client that are still open.
    pub(crate) fn forget(&self, id: i64) -> Option<Vec<RequestId>> {
        self.take(id).map(|pending| pending.nested)
    }

    /// Take request `id` out of the table with what else the table holds for it.
    fn take(&self, id: i64) -> Option<Pending> {
        let mut table = self.lock();
        let pending = table.calls.remove(&id)?;
        if let Some((token, _)) = &pending.progress {
            if table.progress.get(token) == Some(&id) {
                table.progress.remove(token);
            }
        }
        for nested in &pending.nested {
            table.nested.remove(nested);
        }
        Some(pending)
    }

    /// Hand rmcp a message.
    pub(crate) fn send(&self, message: ClientJsonRpcMessage) {
        // Only fails once rmcp's loop has ended: the request then waits for its cancel, as with a dead handler.
        if self.to_rmcp.send(message).is_err() {
            tracing::debug!("rmcp's loop has ended: message dropped");
        }
    }

    /// How many requests rmcp is working on, and how many requests of its handlers to the client are open.
    pub(crate) fn sizes(&self) -> (usize, usize, usize) {
        let table = self.lock();
        (table.calls.len(), table.progress.len(), table.nested.len())
    }

    /// Forget the handler's request `id` to the client, made in request `origin` (answered or given up).
    pub(crate) fn nested_done(&self, origin: i64, id: &RequestId) {
        let mut table = self.lock();
        table.nested.remove(id);
        if let Some(pending) = table.calls.get_mut(&origin) {
            pending.nested.retain(|n| n != id);
        }
    }

    /// Something rmcp sends: to the request waiting for it, to the client, or dropped.
    fn route(&self, message: ServerJsonRpcMessage) {
        match message {
            ServerJsonRpcMessage::Response(response) => {
                let result = serde_json::to_value(response.result)
                    .map_err(|e| ErrorObject::internal_error(format!("unwritable result: {e}")));
                self.answer(&response.id, result);
            }
            ServerJsonRpcMessage::Error(error) => {
                if let Some(id) = &error.id {
                    self.answer(id, Err(wire::error_object(error.error)));
                }
            }
            ServerJsonRpcMessage::Request(request) => {
                let origin = rmcp::model::GetExtensions::extensions(&request.request)
                    .get::<OriginatingRequestId>()
                    .and_then(|OriginatingRequestId(id)| link_id(id));
                self.nested(request.id, origin, &request.request);
            }
            ServerJsonRpcMessage::Notification(notification) => {
                self.notification(notification.notification)
            }
        }
    }

    /// rmcp's answer to request `id`: to the request, if it still waits (the stack may have settled it already).
    fn answer(&self, id: &RequestId, result: Result<Value, ErrorObject>) {
        let Some(id) = link_id(id) else { return };
        match self.take(id) {
            Some(pending) => {
                let _ = pending.events.send(Event::Reply(result));
            }
            None => tracing::trace!(id, "rmcp answered a request already settled: dropped"),
        }
    }

    /// A request of the handler's to the client: sent through the child peer of the request it was made in.
    fn nested(&self, id: RequestId, origin: Option<i64>, request: &rmcp::model::ServerRequest) {
        let (method, params) = match serde_json::to_value(request) {
            Ok(Value::Object(mut fields)) => (
                fields
                    .remove("method")
                    .and_then(|m| m.as_str().map(str::to_owned))
                    .unwrap_or_default(),
                fields.remove("params").unwrap_or(Value::Null),
            ),
            _ => (String::new(), Value::Null),
        };
        let sent = origin.is_some_and(|origin| {
            let mut table = self.lock();
            let Some(pending) = table.calls.get_mut(&origin) else {
                return false;
            };
            let event = Event::Nested {
                id: id.clone(),
                method: method.clone(),
                params: params.clone(),
            };
            let sent = pending.events.send(event).is_ok();
            if sent {
                pending.nested.push(id.clone());
                table.nested.insert(id.clone(), origin);
            }
            sent
        });
        if sent {
            return;
        }
        match (origin, self.fallback.get()) {
            // Made outside any request's task (a `tokio::spawn` loses rmcp's marker): sent on the connection,
            // and not cancelled with any request. Its answer is handed back to rmcp.
            (None, Some(peer)) => {
                let call = peer.request(method, params);
                let to_rmcp = self.to_rmcp.clone();
                tokio::spawn(async move {
                    let _ = to_rmcp.send(wire::nested_answer(id, call.await));
                });
            }
            // Made in a request that is over, or with no connection to send it on: refused.
            _ => self.send(wire::nested_answer(
                id,
                Err(tower_cancel::PeerError::Cancelled),
            )),
        }
    }

    fn notification(&self, notification: ServerNotification) {
        match notification {
            ServerNotification::ProgressNotification(progress) => {
                let key = wire::rmcp_token_key(&progress.params.progress_token);
                let reporter = {
                    let table = self.lock();
                    table
                        .progress
                        .get(&key)
                        .and_then(|id| table.calls.get(id))
                        .and_then(|pending| pending.progress.as_ref().map(|(_, p)| p.clone()))
                };
                if let Some(reporter) = reporter {
                    let params = progress.params;
                    let mut update = ProgressUpdate::new(params.progress);
                    update.total = params.total;
                    update.message = params.message;
                    reporter.report(update);
                }
            }
            ServerNotification::CancelledNotification(cancelled) => {
                let Some(id) = cancelled.params.request_id else {
                    return;
                };
                let table = self.lock();
                if let Some(pending) = table
                    .nested
                    .get(&id)
                    .and_then(|origin| table.calls.get(origin))
                {
                    let _ = pending.events.send(Event::NestedCancelled(id));
                }
            }
            other => {
                let Ok(Value::Object(mut fields)) = serde_json::to_value(&other) else {
                    return;
                };
                let Some(method) = fields
                    .remove("method")
                    .and_then(|m| m.as_str().map(str::to_owned))
                else {
                    return;
                };
                let params = fields.remove("params").unwrap_or(Value::Null);
                // A subscription's notification goes on the subscription's own stream (over HTTP, the listen's
                // response), through the request it names.
                let params = match wire::subscription_id(&params) {
                    Some(id) => {
                        let table = self.lock();
                        match table.calls.get(&id) {
                            Some(pending) => {
                                let _ = pending.events.send(Event::Notify { method, params });
                                return;
                            }
                            None => {
                                tracing::trace!(id, %method, "a subscription already over: dropped");
                                return;
                            }
                        }
                    }
                    None => params,
                };
                if let Some(peer) = self.fallback.get() {
                    let _ = peer.notify(method, params);
                }
            }
        }
    }
}

/// The bridge's id in one of rmcp's.
fn link_id(id: &RequestId) -> Option<i64> {
    match id {
        NumberOrString::Number(n) => Some(*n),
        NumberOrString::String(_) => None,
    }
}

/// rmcp's side of the in-memory transport: it reads what the bridge sends, and what it writes is routed at once.
struct Wire {
    from_bridge: mpsc::UnboundedReceiver<ClientJsonRpcMessage>,
    router: Arc<Router>,
}

impl Transport<RoleServer> for Wire {
    type Error = Infallible;

    fn name() -> Cow<'static, str> {
        "tower-cancel".into()
    }

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.router.route(item);
        ready(Ok(()))
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleServer>>> + Send {
        self.from_bridge.recv()
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        ready(Ok(()))
    }
}
