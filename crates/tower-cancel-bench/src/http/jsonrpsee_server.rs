//! jsonrpsee 0.26's server, for figure 8: alone, and under its adapter (`tower-cancel-jsonrpsee`'s
//! `CancelRpcLayer`, in its defaults, mounted as the RPC middleware). Each serves one method `sleep {ms, tag}`
//! answering `"done"`, registered with `register_async_method`, over HTTP POST and WebSocket on one port, as
//! jsonrpsee does (it serves any path, so the HTTP clients post to `/rpc` as they do to our `JsonRpc`).
//!
//! Neither has cancellation code in its method: what stops a handler is its future dropped, by jsonrpsee when a
//! WebSocket closes or an HTTP client hangs up, by the adapter for the same reasons and for its own.

use std::{future::Future, io, net::SocketAddr, pin::Pin};

use jsonrpsee::{
    server::{middleware::rpc::RpcServiceBuilder, RpcModule, Server, ServerHandle},
    types::ErrorObjectOwned,
};
use tower_cancel_jsonrpsee::CancelRpcLayer;

use super::{sleep, Running, SleepArgs};

/// jsonrpsee alone, on a free loopback port.
pub fn start_alone() -> Pin<Box<dyn Future<Output = io::Result<Running>> + Send>> {
    Box::pin(async {
        let server = Server::builder().build("127.0.0.1:0").await?;
        let addr = server.local_addr()?;
        keep(server.start(module()?));
        Ok(Running {
            addr,
            in_flight: None,
        })
    })
}

/// jsonrpsee under `CancelRpcLayer::new()`, on a free loopback port.
pub fn start_adapted() -> Pin<Box<dyn Future<Output = io::Result<Running>> + Send>> {
    Box::pin(async {
        let cancel = CancelRpcLayer::new();
        let server = Server::builder()
            .set_rpc_middleware(RpcServiceBuilder::new().layer(cancel.clone()))
            .build("127.0.0.1:0")
            .await?;
        let addr: SocketAddr = server.local_addr()?;
        keep(server.start(module()?));
        Ok(Running {
            addr,
            in_flight: Some(Box::new(move || cancel.in_flight())),
        })
    })
}

/// The one method, `sleep {ms, tag}`.
fn module() -> io::Result<RpcModule<()>> {
    let mut module = RpcModule::new(());
    module
        .register_async_method("sleep", |params, _, _| async move {
            let args: SleepArgs = params.parse()?;
            sleep(args.ms, args.tag).await;
            Ok::<_, ErrorObjectOwned>("done")
        })
        .map_err(io::Error::other)?;
    Ok(module)
}

/// jsonrpsee stops a server whose last handle is dropped: a task holds this one for as long as the runtime lives
/// (each figure's runtime ends with it).
fn keep(handle: ServerHandle) {
    tokio::spawn(handle.stopped());
}
