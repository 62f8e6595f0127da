//! An LSP server over stdio (Content-Length framing) whose requests the client can cancel with `$/cancelRequest`.
//!
//! ```text
//! cargo run -p examples --bin lsp_server
//! cargo run -p examples --bin lsp_server -- --timeout-ms 5000   # requests time out after 5 s (-32800)
//! ```
//!
//! Methods: `initialize`, `initialized`, `shutdown`, `exit`, and for the demo `demo/sleep {"ms"}` (answers
//! `{"slept": ms}` after that long; -32800 when cancelled), `demo/progress {"steps", "intervalMs"}` (asks the
//! client to create a progress token, reports `begin`, a `report` per step and `end` under it, answers
//! `{"steps": N}`; the client's `window/workDoneProgress/cancel` of the token stops it with -32800) and
//! `demo/stats` (the sleep and progress handlers' counters).

use std::sync::Arc;

use examples::{lsp_progress, SleepStats};
use serde_json::{json, Value};
use tokio::sync::Notify;
use tower::service_fn;
use tower_cancel::{CancelStack, ErrorObject, Request};
use tower_cancel_io::{Framing, Server};

#[derive(Clone, Default)]
struct State {
    stats: SleepStats,
    exit: Arc<Notify>,
}

async fn handle(state: State, req: Request) -> Result<Value, ErrorObject> {
    match req.method() {
        "initialize" => Ok(json!({
            "capabilities": {},
            "serverInfo": { "name": "tower-cancel-lsp-example", "version": env!("CARGO_PKG_VERSION") },
        })),
        "initialized" => Ok(Value::Null),
        "shutdown" => Ok(Value::Null),
        "exit" => {
            state.exit.notify_one();
            Ok(Value::Null)
        }
        "demo/sleep" => Ok(examples::sleep(&state.stats, req.params_as()?).await),
        "demo/progress" => Ok(lsp_progress::run(&state.stats, &req, req.params_as()?).await),
        "demo/stats" => Ok(state.stats.to_json(&req)),
        // LSP: notifications a server does not know (`$/` ones included) are ignored.
        _ if req.is_notification() => Ok(Value::Null),
        other => Err(ErrorObject::method_not_found(other)),
    }
}

#[tokio::main]
async fn main() {
    examples::init_tracing();
    let state = State::default();
    let exit = state.exit.clone();
    // `with_stack`: the connection gets a peer speaking LSP, through which `demo/progress` asks the client for its
    // progress token.
    let stack = CancelStack::lsp().timeouts(examples::timeouts_from_args());
    let server = Server::with_stack(stack, service_fn(move |req| handle(state.clone(), req)));
    let served = tokio::select! {
        served = server.serve_stdio(Framing::ContentLength) => served,
        () = exit.notified() => Ok(()),
    };
    // End the process here rather than by returning: tokio reads stdin on a blocking thread that only ends when
    // stdin closes, and dropping the runtime would wait for it. Replies are flushed as they are written.
    if let Err(error) = served {
        tracing::error!(%error, "connection failed");
        std::process::exit(1);
    }
    std::process::exit(0);
}
