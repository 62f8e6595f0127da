//! A toolset built from one tower `Service` per operation.

use std::{
    collections::HashMap,
    fmt,
    sync::Arc,
    task::{Context, Poll},
};

use futures_util::future::{self, BoxFuture, FutureExt};
use serde_json::Value;
use tower::{util::BoxCloneSyncService, ServiceExt};
use tower_cancel::{BoxError, ErrorObject, Request};
use tower_service::Service;

use super::wire::{ToolDef, Toolset};

type Tool = BoxCloneSyncService<Request, Value, BoxError>;

/// A toolset of one service per operation, itself the service that dispatches to them by the request's method
/// (the invocation's `operation`). Put it under a [`CancelStack`](tower_cancel::CancelStack) of the
/// [`Rap`](super::Rap) dialect; the same tools give the discovery document ([`Tools::toolset`]).
///
/// ```
/// use serde_json::{json, Value};
/// use tower::{service_fn, ServiceBuilder};
/// use tower_cancel::{BoxError, CancelStack, Request};
/// use tower_cancel_http::rap::{Rap, ToolDef, ToolServer, Tools};
///
/// let tools = Tools::new().tool(
///     ToolDef::new("echo", "Answers its text", json!({"type": "object"})),
///     service_fn(|req: Request| async move {
///         let args: Value = req.params_as()?;
///         Ok::<_, BoxError>(args["text"].clone())
///     }),
/// );
/// let toolset = tools.toolset("echo-tools", "http://127.0.0.1:8080/invoke");
/// let stack = ServiceBuilder::new().layer(CancelStack::new(Rap)).service(tools);
/// let app: axum::Router = ToolServer::new(toolset, stack).router();
/// # let _ = app;
/// ```
#[derive(Clone, Default)]
pub struct Tools {
    defs: Vec<ToolDef>,
    services: Arc<HashMap<String, Tool>>,
}

impl Tools {
    /// No tools yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add the operation `def.name`, served by `service`. A second tool of the same name replaces the first.
    pub fn tool<S, R>(mut self, def: ToolDef, service: S) -> Self
    where
        S: tower_service::Service<Request, Response = R> + Clone + Send + Sync + 'static,
        S::Error: Into<BoxError>,
        S::Future: Send + 'static,
        R: Into<Value> + 'static,
    {
        let service = service.map_response(Into::into).map_err(Into::into);
        let services = Arc::make_mut(&mut self.services);
        services.insert(def.name.clone(), BoxCloneSyncService::new(service));
        self.defs.retain(|known| known.name != def.name);
        self.defs.push(def);
        self
    }

    /// The operations, in the order they were added.
    pub fn defs(&self) -> &[ToolDef] {
        &self.defs
    }

    /// The discovery document of these tools, invoked at `endpoint`.
    pub fn toolset(&self, name: impl Into<String>, endpoint: impl Into<String>) -> Toolset {
        Toolset {
            name: name.into(),
            description: None,
            endpoint: endpoint.into(),
            tools: self.defs.clone(),
        }
    }
}

impl fmt::Debug for Tools {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.defs.iter().map(|def| def.name.as_str()).collect();
        f.debug_struct("Tools").field("tools", &names).finish()
    }
}

impl Service<Request> for Tools {
    type Response = Value;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Value, BoxError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        // Each tool's readiness is waited for in the call, inside the request's own future: a tool that applies
        // backpressure holds up its own calls only.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request) -> Self::Future {
        match self.services.get(request.method()) {
            Some(tool) => tool.clone().oneshot(request).boxed(),
            None => {
                let error: BoxError = Box::new(ErrorObject::method_not_found(request.method()));
                future::ready(Err(error)).boxed()
            }
        }
    }
}
