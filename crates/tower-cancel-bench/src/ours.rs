//! tower-cancel's own targets: the bare driver (no cancel layers) and the full stack, for LSP and MCP; the LSP
//! stack with a timeout, and with a handler that keeps its request; the LSP stack with each request on a task of
//! its own ([`Server::spawn_requests`]), alone or over a concurrency limit; and the LSP and MCP stacks with each
//! request polled first where it arrives and moved to a task only if still pending ([`Server::adaptive_requests`]).
//!
//! None of them has a concurrency limit to configure, so they ignore the workload's need (see [`Serve`]).
//!
//! [`Serve`]: crate::target::Serve

use std::{future::Future, time::Duration};

use serde_json::{json, Value};
use tower::{service_fn, Layer, Service, ServiceBuilder};
use tower_cancel::{BoxError, CancelStack, Request, Response};
use tower_cancel_io::{Framing, Server};

use crate::{
    cpu::burn,
    probe::{work, WorkParams},
    target::{BoxRead, BoxWrite, Protocol, ServeFuture, Target},
};

/// The LSP driver with a service that answers without any cancel layer: the baseline.
pub const LSP_BARE: Target = Target {
    name: "tower-cancel bare driver (LSP)",
    protocol: Protocol::Lsp,
    serve: serve_lsp_bare,
};

/// The LSP driver with `CancelStack::lsp()`: the full default stack.
pub const LSP_STACK: Target = Target {
    name: "tower-cancel (LSP)",
    protocol: Protocol::Lsp,
    serve: serve_lsp_stack,
};

/// The LSP driver with `CancelStack::lsp().timeout(30 s)`: a timer armed for every request.
pub const LSP_STACK_TIMEOUT: Target = Target {
    name: "tower-cancel (LSP), timeout 30 s",
    protocol: Protocol::Lsp,
    serve: serve_lsp_stack_timeout,
};

/// The LSP driver with `CancelStack::lsp()` over [`handle_keeping`]: the handler idiom most users write, whose
/// future keeps the request (its method, id and params) until it answers.
pub const LSP_STACK_KEEPING: Target = Target {
    name: "tower-cancel (LSP), handler keeps the request",
    protocol: Protocol::Lsp,
    serve: serve_lsp_stack_keeping,
};

/// The LSP driver with `CancelStack::lsp()`, each request on a task of its own.
pub const LSP_STACK_SPAWNED: Target = Target {
    name: "tower-cancel (LSP), requests spawned",
    protocol: Protocol::Lsp,
    serve: serve_lsp_stack_spawned,
};

/// As [`LSP_STACK_SPAWNED`], with at most [`SPAWNED_LIMIT`] handlers running (`ConcurrencyLimit` below the
/// stack): the requests waiting for a slot are not runnable, so a cancelled one is not queued behind them.
pub const LSP_STACK_SPAWNED_LIMITED: Target = Target {
    name: "tower-cancel (LSP), requests spawned, concurrency limit 2",
    protocol: Protocol::Lsp,
    serve: serve_lsp_stack_spawned_limited,
};

/// The concurrency limit of [`LSP_STACK_SPAWNED_LIMITED`]: the runtime's workers.
pub const SPAWNED_LIMIT: usize = 2;

/// The LSP driver with `CancelStack::lsp()`, each request polled once by the read loop and moved to a task of its
/// own only if still pending.
pub const LSP_STACK_ADAPTIVE: Target = Target {
    name: "tower-cancel (LSP), requests adaptive",
    protocol: Protocol::Lsp,
    serve: serve_lsp_stack_adaptive,
};

/// The MCP driver with a service that answers without any cancel layer: the baseline.
pub const MCP_BARE: Target = Target {
    name: "tower-cancel bare driver (MCP)",
    protocol: Protocol::Mcp,
    serve: serve_mcp_bare,
};

/// The MCP driver with `CancelStack::mcp()`: the full default stack.
pub const MCP_STACK: Target = Target {
    name: "tower-cancel (MCP)",
    protocol: Protocol::Mcp,
    serve: serve_mcp_stack,
};

/// The MCP driver with `CancelStack::mcp()`, requests adaptive (as [`LSP_STACK_ADAPTIVE`]).
pub const MCP_STACK_ADAPTIVE: Target = Target {
    name: "tower-cancel (MCP), requests adaptive",
    protocol: Protocol::Mcp,
    serve: serve_mcp_stack_adaptive,
};

/// Every target of this module, to find one by name ([`crate::target::by_name`]).
pub const ALL: &[Target] = &[
    LSP_BARE,
    LSP_STACK,
    LSP_STACK_TIMEOUT,
    LSP_STACK_KEEPING,
    LSP_STACK_SPAWNED,
    LSP_STACK_SPAWNED_LIMITED,
    LSP_STACK_ADAPTIVE,
    MCP_BARE,
    MCP_STACK,
    MCP_STACK_ADAPTIVE,
];

/// What a request asks for, read from it before any waiting.
enum Job {
    Answer(Value),
    Work(WorkParams, fn() -> Value),
    /// Compute for this many microseconds without awaiting, then answer.
    Spin(u64),
}

/// The workload's handler, as a user of tower-cancel writes it: a plain service, no cancellation code. It reads
/// the request first and lets it go, so that the future it returns holds only the work (the peers' handlers, which
/// get their params already parsed, hold no more).
pub fn handle(req: Request) -> impl Future<Output = Result<Value, BoxError>> + Send {
    let job = job(&req);
    drop(req);
    async move {
        match job? {
            Job::Answer(value) => Ok(value),
            Job::Work(params, result) => {
                work(params).await;
                // Made after the wait: a result held while waiting would cost heap for nothing.
                Ok(result())
            }
            // In the future, not in `job`: the service's `call` runs on the connection's task in either mode.
            Job::Spin(us) => {
                burn(std::time::Duration::from_micros(us));
                Ok(json!("done"))
            }
        }
    }
}

/// The same handler written the way most users write one: the future moves the request in and reads it there, so
/// the request stays alive (and in memory) until the answer. [`handle`] is the leaner idiom, which lets it go first.
pub async fn handle_keeping(req: Request) -> Result<Value, BoxError> {
    let answer = match job(&req)? {
        Job::Answer(value) => value,
        Job::Work(params, result) => {
            work(params).await;
            result()
        }
        Job::Spin(us) => {
            burn(Duration::from_micros(us));
            json!("done")
        }
    };
    // The request lives to here, as it does in a handler that reads it after its first await.
    drop(req);
    Ok(answer)
}

fn job(req: &Request) -> Result<Job, BoxError> {
    #[derive(serde::Deserialize)]
    struct Call {
        arguments: WorkParams,
    }
    #[derive(serde::Deserialize)]
    struct Spin {
        us: u64,
    }
    Ok(match req.method() {
        "initialize"
            if req
                .params()
                .is_some_and(|p| p.get().contains("protocolVersion")) =>
        {
            Job::Answer(json!({
                "protocolVersion": "2025-06-18",
                "capabilities": { "tools": {} },
                "serverInfo": { "name": "tower-cancel-bench", "version": "0" },
            }))
        }
        "initialize" => Job::Answer(json!({ "capabilities": {} })),
        "bench/work" => Job::Work(req.params_as()?, || json!("done")),
        "bench/spin" => Job::Spin(req.params_as::<Spin>()?.us),
        "tools/call" => Job::Work(
            req.params_as::<Call>()?.arguments,
            || json!({ "content": [{ "type": "text", "text": "done" }] }),
        ),
        // Notifications (`initialized`): nothing to answer.
        _ => Job::Answer(Value::Null),
    })
}

/// The handler made into what the driver serves without a stack: a reply for requests, none for notifications.
pub async fn handle_bare(req: Request) -> Result<Option<Response>, BoxError> {
    let id = req.id().cloned();
    let result = handle(req).await?;
    Ok(id.map(|id| Response::ok(id, result)))
}

fn serve_lsp_bare(reader: BoxRead, writer: BoxWrite, _need: usize) -> ServeFuture {
    serve(
        service_fn(handle_bare),
        reader,
        writer,
        Framing::ContentLength,
        Requests::Inline,
    )
}

fn serve_lsp_stack(reader: BoxRead, writer: BoxWrite, _need: usize) -> ServeFuture {
    let service = CancelStack::lsp().layer(service_fn(handle));
    serve(
        service,
        reader,
        writer,
        Framing::ContentLength,
        Requests::Inline,
    )
}

fn serve_lsp_stack_timeout(reader: BoxRead, writer: BoxWrite, _need: usize) -> ServeFuture {
    let service = CancelStack::lsp()
        .timeout(Duration::from_secs(30))
        .layer(service_fn(handle));
    serve(
        service,
        reader,
        writer,
        Framing::ContentLength,
        Requests::Inline,
    )
}

fn serve_lsp_stack_keeping(reader: BoxRead, writer: BoxWrite, _need: usize) -> ServeFuture {
    let service = CancelStack::lsp().layer(service_fn(handle_keeping));
    serve(
        service,
        reader,
        writer,
        Framing::ContentLength,
        Requests::Inline,
    )
}

fn serve_lsp_stack_spawned(reader: BoxRead, writer: BoxWrite, _need: usize) -> ServeFuture {
    let service = CancelStack::lsp().layer(service_fn(handle));
    serve(
        service,
        reader,
        writer,
        Framing::ContentLength,
        Requests::Spawned,
    )
}

fn serve_lsp_stack_spawned_limited(reader: BoxRead, writer: BoxWrite, _need: usize) -> ServeFuture {
    let service = ServiceBuilder::new()
        .layer(CancelStack::lsp())
        .concurrency_limit(SPAWNED_LIMIT)
        .service(service_fn(handle));
    serve(
        service,
        reader,
        writer,
        Framing::ContentLength,
        Requests::Spawned,
    )
}

fn serve_lsp_stack_adaptive(reader: BoxRead, writer: BoxWrite, _need: usize) -> ServeFuture {
    let service = CancelStack::lsp().layer(service_fn(handle));
    serve(
        service,
        reader,
        writer,
        Framing::ContentLength,
        Requests::Adaptive,
    )
}

fn serve_mcp_bare(reader: BoxRead, writer: BoxWrite, _need: usize) -> ServeFuture {
    serve(
        service_fn(handle_bare),
        reader,
        writer,
        Framing::Ndjson,
        Requests::Inline,
    )
}

fn serve_mcp_stack(reader: BoxRead, writer: BoxWrite, _need: usize) -> ServeFuture {
    let service = CancelStack::mcp().layer(service_fn(handle));
    serve(service, reader, writer, Framing::Ndjson, Requests::Inline)
}

fn serve_mcp_stack_adaptive(reader: BoxRead, writer: BoxWrite, _need: usize) -> ServeFuture {
    let service = CancelStack::mcp().layer(service_fn(handle));
    serve(service, reader, writer, Framing::Ndjson, Requests::Adaptive)
}

/// Where a target's requests run (the driver's modes).
#[derive(Clone, Copy)]
enum Requests {
    Inline,
    Spawned,
    Adaptive,
}

fn serve<S>(
    service: S,
    reader: BoxRead,
    writer: BoxWrite,
    framing: Framing,
    requests: Requests,
) -> ServeFuture
where
    S: Service<Request, Response = Option<Response>> + Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    Box::pin(async move {
        let server = Server::new(service);
        let server = match requests {
            Requests::Inline => server,
            Requests::Spawned => server.spawn_requests(true),
            Requests::Adaptive => server.adaptive_requests(true),
        };
        let _ = server.serve(reader, writer, framing).await;
    })
}
