//! What the writer puts on the wire, exactly, over a real in-memory duplex: for a message queued before the
//! connection was served and after it, and for replies of mixed sizes (larger than the writer's buffer, and
//! small ones serialized into buffers the writer gave back after larger or smaller messages).

use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tower::{service_fn, Layer};
use tower_cancel::{message::WireRequest, BoxError, CancelStack, Request};
use tower_cancel_io::{Framing, Server};

/// How long a test waits for anything before it fails: never what ends a passing test.
const PATIENCE: Duration = Duration::from_secs(10);

/// The LSP stack around a handler that answers `size` characters of `x`.
fn server() -> Server<
    impl tower::Service<
            Request,
            Response = Option<tower_cancel::Response>,
            Error = std::convert::Infallible,
            Future: Send,
        > + Send
        + 'static,
> {
    let service = CancelStack::lsp().layer(service_fn(|req: Request| async move {
        let size = req
            .params()
            .and_then(|p| serde_json::from_str::<Value>(p.get()).ok())
            .and_then(|p| p["size"].as_u64())
            .unwrap_or(1);
        Ok::<_, BoxError>(json!("x".repeat(size as usize)))
    }));
    Server::new(service)
}

fn content_length(body: &[u8]) -> Vec<u8> {
    let mut frame = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    frame.extend_from_slice(body);
    frame
}

fn line(body: &[u8]) -> Vec<u8> {
    let mut line = body.to_vec();
    line.push(b'\n');
    line
}

/// Read exactly `expected.len()` bytes from the client's end and compare them with `expected`.
async fn read_exactly(client: &mut DuplexStream, expected: &[u8]) {
    let mut got = vec![0; expected.len()];
    tokio::time::timeout(PATIENCE, client.read_exact(&mut got))
        .await
        .expect("the bytes did not come in time")
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(expected)
    );
}

async fn frames_on_the_wire(framing: Framing, frame: fn(&[u8]) -> Vec<u8>) {
    let (mut client, server_end) = tokio::io::duplex(64 * 1024);
    let (read, write) = tokio::io::split(server_end);
    let server = server();
    let outbox = server.connection().outbox().clone();
    // Queued before the connection is served.
    let early = WireRequest::notification("early/notice", json!({ "n": 1 }));
    outbox.send_request(&early).unwrap();
    let serve = tokio::spawn(server.serve(read, write, framing));

    let requests: Vec<Value> = [1, 5000, 3000, 9000, 1]
        .iter()
        .enumerate()
        .map(|(id, size)| json!({"jsonrpc": "2.0", "id": id, "method": "x/work", "params": {"size": size}}))
        .collect();
    let mut written = Vec::new();
    for request in &requests {
        written.extend(frame(&serde_json::to_vec(request).unwrap()));
    }
    client.write_all(&written).await.unwrap();

    let early_json = serde_json::to_vec(&early).unwrap();
    read_exactly(&mut client, &frame(&early_json)).await;
    for request in &requests {
        let size = request["params"]["size"].as_u64().unwrap() as usize;
        let reply = format!(
            r#"{{"jsonrpc":"2.0","id":{},"result":"{}"}}"#,
            request["id"],
            "x".repeat(size)
        );
        read_exactly(&mut client, &frame(reply.as_bytes())).await;
    }
    // Sent after serving began, into a buffer given back.
    outbox.send_request(&early).unwrap();
    read_exactly(&mut client, &frame(&early_json)).await;

    drop(client);
    ended(serve).await;
}

/// Wait for a connection whose client hung up to end, without error.
async fn ended(serve: tokio::task::JoinHandle<std::io::Result<()>>) {
    tokio::time::timeout(PATIENCE, serve)
        .await
        .expect("the connection did not end")
        .unwrap()
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_length_frames_are_exact_through_reused_buffers() {
    frames_on_the_wire(Framing::ContentLength, content_length).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ndjson_lines_are_exact_through_reused_buffers() {
    frames_on_the_wire(Framing::Ndjson, line).await;
}
