//! The `jsonrpsee_server` example: a jsonrpsee server (its own `Server`, its `RpcModule`) with
//! `tower-cancel-jsonrpsee`'s middleware, built here so that the tests can run the same server in-process.

use std::{net::SocketAddr, time::Duration};

use jsonrpsee::{
    server::{middleware::rpc::RpcServiceBuilder, RpcModule, Server, ServerHandle},
    types::ErrorObjectOwned,
};
use serde_json::Value;
use tower_cancel::TimeoutLayer;
use tower_cancel_jsonrpsee::CancelRpcLayer;

use crate::{SleepParams, SleepStats};

/// A server started by [`start`] or [`start_alone`]: where it listens, the handle that stops it, its sleep
/// handlers' counters and, under the adapter, the adapter's layer (its calls in flight, its shutdown).
#[derive(Debug)]
pub struct Running {
    /// The address it listens on (HTTP POST and WebSocket at `/`).
    pub addr: SocketAddr,
    /// jsonrpsee's handle on the server.
    pub handle: ServerHandle,
    /// The sleep handlers' counters.
    pub stats: SleepStats,
    /// The adapter's layer; `None` for jsonrpsee alone.
    pub layer: Option<CancelRpcLayer>,
}

/// The methods, as a jsonrpsee `RpcModule`: `demo/sleep {"ms": N}` answers `{"slept": N}` after N ms;
/// `demo/stats` answers the sleep handlers' counters with `inFlight`, `in_flight()` less the stats call itself.
pub fn module(
    stats: SleepStats,
    in_flight: impl Fn() -> usize + Send + Sync + 'static,
) -> RpcModule<(SleepStats, Box<dyn Fn() -> usize + Send + Sync>)> {
    let mut module = RpcModule::new((
        stats,
        Box::new(in_flight) as Box<dyn Fn() -> usize + Send + Sync>,
    ));
    module
        .register_async_method("demo/sleep", |params, context, _| async move {
            let sleep: SleepParams = params.parse()?;
            Ok::<Value, ErrorObjectOwned>(crate::sleep(&context.0, sleep).await)
        })
        .expect("a new name");
    module
        .register_method("demo/stats", |_, context, _| {
            // The stats call is in flight too.
            context.0.to_json_with((context.1)().saturating_sub(1))
        })
        .expect("a new name");
    module
}

/// The example server under the adapter: `$/cancelRequest` taken, every call timed out after `timeout` if given.
pub async fn start(addr: &str, timeout: Option<Duration>) -> std::io::Result<Running> {
    let layer = CancelRpcLayer::new()
        .cancel_messages(true)
        .timeouts(timeout.map_or_else(TimeoutLayer::none, TimeoutLayer::new));
    let stats = SleepStats::default();
    let module = module(stats.clone(), {
        let layer = layer.clone();
        move || layer.in_flight()
    });
    let server = Server::builder()
        .set_rpc_middleware(RpcServiceBuilder::new().layer(layer.clone()))
        .build(addr)
        .await?;
    let addr = server.local_addr()?;
    Ok(Running {
        addr,
        handle: server.start(module),
        stats,
        layer: Some(layer),
    })
}

/// The same methods on jsonrpsee alone, without the adapter (`inFlight` is always 0): what the adapter is
/// measured against.
pub async fn start_alone(addr: &str) -> std::io::Result<Running> {
    let stats = SleepStats::default();
    let server = Server::builder().build(addr).await?;
    let addr = server.local_addr()?;
    Ok(Running {
        addr,
        handle: server.start(module(stats.clone(), || 1)),
        stats,
        layer: None,
    })
}
