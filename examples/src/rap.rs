//! The RAP tool server of `rap_tool_server`, built here so that tests can serve the very same one in-process:
//! the tools `sleep {"ms"}` and `stats` behind RAP's endpoints, every one but discovery behind a bearer token.
//!
//! # The tools
//!
//! - `sleep {"ms": N}` waits N milliseconds and answers the text `slept N ms` (the text of `mcp_server`'s
//!   `sleep`). Stopped by `cancel_tool_call` or `close_thread`, it sends no result at all and counts as
//!   `cancelled`.
//! - `stats` answers, as its text, the JSON `{"started","completed","cancelled","inFlight"}`: `started`,
//!   `completed` and `cancelled` count the `sleep` handlers; `inFlight` is the server's
//!   [`in_flight`](ToolServer::in_flight) less the `stats` call itself, so the calls still running (a handler,
//!   or a result being delivered).
//!
//! An unknown operation, or `sleep` without a whole `ms`, gets an error result (`Error: ...`).
//!
//! # Callbacks
//!
//! The server refuses callback URLs on loopback, private and link-local addresses (400 at the invocation for an
//! IP address or `localhost`; a name is delivered to on its public addresses only): see
//! `ToolServer::refuse_private_callbacks`. A runtime on the same host or network needs
//! [`Options::allow_private_callbacks`] (`rap_tool_server --allow-private-callbacks`).
//!
//! # Example
//!
//! ```no_run
//! # #[tokio::main] async fn main() -> std::io::Result<()> {
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! let server = examples::rap::Server::new(
//!     &format!("http://{}", listener.local_addr()?),
//!     tower_cancel::TimeoutLayer::none(),
//! );
//! tower_cancel_http::serve(listener, server.router("s3cret")).await
//! # }
//! ```

use axum::Router;
use serde_json::{json, Value};
use tower::{service_fn, Layer, ServiceBuilder};
use tower_cancel::{bus::Replica, CancelStack, ErrorObject, Request, TimeoutLayer};
use tower_cancel_http::{
    auth::require_bearer,
    rap::{Rap, ToolDef, ToolServer, Tools},
};

use crate::{InFlight, SleepStats, Snapshot};

/// The toolset's name at discovery.
pub const TOOLSET_NAME: &str = "tower-cancel-rap-example";

/// The path invocations are POSTed to, under the server's base URL.
pub const INVOKE_PATH: &str = "/invoke";

/// The service the tool server runs: the RAP stack over the tools.
pub type Stack = <CancelStack<Rap> as Layer<Tools>>::Service;

/// The example's tool server, and the counters of its `sleep` handlers.
#[derive(Clone, Debug)]
pub struct Server {
    tool_server: ToolServer<Stack>,
    stats: SleepStats,
}

/// How the example's tool server is set up, beyond its base URL.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Stop a call that runs too long (the runtime then gets an error result); none by default.
    pub timeouts: TimeoutLayer,
    /// Run as one replica of several sharing this bus: a cancel POSTed to another replica reaches the calls
    /// running on this one (see `ToolServer::replica`).
    pub replica: Option<Replica>,
    /// Deliver results to callback URLs on loopback, private and link-local addresses too (a runtime on the
    /// same host or network); refused by default.
    pub allow_private_callbacks: bool,
}

impl Server {
    /// The tool server reached at `base` (`http://ADDR`, without a trailing slash): discovery names
    /// `{base}/invoke` as its endpoint. `timeouts` stop a call that runs too long (the runtime then gets an
    /// error result). Private callbacks are refused.
    pub fn new(base: &str, timeouts: TimeoutLayer) -> Self {
        Self::with_options(
            base,
            Options {
                timeouts,
                ..Options::default()
            },
        )
    }

    /// The tool server reached at `base`, set up as `options` say.
    pub fn with_options(base: &str, options: Options) -> Self {
        let Options {
            timeouts,
            replica,
            allow_private_callbacks,
        } = options;
        let stats = SleepStats::default();
        // The tools are built before the server whose `in_flight` their `stats` reads; it is given to them
        // once it exists.
        let in_flight = InFlight::default();
        let tools = tools(&stats, &in_flight);
        let mut toolset = tools.toolset(
            TOOLSET_NAME,
            format!("{}{INVOKE_PATH}", base.trim_end_matches('/')),
        );
        toolset.description = Some("tower-cancel's example tools: sleep and stats".into());
        let stack = ServiceBuilder::new()
            .layer(CancelStack::new(Rap).timeouts(timeouts))
            .service(tools);
        let tool_server =
            ToolServer::new(toolset, stack).refuse_private_callbacks(!allow_private_callbacks);
        let tool_server = match replica {
            Some(replica) => tool_server.replica(replica),
            None => tool_server,
        };
        in_flight.set_endpoint({
            let tool_server = tool_server.clone();
            move || tool_server.in_flight()
        });
        Self { tool_server, stats }
    }

    /// The endpoints, every one but discovery behind `Authorization: Bearer {token}` (401 without it). Serve it
    /// with `into_make_service_with_connect_info::<SocketAddr>()`, so that the rate limit of cancels is each
    /// client's (its token and its address), not each token's.
    pub fn router(&self, token: &str) -> Router {
        self.tool_server.clone().router_with(require_bearer(token))
    }

    /// The RAP tool server (its `in_flight`, `stats`, `toolset`).
    pub fn tool_server(&self) -> &ToolServer<Stack> {
        &self.tool_server
    }

    /// The `sleep` handlers' counters now.
    pub fn sleeps(&self) -> Snapshot {
        self.stats.snapshot()
    }
}

fn tools(stats: &SleepStats, in_flight: &InFlight) -> Tools {
    let sleep = {
        let stats = stats.clone();
        service_fn(move |req: Request| {
            let stats = stats.clone();
            async move {
                let slept = crate::sleep(&stats, req.params_as()?).await;
                Ok::<_, ErrorObject>(Value::String(format!("slept {} ms", slept["slept"])))
            }
        })
    };
    let stats_tool = {
        let (stats, in_flight) = (stats.clone(), in_flight.clone());
        service_fn(move |req: Request| {
            let counters = in_flight.stats(&stats, &req);
            // The text is the JSON itself (a string result is the text as it is).
            std::future::ready(Ok::<_, ErrorObject>(Value::String(counters.to_string())))
        })
    };
    Tools::new()
        .tool(
            ToolDef::new(
                "sleep",
                "Waits the given number of milliseconds, then answers `slept N ms`.",
                json!({
                    "type": "object",
                    "properties": { "ms": { "type": "integer", "minimum": 0 } },
                    "required": ["ms"],
                }),
            ),
            sleep,
        )
        .tool(
            ToolDef::new(
                "stats",
                "Counters of the sleep tool (started, completed, cancelled) and the calls in flight, as JSON.",
                json!({ "type": "object", "properties": {} }),
            ),
            stats_tool,
        )
}
