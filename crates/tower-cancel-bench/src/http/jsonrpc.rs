//! Our plain JSON-RPC endpoint, for figure 8's reference rows: `JsonRpc` over `CancelStack::lsp()` and a plain
//! handler, one request per POST and its reply in the response body. No MCP on top (no session, no revision, no
//! `_meta`): what it leaves out is what the MCP endpoint's rows cost over it.

use std::{future::Future, io, pin::Pin};

use axum::{routing::post_service, Router};
use serde_json::{json, Value};
use tower::{service_fn, ServiceBuilder};
use tower_cancel::{BoxError, CancelStack, ErrorObject, Request};
use tower_cancel_http::JsonRpc;

use super::{sleep, Running, SleepArgs};

/// Start our JSON-RPC endpoint on a free loopback port, at `/rpc`; a hang-up cancels (its default).
pub fn start() -> Pin<Box<dyn Future<Output = io::Result<Running>> + Send>> {
    Box::pin(async {
        let stack = ServiceBuilder::new()
            .layer(CancelStack::lsp())
            .service(service_fn(handle));
        let endpoint = JsonRpc::new(stack);
        let app = Router::new().route("/rpc", post_service(endpoint.clone()));
        let addr = super::serve(app).await?;
        Ok(Running {
            addr,
            in_flight: Some(Box::new(move || endpoint.in_flight())),
        })
    })
}

/// The handler: one method, `sleep {ms, tag}`, answering `"done"`. No cancellation code: a cancel drops its future.
async fn handle(req: Request) -> Result<Value, BoxError> {
    if req.method() != "sleep" {
        return Err(Box::new(ErrorObject::method_not_found(req.method())));
    }
    let args: SleepArgs = req.params_as()?;
    drop(req);
    sleep(args.ms, args.tag).await;
    Ok(json!("done"))
}
