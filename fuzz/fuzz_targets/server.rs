//! The whole connection driver: `Server` with a `CancelStack` reading the fuzz input, then end of input.
//!
//! The first byte picks the dialect and its framing: `L` LSP (`Content-Length`), `A` ACP, `D` the ACP draft, `M`
//! MCP (the last three NDJSON); any other byte picks by its value. The rest arrives in chunks whose sizes the
//! input picks, a millisecond apart, on a current-thread runtime with paused time, so cancels race the
//! handlers. A request's handler sleeps for its params' `sleep` milliseconds (capped at a minute) and fails if
//! they have a `fail` member.
//!
//! # Invariants checked
//!
//! - `serve` returns `Ok` within an hour of virtual time after the input ends: no hang, whatever arrived.
//! - The registry is empty when it has returned: nothing in flight is leaked.
//! - Everything written is a well-formed frame holding a JSON-RPC response.

#![no_main]

use std::time::Duration;

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::codec::Decoder;
use tower::{service_fn, ServiceBuilder};
use tower_cancel::{BoxError, CancelStack, Dialect, Message, Request};
use tower_cancel_io::{ContentLengthCodec, Framing, NdjsonCodec, Server};

const MAX_FRAME: usize = 1024;

fuzz_target!(|data: &[u8]| {
    let Some((&which, input)) = data.split_first() else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a runtime");
    let pick = match which {
        b'L' => 0,
        b'A' => 1,
        b'D' => 2,
        b'M' => 3,
        n => n % 4,
    };
    let framing = match pick {
        0 => Framing::ContentLength,
        _ => Framing::Ndjson,
    };
    let output = runtime.block_on(async {
        match pick {
            0 => serve(CancelStack::lsp(), framing, input).await,
            1 => serve(CancelStack::acp(), framing, input).await,
            2 => serve(CancelStack::acp_draft(), framing, input).await,
            _ => serve(CancelStack::mcp(), framing, input).await,
        }
    });
    match framing {
        Framing::ContentLength => check_replies(ContentLengthCodec::new(), output),
        Framing::Ndjson => check_replies(NdjsonCodec::new(), output),
    }
});

async fn handler(request: Request) -> Result<Value, BoxError> {
    let params: Value = request.params_as().unwrap_or_default();
    if let Some(ms) = params.get("sleep").and_then(Value::as_u64) {
        tokio::time::sleep(Duration::from_millis(ms.min(60_000))).await;
    }
    if params.get("fail").is_some() {
        return Err("handler failed".into());
    }
    Ok(json!({ "method": request.method() }))
}

/// Serve `input` and return what the server wrote.
async fn serve<D: Dialect + Clone>(stack: CancelStack<D>, framing: Framing, input: &[u8]) -> Vec<u8> {
    let service = ServiceBuilder::new()
        .layer(stack)
        .service(service_fn(handler));
    let server = Server::new(service).max_frame_size(MAX_FRAME);
    let registry = server.registry().clone();
    let (mut peer, reader) = tokio::io::duplex(256);
    // The writer runs on a task of its own, so it owns its end; what it writes is collected from the other.
    let (writer, mut written) = tokio::io::duplex(64 * 1024);
    let collect = async move {
        let mut output = Vec::new();
        written
            .read_to_end(&mut output)
            .await
            .expect("reading what the server wrote");
        output
    };
    let feed = async move {
        let mut rest = input;
        while let Some(&first) = rest.first() {
            let (now, later) = rest.split_at((1 + usize::from(first % 64)).min(rest.len()));
            if peer.write_all(now).await.is_err() {
                return;
            }
            rest = later;
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        // Dropping `peer` ends the input.
    };
    let serve = server.serve(reader, writer, framing);
    let done = tokio::time::timeout(Duration::from_secs(3600), async {
        let ((), served, output) = tokio::join!(feed, serve, collect);
        (served, output)
    })
    .await;
    let output = match done {
        Ok((Ok(()), output)) => output,
        Ok((Err(error), _)) => panic!("serve failed: {error}"),
        Err(_) => panic!("serve did not return within an hour after the input ended"),
    };
    assert!(registry.is_empty(), "{} requests left", registry.len());
    output
}

fn check_replies<C: Decoder<Item = Result<BytesMut, tower_cancel_io::FrameError>>>(
    mut codec: C,
    output: Vec<u8>,
) where
    C::Error: std::fmt::Debug,
{
    let mut buf = BytesMut::from(&output[..]);
    while let Some(frame) = codec.decode_eof(&mut buf).expect("decoding") {
        let frame = frame.expect("a well-formed frame");
        match Message::from_slice(&frame) {
            Ok(Message::Response(_)) => {}
            other => panic!("wrote {:?}: {other:?}", String::from_utf8_lossy(&frame)),
        }
    }
}
