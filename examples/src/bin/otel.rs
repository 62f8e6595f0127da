//! Cancels in an OpenTelemetry trace: an MCP client and server in one process (over an in-memory pipe), each
//! request's span exported over OTLP/HTTP (protobuf) to the collector at `OTEL_EXPORTER_OTLP_ENDPOINT` (by default
//! `http://localhost:4318`). Without a collector it runs all the same: the export errors are logged.
//!
//! ```text
//! docker run -p 4318:4318 -p 16686:16686 jaegertracing/jaeger:2   # optional: a collector with a UI
//! cargo run -p examples --bin otel
//! ```
//!
//! The client sends its calls inside a span of its own, so that its `Peer` writes that trace context into each
//! request's `params._meta.traceparent` (MCP's SEP-414); the server's cancel layer reads it, and each request span
//! joins the client's trace:
//!
//! - `tools/call sleep` for 5 s, under the server's 200 ms timeout: span status error, `error.type = timeout`,
//!   `rpc.jsonrpc.error_code = -32001`, and a `cancel` event (`cancel.reason = timeout`, `cancel.source = local`);
//! - `tools/call sleep` that the client drops after 100 ms (`notifications/cancelled`): status unset,
//!   `error.type = peer`, a `cancel` event (`peer`, `peer`), no error code (MCP answers nothing);
//! - `tools/call confirm`, which asks the client (`elicitation/create`) through the request's peer: the question
//!   carries the server span's context on, and the client's span for it is that span's child.
//!
//! The subscriber enables `tower_cancel=debug`: the request spans are DEBUG spans, which the OpenTelemetry layer
//! only sees when the filter lets them through. `RUST_LOG` replaces the filter.

use std::{error::Error, time::Duration};

use examples::mcp::{Tools, Versions};
use opentelemetry::{global, trace::TracerProvider as _};
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::{
    error::OTelSdkResult,
    propagation::TraceContextPropagator,
    trace::{SdkTracerProvider, SpanData, SpanExporter},
    Resource,
};
use serde_json::{json, Value};
use tower::service_fn;
use tower_cancel::{CancelStack, ErrorObject, Peer, Request, TimeoutLayer};
use tower_cancel_io::{Framing, Server};
use tracing::Instrument;
use tracing_subscriber::{layer::SubscriberExt, util::SubscriberInitExt, EnvFilter};

const VERSIONS: Versions = Versions {
    known: &["2025-06-18"],
    default: "2025-06-18",
};

/// The server's limit on every request.
const TIMEOUT: Duration = Duration::from_millis(200);

fn main() -> Result<(), Box<dyn Error>> {
    // Built outside the runtime: the exporter's blocking HTTP client runs on the batch processor's own thread.
    let provider = tracer_provider()?;
    global::set_text_map_propagator(TraceContextPropagator::new());
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,tower_cancel=debug"));
    tracing_subscriber::registry()
        .with(filter)
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(false),
        )
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("otel-example")))
        .init();

    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(run());

    // Sends what the batch still holds; a collector that is not there is an error logged, not a failure.
    if let Err(error) = provider.shutdown() {
        tracing::warn!(%error, "the tracer provider did not shut down cleanly");
    }
    Ok(())
}

/// The provider exporting over OTLP/HTTP in batches, each export's failure logged.
fn tracer_provider() -> Result<SdkTracerProvider, Box<dyn Error>> {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_timeout(Duration::from_secs(2))
        .build()?;
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(Logged(exporter))
        .with_resource(
            Resource::builder()
                .with_service_name("tower-cancel-otel")
                .build(),
        )
        .build())
}

async fn run() {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let (server_read, server_write) = tokio::io::split(server_io);
    let (client_read, client_write) = tokio::io::split(client_io);

    let tools = Tools::new(VERSIONS);
    let server = Server::with_stack(
        CancelStack::mcp().timeouts(TimeoutLayer::new(TIMEOUT)),
        service_fn(move |req| tools.clone().handle(req)),
    );
    let server = tokio::spawn(server.serve(server_read, server_write, Framing::Ndjson));

    // The client: a connection of the same kind, whose handler answers the server's questions.
    let client = Server::with_stack(CancelStack::mcp(), service_fn(answer));
    let peer = client.peer().expect("a stack's connection has a peer");
    let client = tokio::spawn(client.serve(client_read, client_write, Framing::Ndjson));

    let session = tracing::info_span!("mcp session", otel.kind = "client");
    exchange(&peer).instrument(session).await;

    // Both connections end with the runtime: every request has ended, and its span with it.
    client.abort();
    server.abort();
}

/// The client's calls. Each `request` is made inside the session's span: that is the context its `_meta` carries.
async fn exchange(peer: &Peer) {
    let initialized = peer
        .request(
            "initialize",
            json!({ "protocolVersion": "2025-06-18", "capabilities": { "elicitation": {} },
                    "clientInfo": { "name": "otel-example", "version": "0" } }),
        )
        .await;
    tracing::info!(ok = initialized.is_ok(), "initialize");
    let _ = peer.notify("notifications/initialized", json!({}));

    let timed_out = peer.request("tools/call", call("sleep", json!({ "ms": 5_000 })));
    tracing::info!(outcome = ?timed_out.await, "sleep 5 s under a 200 ms timeout");

    let dropped = peer.request("tools/call", call("sleep", json!({ "ms": 5_000 })));
    let waited = tokio::time::timeout(Duration::from_millis(100), dropped).await;
    tracing::info!(
        gave_up = waited.is_err(),
        "sleep 5 s, dropped by the client after 100 ms"
    );

    let confirmed = peer.request(
        "tools/call",
        call("confirm", json!({ "action": "tracing" })),
    );
    tracing::info!(outcome = ?confirmed.await, "confirm, which asks the client");
}

fn call(tool: &str, arguments: Value) -> Value {
    json!({ "name": tool, "arguments": arguments })
}

/// The client's handler: it accepts every elicitation.
async fn answer(req: Request) -> Result<Value, ErrorObject> {
    match req.method() {
        "elicitation/create" => Ok(json!({ "action": "accept", "content": {} })),
        other => Err(ErrorObject::method_not_found(other)),
    }
}

/// An exporter that logs each failed export (a collector not listening) and passes the result on.
#[derive(Debug)]
struct Logged<E>(E);

impl<E: SpanExporter> SpanExporter for Logged<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len();
        let result = self.0.export(batch).await;
        if let Err(error) = &result {
            tracing::warn!(%error, spans, "spans not exported");
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.0.set_resource(resource);
    }
}
