use std::{
    fmt,
    future::Future,
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use pin_project_lite::pin_project;
use tokio::time::Sleep;
use tower_service::Service;

use super::{settlement::Settlement, Cancelled, Mode, Panicked, Unavailable};
use crate::{
    dialect::Dialect, dispatch::Dispatch, lifecycle::Lifecycle, outcome::BoxError,
    reason::CancelReason, request::Request, unwind,
};

pin_project! {
    /// Response future of [`Cancel`](super::Cancel).
    pub struct ResponseFuture<S>
    where
        S: Service<Request>,
    {
        #[pin]
        kind: Kind<S>,
    }

    impl<S> PinnedDrop for ResponseFuture<S>
    where
        S: Service<Request>,
    {
        // Dropped before it resolved (the transport let go of the request): the handler is dropped here, under
        // the same net as every other drop of it, so that a destructor's panic cannot unwind into the transport.
        fn drop(this: Pin<&mut Self>) {
            match this.project().kind.project() {
                // A request that settled dropped its handler then: nothing is left to drop under the net.
                KindProj::Notification { dispatch } | KindProj::Racing { dispatch, .. }
                    if !dispatch.is_done() =>
                {
                    drop_inner(dispatch)
                }
                _ => {}
            }
        }
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<S>
    where
        S: Service<Request>,
    {
        // A cancel notification or an early error: nothing to wait for.
        Ready { result: Option<Result<S::Response, BoxError>> },
        // A notification: no lifecycle, just the inner service.
        Notification { #[pin] dispatch: Dispatch<S> },
        Racing {
            #[pin]
            dispatch: Dispatch<S>,
            grace: Grace,
            // The lifecycle, the registry entry and the span: settled when this future completes or is dropped,
            // on every path.
            settlement: Settlement,
        },
    }
}

/// The layer's [`Mode`] and, once a cooperative cancel came, the handler's grace timer. One word, since every
/// request's future carries it: abort mode (the default) keeps nothing, and a request of a cooperative layer keeps
/// its period and then its timer in a box of its own (a grace period inline would take two words, and a timer
/// many more, in every future of the type).
struct Grace(Option<Pin<Box<Cooperative>>>);

pin_project! {
    struct Cooperative {
        // How long the handler may take to wind down once cancelled.
        period: Duration,
        // Armed by the cancel: the handler is dropped when it fires.
        #[pin]
        timer: Option<Sleep>,
    }
}

impl Grace {
    fn of(mode: Mode) -> Self {
        match mode {
            Mode::Abort => Grace(None),
            Mode::Cooperative { grace } => Grace(Some(Box::pin(Cooperative {
                period: grace,
                timer: None,
            }))),
        }
    }

    fn is_running(&self) -> bool {
        self.0.as_ref().is_some_and(|c| c.timer.is_some())
    }

    /// The request was cancelled: start the handler's grace period, if it has one. Returns whether it did (else
    /// the handler stops now).
    fn start(&mut self) -> bool {
        match &mut self.0 {
            Some(cooperative) => {
                let mut cooperative = cooperative.as_mut().project();
                let period = *cooperative.period;
                cooperative.timer.set(Some(tokio::time::sleep(period)));
                true
            }
            None => false,
        }
    }

    /// Whether the grace period started and is over.
    fn is_over(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(cooperative) = &mut self.0 else {
            return false;
        };
        match cooperative.as_mut().project().timer.as_pin_mut() {
            Some(timer) => timer.poll(cx).is_ready(),
            None => false,
        }
    }
}

impl<S: Service<Request>> ResponseFuture<S> {
    pub(crate) fn ready(result: Result<S::Response, BoxError>) -> Self {
        Self {
            kind: Kind::Ready {
                result: Some(result),
            },
        }
    }

    pub(crate) fn notification(dispatch: Dispatch<S>) -> Self {
        Self {
            kind: Kind::Notification { dispatch },
        }
    }

    pub(super) fn racing(dispatch: Dispatch<S>, settlement: Settlement, mode: Mode) -> Self {
        Self {
            kind: Kind::Racing {
                dispatch,
                grace: Grace::of(mode),
                settlement,
            },
        }
    }
}

impl<S: Service<Request>> fmt::Debug for ResponseFuture<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.kind {
            Kind::Ready { .. } => "ready",
            Kind::Notification { .. } => "notification",
            Kind::Racing { .. } => "racing",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .finish()
    }
}

impl<S> Future for ResponseFuture<S>
where
    S: Service<Request>,
    S::Error: Into<BoxError>,
{
    type Output = Result<S::Response, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.poll_replying::<false, _>(cx, |outcome, _| outcome)
    }
}

impl<S> ResponseFuture<S>
where
    S: Service<Request>,
    S::Error: Into<BoxError>,
{
    /// Poll to the request's outcome and hand it to `reply`, with the dialect of the request's scope for a
    /// cancelled request registered on a connection whose scope speaks one: how the presets' service renders the
    /// reply without a future of the error map's ([`Stacked`](crate::stack::Stacked)). No other outcome's reply
    /// depends on the dialect.
    ///
    /// `SPOKEN`: whether `reply` reads the dialect (the layer alone, whose outcome is not rendered, takes none).
    pub(crate) fn poll_replying<const SPOKEN: bool, R>(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        reply: impl FnOnce(Result<S::Response, BoxError>, Option<&dyn Dialect>) -> R,
    ) -> Poll<R> {
        match self.project().kind.project() {
            KindProj::Ready { result } => {
                Poll::Ready(reply(result.take().expect("polled after completion"), None))
            }
            KindProj::Notification { dispatch } => {
                poll_catching(dispatch, cx).map(|outcome| reply(outcome, None))
            }
            KindProj::Racing {
                dispatch,
                grace,
                settlement,
            } => {
                let poll = {
                    // The handler runs inside the request's span; the outcome is recorded after leaving it.
                    let _span = settlement.enter();
                    let lifecycle = settlement.lifecycle();
                    poll_racing(dispatch, grace, lifecycle, cx)
                };
                // The first poll that sees the cancel is when this layer acts on it: the span's `cancel` event.
                settlement.note_cancel();
                let Poll::Ready(result) = poll else {
                    return Poll::Pending;
                };
                // `initialize`: its success marks the connection's session initialized.
                if result.is_ok() && settlement.lifecycle().initializes() {
                    if let Some(connection) = settlement.connection() {
                        connection.session().mark_initialized();
                    }
                }
                // A request whose end this side announces (MCP's `subscriptions/listen`): the notice is its end,
                // and no reply follows it (a client that takes the notice as the end would find a reply after it
                // to be one for a request it no longer has).
                let announced = settlement.announce_end(result.is_ok());
                // A dialect renders nothing but a cancel's reply (an answer or another failure is the same in
                // every one): the scope's dialect is taken for a cancelled request alone, before it settles.
                let spoken = match &result {
                    Err(error) if SPOKEN && error.is::<Cancelled>() => settlement
                        .connection()
                        .and_then(|connection| connection.scope().dialect().cloned()),
                    _ => None,
                };
                settlement.finish(&result);
                if let Some(reason) = announced {
                    let announced: BoxError = Box::new(Cancelled::announced(reason));
                    return Poll::Ready(reply(Err(announced), spoken.as_deref()));
                }
                Poll::Ready(reply(result, spoken.as_deref()))
            }
        }
    }
}

/// Race the handler against the request's cancel; its result, once there is one, is the request's outcome.
fn poll_racing<S>(
    mut dispatch: Pin<&mut Dispatch<S>>,
    grace: &mut Grace,
    lifecycle: &Lifecycle,
    cx: &mut Context<'_>,
) -> Poll<Result<S::Response, BoxError>>
where
    S: Service<Request>,
    S::Error: Into<BoxError>,
{
    // A cancel stops the handler now, unless it starts its grace period (a cancel before the first poll stops it
    // before it is even called); the period's end stops it too. Dropping the inner future stops the handler
    // wherever it was parked; a request still queued behind backpressure has no handler to wind down: it never
    // runs, in any mode.
    let stops_now = lifecycle.is_cancelled()
        && !grace.is_running()
        && (dispatch.is_waiting() || !grace.start());
    if stops_now || grace.is_over(cx) {
        drop_inner(dispatch.as_mut());
        return Poll::Ready(Err(cancelled_error(lifecycle)));
    }
    let output = match poll_catching(dispatch.as_mut(), cx) {
        Poll::Ready(output) => output,
        Poll::Pending => {
            // The cancel wakes this future through the lifecycle (no token needed). Registering
            // only now keeps a handler that answers at once from paying for it; a cancel that came
            // between the check above and the registration is caught by the check after it.
            if !grace.is_running() {
                lifecycle.wake_on_cancel(cx.waker());
                if lifecycle.is_cancelled() {
                    cx.waker().wake_by_ref();
                }
            }
            return Poll::Pending;
        }
    };
    if let Err(error) = &output {
        // tower's own timeout layer, placed below: its expiry is this request's Timeout cancellation,
        // settled through the lifecycle like every other (a no-op for a request that cannot be
        // cancelled, whose `Elapsed` stays an ordinary failure).
        if error.is::<tower::timeout::error::Elapsed>() {
            lifecycle.cancel(CancelReason::Timeout);
        }
    }
    // Only now drop the inner future: tower's timeout future still holds the handler, and a handler
    // stopped by it must see reason Timeout in its context as it is dropped, as with every other source.
    drop_inner(dispatch.as_mut());
    Poll::Ready(settle(
        lifecycle,
        output,
        lifecycle.allows_partial_result() && grace.is_running(),
    ))
}

/// Drop the inner future (the handler), catching a panic in its drop: the request's outcome is already decided (a
/// cancel won, or the handler answered), and a destructor failing must neither change it nor reach the transport.
fn drop_inner<S: Service<Request>>(dispatch: Pin<&mut Dispatch<S>>) {
    // The state is `Done` afterwards even when the drop panics.
    if let Err(payload) = unwind::set(dispatch, Dispatch::Done) {
        let panicked = Panicked::from_payload(&*payload);
        tracing::error!("the handler's future panicked while it was dropped: {panicked}");
    }
}

/// Poll the inner service, catching a panic in its `call` or its future: the one place a panic becomes an
/// outcome ([`Panicked`]).
fn poll_catching<S>(
    dispatch: Pin<&mut Dispatch<S>>,
    cx: &mut Context<'_>,
) -> Poll<Result<S::Response, BoxError>>
where
    S: Service<Request>,
    S::Error: Into<BoxError>,
{
    let mut dispatch = dispatch;
    match unwind::call(|| dispatch.as_mut().poll(cx)) {
        Ok(poll) => poll,
        Err(payload) => {
            // The inner future is left as it was when it panicked: never poll it again.
            drop_inner(dispatch.as_mut());
            Poll::Ready(Err(Box::new(Panicked::from_payload(&*payload))))
        }
    }
}

/// The one outcome of a request whose handler gave `output`: the handler's, if its completion wins the
/// lifecycle; else the cancellation, except that a handler winding down within its grace period (`wound_down`,
/// where the dialect allows partial results) answers with its partial result or its own error. A panic, a
/// timeout or a cancellation reported by the layers below is never the handler's own answer: after a cancel it is
/// the cancel's reply (MCP: none at all).
fn settle<T>(
    lifecycle: &Lifecycle,
    output: Result<T, BoxError>,
    wound_down: bool,
) -> Result<T, BoxError> {
    if lifecycle.complete() {
        return output;
    }
    let own_answer = match &output {
        Ok(_) => true,
        Err(error) => {
            !(error.is::<Panicked>()
                || error.is::<Cancelled>()
                || error.is::<Unavailable>()
                || error.is::<tower::timeout::error::Elapsed>())
        }
    };
    if wound_down && own_answer {
        output
    } else {
        Err(cancelled_error(lifecycle))
    }
}

fn cancelled_error(lifecycle: &Lifecycle) -> BoxError {
    let reason = lifecycle
        .reason()
        .cloned()
        .unwrap_or_else(|| CancelReason::local("cancelled"));
    Box::new(Cancelled::new(reason))
}
