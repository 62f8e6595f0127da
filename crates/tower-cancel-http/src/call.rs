//! One request handed to the stack, on a task of its own, its failure or panic answered as the stack's error layer
//! answers it.
//!
//! The task is what lets a request outlive its HTTP response where a disconnect must not cancel it (MCP
//! `2025-11-25`): the response only waits for it. Where a disconnect is a cancel, the request's
//! [`Link`](crate::front::Link), held by the response, cancels the exchange's requests with reason `Disconnect`
//! when the response is dropped unfinished (hyper drops it when the client goes), and the task then ends as the
//! dialect says.

use futures_util::FutureExt;
use tokio::task::JoinHandle;
use tower::ServiceExt;
use tower_cancel::{
    error_map::{self, error_object},
    unwind::{self, CatchUnwind},
    BoxError, Request, Response,
};
use tower_service::Service;

/// What an HTTP front end needs of the service it serves: a [`CancelStack`](tower_cancel::CancelStack) over the
/// user's handler, or any service with the same shape. It is cloned for each request (the stack is cheap to
/// clone; wrap a service that is not `Clone` in `tower::buffer::Buffer`).
pub trait RpcService:
    Service<Request, Response = Option<Response>, Error = Self::Failure, Future = Self::Fut>
    + Clone
    + Send
    + Sync
    + 'static
{
    /// The service's error (the stack's is `Infallible`).
    type Failure: Into<BoxError> + Send + 'static;
    /// The service's future.
    type Fut: std::future::Future<Output = Result<Option<Response>, Self::Failure>> + Send + 'static;
}

impl<S> RpcService for S
where
    S: Service<Request, Response = Option<Response>> + Clone + Send + Sync + 'static,
    S::Error: Into<BoxError> + Send + 'static,
    S::Future: Send + 'static,
{
    type Failure = S::Error;
    type Fut = S::Future;
}

/// Call `service` with `request` on a task of its own, keeping `hold` (a lease on the request's scope) until the
/// request is over. The task's output is what [`run`] gives, passed through `finish` there (a batch's reply is
/// written out on its task, so that a large one is let go as soon as it is made).
pub(crate) fn spawn<S: RpcService, H: Send + 'static, T: Send + 'static>(
    service: S,
    request: Request,
    hold: H,
    finish: impl FnOnce(Response) -> T + Send + 'static,
) -> JoinHandle<Option<T>> {
    tokio::spawn(async move {
        let _hold = hold;
        run(service, request).await.map(finish)
    })
}

/// Call `service` with `request` and wait for its reply (none for a notification, or where the dialect answers a
/// cancelled request with silence); a service error or a panic is answered as the stack's error layer answers it
/// (-32603).
pub(crate) async fn run<S: RpcService>(service: S, request: Request) -> Option<Response> {
    let id = request.id().cloned();
    answer(CatchUnwind::new(service.oneshot(request)).await, id)
}

/// The reply of request `id` from what its service gave: its reply, or its failure or panic as -32603.
fn answer<E: Into<BoxError>>(
    outcome: Result<Result<Option<Response>, E>, unwind::Payload>,
    id: Option<tower_cancel::Id>,
) -> Option<Response> {
    let failure: BoxError = match outcome {
        Ok(Ok(reply)) => return reply,
        Ok(Err(error)) => error.into(),
        Err(payload) => error_map::caught_panic(payload),
    };
    id.map(|id| Response::error(Some(id), error_object(&*failure)))
}

/// Call `service` with `request` now if it is ready at once (a [`CancelStack`](tower_cancel::CancelStack) always
/// is), so that the request is in its scope's registry when this returns (a cancel read next finds it), and give
/// the future of its reply, as [`run`] answers it. A service that is not ready at once is called from the future,
/// as [`run`] does.
pub(crate) fn start<S: RpcService>(
    mut service: S,
    request: Request,
) -> impl std::future::Future<Output = Option<Response>> + Send + 'static {
    let id = request.id().cloned();
    let started = match service.ready().now_or_never() {
        Some(Ok(ready)) => Ok(ready.call(request)),
        _ => Err((service, request)),
    };
    async move {
        match started {
            Ok(future) => answer(CatchUnwind::new(future).await, id),
            Err((service, request)) => run(service, request).await,
        }
    }
}

/// The reply of a request's task. A task that was aborted (the runtime is shutting down) has no reply.
pub(crate) async fn reply(task: JoinHandle<Option<Response>>) -> Option<Response> {
    task.await.unwrap_or_default()
}
