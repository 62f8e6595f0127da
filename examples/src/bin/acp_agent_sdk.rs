//! `acp_agent`, written with the ACP Rust SDK (`agent-client-protocol` 5.2: an `Agent.v1()` builder,
//! [`examples::acp_sdk`]) and served under the stack by `tower-cancel-acp`: the same wire, the same contract.
//!
//! ```text
//! cargo run -p examples --bin acp_agent_sdk                        # current ACP: $/cancel_request {requestId}
//! cargo run -p examples --bin acp_agent_sdk -- --prompt-ms 500     # prompts work 500 ms after the permission
//! cargo run -p examples --bin acp_agent_sdk -- --timeout-ms 5000   # requests time out after 5 s (-32800)
//! ```
//!
//! A cancelled request (the client's `$/cancel_request`, `--timeout-ms`, the end of input) is answered -32800 by
//! the stack, its handler's `RequestCancellation` fires, and a permission request it left pending is cancelled on
//! the wire. `session/cancel` is the stack's too (grouped by `sessionId`): the prompt answers
//! `{"stopReason":"cancelled"}`, the session's `_demo/sleep` calls -32800.

use examples::acp_sdk::SdkAgent;
use tower_cancel::CancelStack;
use tower_cancel_acp::AcpService;
use tower_cancel_io::{Framing, Server};

#[tokio::main]
async fn main() -> std::io::Result<()> {
    examples::init_tracing();
    let agent = SdkAgent::new(examples::number_arg("--prompt-ms", 3000));
    // Grouped by `sessionId`: `session/cancel` ends the session's turn in the stack, as in `acp_agent` (the SDK's own
    // `session/cancel` handler still gets the notification).
    let stack = CancelStack::acp()
        .timeouts(examples::timeouts_from_args())
        .group_by_param("sessionId");
    let service = AcpService::new({
        let agent = agent.clone();
        move || agent.build()
    });
    // `with_stack`: the connection speaks ACP, so it has a peer, through which the agent's requests to the client
    // go, each prompt's cancelled with it.
    let server = Server::with_stack(stack, service);
    let registry = server.registry().clone();
    agent.in_flight().set_endpoint(move || registry.len());
    server.serve_stdio(Framing::Ndjson).await
}
