//! The service async-lsp's `MainLoop` runs here: only the server's events reach it, and it hands them to the
//! server's own service, which tower-cancel's driver calls for everything else.

use std::{
    future::{ready, Ready},
    ops::ControlFlow,
    sync::{Arc, Mutex},
    task::{Context, Poll},
};

use async_lsp::{
    AnyEvent, AnyNotification, AnyRequest, ClientSocket, ErrorCode, LspService, MainLoop,
    ResponseError,
};
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tower_service::Service;

use crate::{flow, hub::lock};

/// async-lsp's main loop around a [`Shim`] of the service `builder` makes, the socket to the client, and the
/// service itself. (Out of `AsyncLsp::new_server`: there the bound `ResponseError: From<S::Error>` would be
/// taken for the shim's error type too.)
pub(crate) fn main_loop<S: LspService>(
    builder: impl FnOnce(ClientSocket) -> S,
    exit: CancellationToken,
) -> (MainLoop<Shim<S>>, ClientSocket, Arc<Mutex<S>>) {
    let mut built = None;
    let (main_loop, client) = MainLoop::new_server(|client| {
        let service = Arc::new(Mutex::new(builder(client)));
        built = Some(service.clone());
        Shim::new(service, exit)
    });
    let service = built.expect("MainLoop::new_server calls its builder");
    (main_loop, client, service)
}

pub(crate) struct Shim<S> {
    service: Arc<Mutex<S>>,
    exit: CancellationToken,
}

impl<S> Shim<S> {
    pub(crate) fn new(service: Arc<Mutex<S>>, exit: CancellationToken) -> Self {
        Self { service, exit }
    }
}

/// Never called: the bridge writes the main loop nothing but replies.
impl<S> Service<AnyRequest> for Shim<S> {
    type Response = Value;
    type Error = ResponseError;
    type Future = Ready<Result<Value, ResponseError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), ResponseError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: AnyRequest) -> Self::Future {
        let message = format!("{} reaches the server through tower-cancel", req.method);
        ready(Err(ResponseError::new(
            ErrorCode::METHOD_NOT_FOUND,
            message,
        )))
    }
}

impl<S: LspService> LspService for Shim<S> {
    /// Never called either: the client's notifications go through the driver.
    fn notify(&mut self, _notif: AnyNotification) -> ControlFlow<async_lsp::Result<()>> {
        ControlFlow::Continue(())
    }

    /// The server's own events (`ClientSocket::emit`), to its service, in order. The main loop always goes on:
    /// ending it would end every handler's way to the client.
    fn emit(&mut self, event: AnyEvent) -> ControlFlow<async_lsp::Result<()>> {
        let name = event.type_name();
        let flow = lock(&self.service).emit(event);
        flow::apply(flow, &self.exit, name);
        ControlFlow::Continue(())
    }
}
