//! One WebSocket, one ABP session, one scope: the reader that turns envelopes into calls and cancels, the tasks
//! that run the calls, and the writer that sends what they answer.
//!
//! # Order
//!
//! ABP wants a cancel's `cancel-result` before the cancelled call's `call-result`. Both go through one queue, whose
//! sender sits behind a lock: the reader holds it from before the cancel reaches the call's lifecycle until its
//! `cancel-result` is queued, and a call's task takes it to queue its `call-result`. A call cancelled by that cancel
//! can only answer after the swap, so its result queues behind the acknowledgment.
//!
//! # Shutdown
//!
//! The app's shutdown closes the session's connection (a link of the app's [`Front`]) with reason `Shutdown`:
//! its calls are answered cancelled, and a call read from then on starts out cancelled and is answered so without
//! running. The reader goes on until every call of the session is answered, then the session ends.
//!
//! # Bounds
//!
//! What the app answers waits in the session's [outgoing queue](super::outgoing), pongs included: while more
//! than its bound waits, the session reads nothing more from the agent, and a session whose reading stays stopped
//! for the stall timeout is closed as a disconnect (its calls cancelled, its socket dropped unwritten).

use std::{
    ops::ControlFlow,
    sync::{atomic::Ordering, Arc, Mutex},
    time::Duration,
};

use futures_util::{stream::SplitSink, SinkExt, StreamExt};
use serde_json::value::to_raw_value;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::{Error as WsError, Message as WsMessage};
use tower_cancel::{
    dialect::{
        abp::{self, CallOptions as DialectCallOptions},
        Abp, CancelNotice,
    },
    outbox::OutboxReceiver,
    timeout::RequestedTimeout,
    CancelReason, Dialect, Id, Message, Outbox, Request,
};

use super::{
    incoming::{self, Incoming},
    outgoing::{self, Outgoing, Queue},
    reading::{Read, Reading},
    render,
    sessions::Slot,
    upgrade::Socket,
    Config,
};
use crate::{
    abp::wire::{
        types, Call, Cancel, Envelope, ErrorBody, Features, Initialize, InitializeResult,
        PROTOCOL_VERSION,
    },
    call::{self, RpcService},
    front::{Endpoint, Front, Link, OnHangUp, Quota},
};

/// The queue to the writer, behind the lock that orders acknowledgments before the results they cancel.
struct Out {
    queue: Mutex<Queue>,
}

impl Out {
    fn send(&self, envelope: &Envelope) {
        // Serialized before the lock is taken: the lock only orders the queueing.
        let text = envelope.to_text();
        self.lock().send(Outgoing::Text(text));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        // Sending cannot panic halfway: a poisoned lock holds a whole sender.
        self.queue
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

struct Session<S> {
    app: Endpoint<S, Config>,
    front: Front,
    out: Arc<Out>,
    // Handlers' progress reports go through the connection's outbox; the writer turns them into envelopes.
    outbox: Outbox,
    state: State,
    // Calls of this session whose tasks have not ended (their result may still be on its way).
    running: Quota,
    // Each call's task holds a clone: once all are dropped, `ended` yields `None`.
    alive: Option<mpsc::Sender<()>>,
}

enum State {
    Uninitialized,
    Initialized {
        // The session's connection, open in the app's table of links while the session lives.
        link: Link,
        progress: bool,
    },
}

/// How a session's reading ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ending {
    /// The agent closed the socket, sent `shutdown`, or broke the protocol.
    Left,
    /// The app is shutting down.
    Shutdown,
    /// The agent read too little of its replies for the stall timeout.
    Stalled,
}

/// Serve one session, which holds `slot`, until the agent leaves, sends `shutdown`, stops reading for the stall
/// timeout, or the app shuts down.
pub(super) async fn run<S: RpcService>(socket: Socket, app: Endpoint<S, Config>, slot: Slot) {
    let config = app.protocol();
    let counters = &config.counters;
    let (sink, frames) = socket.split();
    let (queue, queued) = outgoing::queue(config.max_queued_bytes, counters.queued_bytes.clone());
    let (outbox, progress) = Outbox::new();
    // Progress reports are dropped while as much waits as the replies' bound (`Progress::report` says `false`).
    outbox.set_max_queued_bytes(config.max_queued_bytes);
    let mut writer = tokio::spawn(write(sink, queued, progress));
    let mut reading = Reading::new(
        frames,
        queue.clone(),
        config.stall_timeout,
        counters.stalled.clone(),
    );
    let (alive, mut ended) = mpsc::channel(1);
    let front = app.front();
    let shutting_down = front.shutting_down();
    tokio::pin!(shutting_down);
    let mut session = Session {
        app: app.clone(),
        front,
        out: Arc::new(Out {
            queue: Mutex::new(queue),
        }),
        outbox,
        state: State::Uninitialized,
        running: Quota::new(app.protocol().max_calls_per_session),
        alive: Some(alive),
    };
    tracing::debug!("ABP session opened");
    let mut ending = loop {
        let read = tokio::select! {
            biased;
            () = &mut shutting_down => break Ending::Shutdown,
            read = reading.next() => read,
        };
        match read {
            Read::Stalled => break Ending::Stalled,
            Read::Frame(frame) => {
                if session.frame(frame).is_break() {
                    break Ending::Left;
                }
            }
        }
    };
    if ending == Ending::Shutdown && session.drain(&mut reading).await.is_break() {
        ending = Ending::Stalled;
    }
    if ending == Ending::Stalled {
        // The writer waits on an agent that does not read: what it holds is dropped unwritten.
        counters.stalls.fetch_add(1, Ordering::Relaxed);
        writer.abort();
    }
    session.end(match ending {
        Ending::Shutdown => CancelReason::Shutdown,
        Ending::Left | Ending::Stalled => CancelReason::Disconnect,
    });
    // Every call's task has sent its result: the writer may finish.
    while ended.recv().await.is_some() {}
    // The link is let go once the socket is closed, so that a drain of the app waits for it.
    let state = std::mem::replace(&mut session.state, State::Uninitialized);
    drop(session);
    drop(reading);
    // The last replies and the close get the stall timeout to be written: an agent that stopped reading cannot
    // hold the session open.
    if tokio::time::timeout(config.stall_timeout, &mut writer)
        .await
        .is_err()
    {
        tracing::warn!("the agent did not read the session's last replies: closing the socket");
        writer.abort();
    }
    drop(state);
    drop(slot);
    tracing::debug!("ABP session closed");
}

impl<S: RpcService> Session<S> {
    /// One frame from the agent (`None` once the socket is closed); `Break` when the session is over.
    fn frame(&mut self, frame: Option<Result<WsMessage, WsError>>) -> ControlFlow<()> {
        match frame {
            Some(Ok(WsMessage::Text(text))) => self.receive(text.as_str()),
            Some(Ok(WsMessage::Binary(_))) => {
                self.bad(
                    None,
                    render::INVALID_MESSAGE,
                    "a binary frame: ABP envelopes are text",
                );
                ControlFlow::Continue(())
            }
            // The library has queued the pong; it is counted, and written, with a flush of the socket.
            Some(Ok(WsMessage::Ping(payload))) => {
                self.out.lock().send(Outgoing::pong(payload.len()));
                ControlFlow::Continue(())
            }
            // A raw frame is never read: the library gathers them into messages.
            Some(Ok(WsMessage::Pong(_) | WsMessage::Frame(_))) => ControlFlow::Continue(()),
            Some(Ok(WsMessage::Close(_))) | Some(Err(_)) | None => ControlFlow::Break(()),
        }
    }

    /// The app is shutting down, and has closed the session's connection with reason `Shutdown`: its calls are
    /// answered cancelled. Read on until every one of them is answered; a call read meanwhile starts out
    /// cancelled and is answered so, without running. `Break` if the agent stalled the reading meanwhile.
    async fn drain(&mut self, reading: &mut Reading) -> ControlFlow<()> {
        let answered = self.running.idle();
        tokio::pin!(answered);
        loop {
            let read = tokio::select! {
                biased;
                () = &mut answered => return ControlFlow::Continue(()),
                read = reading.next() => read,
            };
            match read {
                Read::Stalled => return ControlFlow::Break(()),
                Read::Frame(frame) => {
                    if self.frame(frame).is_break() {
                        return ControlFlow::Continue(());
                    }
                }
            }
        }
    }

    fn receive(&mut self, text: &str) -> ControlFlow<()> {
        match incoming::read(text) {
            Incoming::Initialize { id, payload } => self.initialize(id, payload),
            Incoming::Call { id, payload } => self.call(id, payload),
            Incoming::Cancel { id, payload } => self.cancel(id, payload),
            Incoming::Shutdown => return ControlFlow::Break(()),
            Incoming::ElicitationResponse => {
                tracing::debug!("an elicitation response, though none was asked for: ignored");
            }
            Incoming::Other { id, kind } => {
                let why = format!("envelopes of type {kind:?} are not taken by this app");
                self.bad(id, render::NOT_IMPLEMENTED, &why);
            }
            Incoming::Invalid(why) => self.bad(None, render::INVALID_MESSAGE, &why),
        }
        ControlFlow::Continue(())
    }

    fn initialize(&mut self, id: Option<String>, payload: Result<Initialize, String>) {
        if matches!(self.state, State::Initialized { .. }) {
            let error = ErrorBody::new(
                abp::ALREADY_INITIALIZED,
                "the session is initialized already",
                false,
            );
            self.out.send(&render::error(id, error));
            return;
        }
        let initialize = match payload {
            Ok(initialize) => initialize,
            Err(why) => {
                let error = ErrorBody::new(abp::INVALID_PARAMS, why, false);
                self.out.send(&render::error(id, error));
                return;
            }
        };
        let scope = tower_cancel::scope::Scope::with_dialect(Abp);
        // A session the app's shutdown finds is closed by it; one opened after refuses its calls from the start.
        let link = self
            .front
            .link(scope.connect(self.outbox.clone()), OnHangUp::Cancel);
        let session_id = uuid::Uuid::new_v4().to_string();
        tracing::debug!(
            session = %session_id,
            agent = %initialize.agent.name,
            version = %initialize.agent.version,
            "ABP session initialized"
        );
        let result = InitializeResult {
            session_id,
            protocol_version: PROTOCOL_VERSION.into(),
            app: self.app.protocol().info.clone(),
            capabilities: self.app.protocol().capabilities.clone(),
            features: Features {
                notifications: false,
                progress: initialize.features.progress,
                elicitation: false,
            },
        };
        self.state = State::Initialized {
            link,
            progress: initialize.features.progress,
        };
        self.out
            .send(&Envelope::new(types::INITIALIZE_RESULT, id, result));
    }

    fn call(&mut self, id: Option<String>, payload: Result<Call, String>) {
        let State::Initialized { link, progress } = &self.state else {
            self.out
                .send(&render::refused_call(id, render::not_initialized()));
            return;
        };
        let call = match payload {
            Ok(call) => call,
            Err(why) => {
                let error = ErrorBody::new(abp::INVALID_PARAMS, why, false);
                self.out.send(&render::refused_call(id, error));
                return;
            }
        };
        // The agent's library MUST make one; a call without is still run, though nothing can cancel it.
        let call_id = call
            .call_id()
            .map_or_else(|| uuid::Uuid::new_v4().to_string(), str::to_owned);
        let params = match call.params.as_ref().map(to_raw_value).transpose() {
            Ok(params) => params,
            Err(why) => {
                let error = ErrorBody::new(abp::INVALID_PARAMS, why.to_string(), false);
                self.out.send(&render::refused_call(id, error));
                return;
            }
        };
        let mut request = Request::from_parts(Some(Id::String(call_id)), call.capability, params);
        if let Some(options) = &call.options {
            if let Some(ms) = options.timeout {
                request
                    .extensions_mut()
                    .insert(RequestedTimeout(Duration::from_millis(ms)));
            }
            if *progress {
                request.extensions_mut().insert(DialectCallOptions {
                    progress_token: options.progress_token.clone(),
                });
            }
        }
        // Room in the app's bound and the session's, taken before the call is registered: a call past either is
        // refused without running, and its place in neither count.
        let admitted = match self.front.admit(1, Some(&self.running)) {
            Ok(mut room) => room.next().expect("room for one call"),
            Err(busy) => {
                let error = ErrorBody::new(render::RATE_LIMITED, busy.to_string(), true);
                self.out.send(&render::refused_call(id, error));
                return;
            }
        };
        link.prepare(&mut request, None);
        self.app
            .protocol()
            .counters
            .calls
            .fetch_add(1, Ordering::Relaxed);
        // Called here, not on the task: the call is in the session's registry before the next envelope is read,
        // so a cancel right behind it finds it.
        let reply = call::start(self.app.service.clone(), request);
        let out = self.out.clone();
        let guards = (admitted, self.alive.clone());
        tokio::spawn(async move {
            let _guards = guards;
            if let Some(reply) = reply.await {
                let result = render::call_result(reply);
                out.send(&Envelope::new(types::CALL_RESULT, id, result));
            }
        });
    }

    fn cancel(&mut self, id: Option<String>, payload: Option<Cancel>) {
        let Some(cancel) = payload else {
            let why = "a cancel's payload is {callId, reason?}, its callId at most 256 bytes";
            self.bad(id, abp::INVALID_PARAMS, why);
            return;
        };
        let State::Initialized { link, .. } = &self.state else {
            let refused = render::refused_cancel(id, cancel.call_id, render::not_initialized());
            self.out.send(&refused);
            return;
        };
        let notice = CancelNotice {
            id: Id::String(cancel.call_id),
            reason: cancel.reason,
        };
        // See the module docs: the acknowledgment is queued before the cancelled call can queue its result.
        let queue = self.out.lock();
        let ack = link
            .connection()
            .acknowledge_cancel(&notice.id, CancelReason::peer(notice.reason.clone()));
        let payload = Abp.acknowledge(&notice, ack);
        queue.send(Outgoing::Text(
            Envelope::new(types::CANCEL_RESULT, id, payload).to_text(),
        ));
        drop(queue);
        self.app
            .protocol()
            .counters
            .cancels
            .fetch_add(1, Ordering::Relaxed);
        tracing::debug!(call = %notice.id, ?ack, "ABP cancel acknowledged");
    }

    fn bad(&self, id: Option<String>, code: &str, why: &str) {
        self.app
            .protocol()
            .counters
            .bad_envelopes
            .fetch_add(1, Ordering::Relaxed);
        tracing::debug!(code, why, "ABP envelope refused");
        self.out
            .send(&render::error(id, ErrorBody::new(code, why, false)));
    }

    /// Stop the session's calls with `reason` (their results still go out), and let the tasks finish.
    fn end(&mut self, reason: CancelReason) {
        if let State::Initialized { link, .. } = &self.state {
            let cancelled = link.connection().close(reason.clone());
            tracing::debug!(cancelled, ?reason, "ABP session ending");
        }
        self.alive = None;
    }
}

/// Write what the session queues, and the handlers' progress reports, until the session is over; then close.
async fn write(
    mut sink: SplitSink<Socket, WsMessage>,
    mut queued: outgoing::Receiver,
    mut progress: OutboxReceiver,
) {
    loop {
        tokio::select! {
            // A report sent before its call's result is queued before it too: taken first, it goes out first.
            biased;
            Some(report) = progress.recv() => {
                progress.written(&report);
                let Some(envelope) = progress_envelope(&report) else {
                    continue;
                };
                if sink.send(WsMessage::Text(envelope.to_text().into())).await.is_err() {
                    return;
                }
            }
            next = queued.recv() => {
                let written = match next {
                    Some(Outgoing::Text(text)) => sink.send(WsMessage::Text(text.into())).await,
                    Some(Outgoing::Flush(_)) => sink.flush().await,
                    None => break,
                };
                if written.is_err() {
                    return;
                }
                // Counted until now: until the socket took it, it was held here or in the library's buffer.
                queued.written();
            }
        }
    }
    let _ = sink.send(WsMessage::Close(None)).await;
    let _ = sink.close().await;
}

/// A handler's progress report, which the dialect rendered as a notification, as its envelope.
fn progress_envelope(report: &[u8]) -> Option<Envelope> {
    let Ok(Message::Request(notification)) = Message::from_slice(report) else {
        return None;
    };
    let payload = notification.params_as::<serde_json::Value>().ok()?;
    Some(Envelope::new(notification.method(), None, payload))
}
