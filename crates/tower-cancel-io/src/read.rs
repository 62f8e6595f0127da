//! The reading half of a connection: frames in, the service called for each, replies out through the outbox.
//!
//! Everything a connection means beyond bytes (its scope, the peer's replies and progress, what closing cancels)
//! is the core's [`Connection`]; this loop only frames, calls and settles.

use std::{
    future::{poll_fn, Future},
    io,
    panic::AssertUnwindSafe,
    pin::{pin, Pin},
    task::{Context, Poll},
    time::Duration,
};

use bytes::BytesMut;
use futures_util::{Stream, StreamExt};
use tokio::{io::AsyncRead, time::Sleep};
use tokio_util::codec::{Decoder, FramedRead};
use tower_cancel::{
    error_map::error_object, unwind, BoxError, CancelReason, Connection, ErrorObject, Incoming,
    Message, Request, Response, Unavailable,
};
use tower_service::Service;

use crate::{
    adaptive::Pace,
    config::Config,
    frame::FrameError,
    in_flight::InFlight,
    repoll::Repoll,
    requests::{Mode, Started},
    settled::{outcome_of, panicked, Settled},
    signal::Signal,
    spawned::Spawned,
};

/// How many settled requests a closing connection answers before it gives its worker back to the runtime for a
/// turn (about what tokio's own budget lets a task do on its resources before it yields).
const SETTLED_PER_TURN: usize = 128;

/// Why the read loop stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ending {
    /// The peer closed, reading or writing failed.
    Disconnect,
    /// A graceful shutdown was asked for.
    Shutdown,
}

pub(crate) struct ReadLoop<S> {
    service: S,
    // Where requests run: polled by this loop, on tasks of their own, or first here and then on a task.
    mode: Mode<S>,
    // The adaptive mode's measure of the connection's handlers.
    pace: Pace,
    connection: Connection,
    config: Config,
    shutdown: Signal,
    writer_gone: Signal,
}

/// Closes the connection when the read loop ends in any way: returning, panicking, or its `serve` future dropped
/// (the usual `select!` against a signal). Closing twice does no harm, so the normal path closes first, with its
/// own reason.
struct CloseOnDrop(Connection);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.0.close(CancelReason::Disconnect);
    }
}

impl<S> ReadLoop<S>
where
    S: Service<Request, Response = Option<Response>>,
    S::Error: Into<BoxError>,
{
    /// The read loop of `connection`: `shutdown` starts its graceful shutdown, `writer_gone` tells it that the peer
    /// can no longer hear this side.
    pub(crate) fn new(
        service: S,
        mode: Mode<S>,
        connection: Connection,
        config: Config,
        shutdown: Signal,
        writer_gone: Signal,
    ) -> Self {
        Self {
            service,
            mode,
            pace: Pace::default(),
            connection,
            config,
            shutdown,
            writer_gone,
        }
    }

    pub(crate) async fn run<R, C>(mut self, mut frames: FramedRead<R, C>) -> io::Result<()>
    where
        R: AsyncRead + Unpin,
        C: Decoder<Item = Result<BytesMut, FrameError>, Error = io::Error>,
    {
        let outbox = self.connection.outbox().clone();
        let mut in_flight = InFlight::new();
        // Declared after `in_flight`, so dropped before it: the requests are cancelled (Disconnect) first, and their
        // handlers see that reason as they are dropped.
        let _close = CloseOnDrop(self.connection.clone());
        let mut result = Ok(());
        let mut ending = Ending::Disconnect;
        // Armed when a graceful shutdown begins: the end of the drain.
        let mut drain = pin!(tokio::time::sleep(Duration::ZERO));
        // Armed when the outbox becomes full (reading stops then): the connection is closed if it stays full until
        // it passes.
        let mut stall = pin!(tokio::time::sleep(Duration::ZERO));
        let mut was_full = false;
        // Polled again at once when it wakes itself (a cancel it reads wakes the request it cancels, which this loop
        // polls), not requeued by tokio as a task that yielded (`repoll.rs`). The close below is not: its turns
        // given back to the runtime are wakes of its own.
        Repoll::new(async {
            loop {
                // The signals and the drain's timer are read here, with a load each, and polled in the `select!` below
                // only when nothing else is ready: a waiter registered on a token costs a lock to add and one to
                // remove, which every frame and every reply would pay if the tokens came first.
                if self.writer_gone.has_fired() {
                    break;
                }
                if ending == Ending::Disconnect && self.shutdown.has_fired() {
                    ending = self.begin_drain(drain.as_mut(), in_flight.len());
                    if in_flight.is_empty() {
                        break;
                    }
                }
                let draining = ending == Ending::Shutdown;
                if draining && drain.deadline() <= tokio::time::Instant::now() {
                    tracing::info!(
                        left = in_flight.len(),
                        "drain timeout passed: cancelling the rest"
                    );
                    break;
                }
                let full = outbox.is_full();
                if full && !was_full {
                    stall
                        .as_mut()
                        .reset(tokio::time::Instant::now() + self.config.stall_timeout);
                }
                was_full = full;
                // The common turn, a settled request or the next frame ready, is taken without the `select!` below,
                // which makes and drops a future for every branch on every turn: these are its first two branches, in
                // its order.
                let turn =
                    poll_fn(|cx| Poll::Ready(ready_turn(&mut in_flight, &mut frames, full, cx))).await;
                let next = match turn {
                    Some(Turn::Settled(done)) => {
                        self.answer(done);
                        if draining && in_flight.is_empty() {
                            break;
                        }
                        continue;
                    }
                    Some(Turn::Frame(frame)) => frame,
                    None => tokio::select! {
                        // Replies first: they free table entries and reach the peer sooner.
                        biased;
                        Some(done) = in_flight.next(), if !in_flight.is_empty() => {
                            self.answer(done);
                            if draining && in_flight.is_empty() {
                                break;
                            }
                            continue;
                        }
                        frame = frames.next(), if !full => frame,
                        // Polled only when no reply and no frame is ready: the loop's head has already checked them.
                        () = self.writer_gone.fired() => break,
                        () = self.shutdown.fired(), if !draining => continue,
                        () = &mut drain, if draining => continue,
                        // The peer is not reading its replies: read nothing more from it until the writer catches up.
                        () = outbox.room(), if full => continue,
                        () = &mut stall, if full => {
                            tracing::warn!(
                                timeout = ?self.config.stall_timeout,
                                "the peer read too little of its replies: closing the connection"
                            );
                            break;
                        }
                    },
                };
                let bytes = match next {
                    None => break,
                    Some(Err(error)) => {
                        tracing::warn!(%error, "reading from the connection failed");
                        result = Err(error);
                        break;
                    }
                    Some(Ok(Err(frame_error))) => {
                        tracing::debug!(%frame_error, "bad frame");
                        // A header that cannot be read and a frame cut off by the end of the stream are bytes
                        // that cannot be parsed (-32700, as an NDJSON line cut off is); a frame over the limit may
                        // be fine JSON that is not accepted as a request (-32600).
                        let error = match frame_error {
                            FrameError::InvalidHeader(_) | FrameError::Truncated => {
                                ErrorObject::parse_error(&frame_error)
                            }
                            _ => ErrorObject::invalid_request(&frame_error),
                        };
                        self.send(&Response::error(None, error));
                        continue;
                    }
                    Some(Ok(Ok(bytes))) => bytes,
                };
                let message = match Message::from_slice(&bytes) {
                    Ok(message) => message,
                    Err(invalid) => {
                        tracing::debug!(%invalid, "invalid message");
                        self.send(&Response::error(invalid.id, invalid.error));
                        continue;
                    }
                };
                let request = match self.connection.receive(message) {
                    Incoming::Request(request) => request,
                    Incoming::Response(response) => {
                        let handler = AssertUnwindSafe(|| (self.config.on_response)(response));
                        if std::panic::catch_unwind(handler).is_err() {
                            tracing::error!("the response handler panicked; the reply is dropped");
                        }
                        continue;
                    }
                    Incoming::Consumed => continue,
                };
                let id = request.id().cloned();

                // Wait for readiness while still settling requests in flight (readiness may depend on them), and while
                // watching what ends the connection: a service that never becomes ready must not hold it open.
                let ready = loop {
                    // As in the outer loop: the signals are read first, and waited on only when the service is
                    // not ready.
                    if self.writer_gone.has_fired() {
                        break None;
                    }
                    if ending == Ending::Disconnect && self.shutdown.has_fired() {
                        // The request waiting here is refused when the service takes it (it starts out cancelled).
                        ending = self.begin_drain(drain.as_mut(), in_flight.len() + 1);
                    }
                    let draining = ending == Ending::Shutdown;
                    if draining && drain.deadline() <= tokio::time::Instant::now() {
                        break None;
                    }
                    // Asked once a turn, between the looks at the signals above, and before the `select!` makes its
                    // futures (a service is almost always ready). Its error boxed at once: the service's own error type
                    // need not be `Send`, and the loop awaits again while it is in scope.
                    if let Poll::Ready(ready) =
                        poll_fn(|cx| Poll::Ready(self.service.poll_ready(cx))).await
                    {
                        break Some(ready.map_err(Into::<BoxError>::into));
                    }
                    tokio::select! {
                        biased;
                        Some(done) = in_flight.next(), if !in_flight.is_empty() => self.answer(done),
                        // The service's answer registered the loop's waker: woken, the loop asks it again.
                        () = Rewoken::default() => {}
                        () = self.writer_gone.fired() => {}
                        () = self.shutdown.fired(), if !draining => {}
                        () = &mut drain, if draining => {}
                    }
                };
                let Some(ready) = ready else {
                    // The connection ends before the service could take the request: it is answered as one the
                    // service could not take.
                    tracing::info!("the connection ends while the service is not ready");
                    let failure =
                        Unavailable::new("the connection ended before the service was ready".into());
                    self.answer((id, Err(Box::new(failure))));
                    break;
                };
                if let Err(error) = ready {
                    // The same answer the stack's layers give for a readiness failure; the connection goes on.
                    let failure = Unavailable::new(error);
                    tracing::error!(error = ?std::error::Error::source(&failure), "service unavailable");
                    self.answer((id, Err(Box::new(failure))));
                    continue;
                }
                // A panic in `call` itself is caught here in every mode; one in the future, by `outcome_of`, the
                // adaptive mode's net (its `CatchUnwind`, around the first poll and the task's) or the task.
                // Notifications stay on this task in every mode: the peer's order of them is the order of their
                // effects (an editor's `didChange` edits), which tasks on several workers would not keep.
                let mode = if id.is_some() {
                    self.mode
                } else {
                    Mode::Inline
                };
                let (service, pace) = (&mut self.service, &mut self.pace);
                let started = unwind::call(|| match mode {
                    Mode::Inline => Started::Inline(service.call(request)),
                    Mode::Spawned(spawn) => Started::Task(spawn(service, request)),
                    Mode::Adaptive(call) => pace.start(call(service, request)),
                });
                match started {
                    Ok(Started::Inline(future)) => {
                        // Polled once where it arrives, in a box of its own: most requests answer at once and never
                        // enter the set (its node, and the atomic flags of its queue of woken futures, cost more than
                        // the box); one still pending moves into the set in its box.
                        let mut future = Box::pin(outcome_of(id, future));
                        let first: Poll<Settled> =
                            poll_fn(|cx| Poll::Ready(future.as_mut().poll(cx))).await;
                        match first {
                            Poll::Ready(settled) => self.answer(settled),
                            Poll::Pending => in_flight.push_inline(future),
                        }
                    }
                    Ok(Started::Task(task)) => in_flight.push_spawned(Spawned::new(id, task)),
                    Ok(Started::Done(outcome)) => self.answer((id, outcome)),
                    Err(payload) => self.answer((id, Err(panicked(payload)))),
                }
                // A drain ends with its last request; one settled here never reaches the `select!` that checks.
                if ending == Ending::Shutdown && in_flight.is_empty() {
                    break;
                }
            }
        })
        .await;

        // Everything of this connection still in flight is cancelled through its lifecycle: the peer is gone
        // (Disconnect) or the server is going (Shutdown). The peer's pending calls fail now too: nothing more is
        // read, so no reply can reach them (a cooperative handler waiting on one would wait out its grace).
        let reason = match ending {
            Ending::Disconnect => CancelReason::Disconnect,
            Ending::Shutdown => CancelReason::Shutdown,
        };
        let cancelled = self.connection.close_in_turns(reason).await;
        if !in_flight.is_empty() {
            tracing::debug!(
                in_flight = in_flight.len(),
                cancelled,
                ?ending,
                "connection closing"
            );
            // The close grace bounds the wait only for what the cancel could not reach (requests that are never
            // cancellable, such as `initialize`; notifications). A cancelled request is settled by its cancel
            // layer, at once or, in cooperative mode, within the layer's own grace period, so the wait goes on
            // while the connection still has one registered: on a shutdown the peer is still waiting for it.
            let mut grace = pin!(tokio::time::sleep(self.config.close_grace));
            let mut grace_over = false;
            let mut answered = 0_usize;
            loop {
                tokio::select! {
                    done = in_flight.next() => match done {
                        Some(done) => {
                            self.answer(done);
                            answered += 1;
                            // A closing connection's requests all settle at once, and `in_flight` keeps
                            // handing them out without ever returning pending: without a turn given back now and
                            // then, answering a million holds this worker for seconds, and the tasks queued behind
                            // it (other connections') with it.
                            if answered % SETTLED_PER_TURN == 0 {
                                tokio::task::yield_now().await;
                            }
                        }
                        None => break,
                    },
                    () = &mut grace, if !grace_over => grace_over = true,
                }
                if grace_over && self.connection.in_flight() == 0 {
                    tracing::warn!(
                        left = in_flight.len(),
                        "requests still running after the close grace; dropping them"
                    );
                    break;
                }
            }
        }
        in_flight.drop_all().await;
        result
    }

    /// A graceful shutdown begins: the connection stops taking work (reading goes on, so that cancels and the
    /// peer's replies still arrive; new requests start out cancelled with reason Shutdown and get their dialect's
    /// answer without running), and the drain's end is armed.
    fn begin_drain(&self, drain: Pin<&mut Sleep>, in_flight: usize) -> Ending {
        tracing::info!(in_flight, "shutting down: draining requests in flight");
        self.connection.refuse_new(CancelReason::Shutdown);
        drain.reset(tokio::time::Instant::now() + self.config.drain_timeout);
        Ending::Shutdown
    }

    /// Send a settled request's reply, if it has one.
    fn answer(&self, (id, outcome): Settled) {
        let reply = match outcome {
            Ok(reply) => reply,
            Err(failure) => id
                .clone()
                .map(|id| Response::error(Some(id), error_object(&*failure))),
        };
        match (reply, id) {
            (Some(reply), Some(_)) => self.send(&reply),
            (Some(_), None) => tracing::debug!("reply to a notification dropped"),
            (None, _) => {}
        }
    }

    fn send(&self, reply: &Response) {
        // An error means the writer is gone; the read loop notices and winds down.
        let _ = self.connection.outbox().send_response(reply);
    }
}

/// What a turn of the read loop found ready without waiting.
enum Turn<F> {
    /// A request settled: its answer.
    Settled(Settled),
    /// The next frame, or the end of the stream (`None`).
    Frame(Option<F>),
}

/// The read loop's turn when something is ready: a settled request first (replies free table entries and reach
/// the peer sooner), else the next frame unless the outbox is `full`. `None` when neither is, having registered the
/// loop's waker with both, as the `select!` that then waits does again.
fn ready_turn<T, F>(
    in_flight: &mut InFlight<T>,
    frames: &mut F,
    full: bool,
    cx: &mut Context<'_>,
) -> Option<Turn<F::Item>>
where
    T: Future<Output = Settled>,
    F: Stream + Unpin,
{
    if !in_flight.is_empty() {
        if let Poll::Ready(Some(done)) = in_flight.poll_next_unpin(cx) {
            return Some(Turn::Settled(done));
        }
    }
    if !full {
        if let Poll::Ready(frame) = frames.poll_next_unpin(cx) {
            return Some(Turn::Frame(frame));
        }
    }
    None
}

/// Pending when first polled, ready when polled again: what the read loop waits on for a service that said it is
/// not ready. The service's answer registered the loop's waker, so the wake that ends the wait is its (or any
/// other branch's, which only costs the loop one more question).
#[derive(Default)]
struct Rewoken(bool);

impl Future for Rewoken {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            Poll::Pending
        }
    }
}
