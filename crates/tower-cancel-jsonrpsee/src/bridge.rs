//! The innermost service of the stack: the jsonrpsee service below the middleware, called with the call the
//! stack let through.

use std::{
    convert::Infallible,
    fmt,
    future::Future,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};

use futures_util::future::BoxFuture;
use jsonrpsee::server::middleware::rpc::{MethodResponse, RpcServiceT};
use tower_cancel::{CancelReason, Request, RequestContext};
use tower_service::Service;

/// A jsonrpsee service below the middleware, its type erased, so that the stack is built once for every
/// connection (jsonrpsee builds the middleware anew for each WebSocket and each HTTP request).
pub(crate) trait Below: Send + Sync + 'static {
    fn call_owned(
        &self,
        call: jsonrpsee::types::Request<'static>,
    ) -> BoxFuture<'static, MethodResponse>;
}

impl<S> Below for S
where
    S: RpcServiceT<MethodResponse = MethodResponse> + Send + Sync + 'static,
{
    fn call_owned(
        &self,
        call: jsonrpsee::types::Request<'static>,
    ) -> BoxFuture<'static, MethodResponse> {
        Box::pin(self.call(call))
    }
}

/// The jsonrpsee call a [`Request`] of ours stands for, and the service to call with it, carried in the request's
/// extensions down to [`Bridge`]. Owned: our requests outlive the bytes jsonrpsee read the call from.
#[derive(Clone)]
pub(crate) struct Carried {
    pub(crate) call: jsonrpsee::types::Request<'static>,
    pub(crate) below: Arc<dyn Below>,
}

/// What the jsonrpsee service answered; `None` for what never reached it (a cancel message the stack consumed).
#[derive(Debug, Default)]
pub(crate) struct Answered(pub(crate) Option<MethodResponse>);

/// Calls the jsonrpsee service carried in each request with the call carried beside it, after putting the
/// request's [`RequestContext`] in the call's extensions, where a jsonrpsee method finds it.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Bridge;

impl Service<Request> for Bridge {
    type Response = Answered;
    type Error = Infallible;
    type Future = Called;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: Request) -> Called {
        let Some(Carried { mut call, below }) = request.extensions_mut().remove::<Carried>() else {
            return Called {
                guard: DisconnectOnDrop(None),
                running: None,
            };
        };
        let context = request.context().cloned();
        if let Some(context) = &context {
            call.extensions.insert(context.clone());
        }
        Called {
            guard: DisconnectOnDrop(context),
            running: Some(below.call_owned(call)),
        }
    }
}

/// A call running in the jsonrpsee service below.
pub(crate) struct Called {
    // First: dropped first, so that a handler dropped from outside finds its call cancelled (reason
    // `Disconnect`) when its own destructors run.
    guard: DisconnectOnDrop,
    running: Option<BoxFuture<'static, MethodResponse>>,
}

impl Future for Called {
    type Output = Result<Answered, Infallible>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let Some(running) = this.running.as_mut() else {
            return Poll::Ready(Ok(Answered(None)));
        };
        // Disarmed while the handler is polled: a handler that panics unwinds out of here to the stack's net
        // (answered as `Panicked`), and the call's context must not say `Disconnect` when it is dropped after.
        let armed = this.guard.0.take();
        match running.as_mut().poll(cx) {
            Poll::Pending => {
                this.guard.0 = armed;
                Poll::Pending
            }
            Poll::Ready(reply) => {
                this.running = None;
                Poll::Ready(Ok(Answered(Some(reply))))
            }
        }
    }
}

impl fmt::Debug for Called {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Called")
            .field("running", &self.running.is_some())
            .finish()
    }
}

/// Cancels the call with reason `Disconnect` if its handler is dropped while the call still runs. The stack drops
/// a handler only after a cancel it decided, so a handler dropped while its call runs was dropped from outside:
/// jsonrpsee does that when the call's WebSocket closes or its HTTP client hangs up. Without this the call would
/// still end cancelled, under the reason `Local` (a response future dropped); the reason is what spans and metrics
/// report.
struct DisconnectOnDrop(Option<RequestContext>);

impl Drop for DisconnectOnDrop {
    fn drop(&mut self) {
        if let Some(context) = self.0.take() {
            context.cancel_with(CancelReason::Disconnect);
        }
    }
}
