//! The check both LSP peers pass: the workload answered, a cancel answered the peer's way with the handler
//! stopped, and `serve` returning at EOF with a request still in flight.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{
    AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader,
};

use crate::{probe::wait_for_stop, target::Serve};

/// Runs the check against `serve`. `tag` must be this peer's own (the probe's records are global to the test
/// process); `cancel_error` is the error object the peer answers a cancelled request with.
pub(crate) async fn serves_work_cancel_and_eof(serve: Serve, tag: u64, cancel_error: Value) {
    let (client, server) = tokio::io::duplex(1 << 16);
    let (sr, sw) = tokio::io::split(server);
    // The check holds at most two requests at once.
    let served = tokio::spawn(serve(Box::pin(sr), Box::pin(sw), 2));
    let (cr, mut cw) = tokio::io::split(client);
    let mut cr = BufReader::new(cr);

    let init = json!({"processId": null, "rootUri": null, "capabilities": {}});
    write_frame(
        &mut cw,
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init}),
    )
    .await;
    let reply = read_frame(&mut cr).await;
    assert_eq!(reply["id"], 0);
    assert!(reply["result"]["capabilities"].is_object(), "{reply}");
    write_frame(
        &mut cw,
        json!({"jsonrpc": "2.0", "method": "initialized", "params": {}}),
    )
    .await;

    let work =
        json!({"jsonrpc": "2.0", "id": 1, "method": "bench/work", "params": {"ms": 0, "tag": 1}});
    write_frame(&mut cw, work).await;
    assert_eq!(
        read_frame(&mut cr).await,
        json!({"jsonrpc": "2.0", "id": 1, "result": "done"})
    );

    let work = json!({"jsonrpc": "2.0", "id": 2, "method": "bench/work", "params": {"ms": 3_600_000, "tag": tag}});
    write_frame(&mut cw, work).await;
    // A trivial request behind it, answered before the cancel is sent: the held handler has begun by then. A cancel
    // that reaches a handler never polled stops it before its guard exists, with no stop to see (the hand-written
    // server's `select!` may poll the cancelled token first).
    let barrier =
        json!({"jsonrpc": "2.0", "id": 4, "method": "bench/work", "params": {"ms": 0, "tag": 1}});
    write_frame(&mut cw, barrier).await;
    assert_eq!(
        read_frame(&mut cr).await,
        json!({"jsonrpc": "2.0", "id": 4, "result": "done"})
    );
    write_frame(
        &mut cw,
        json!({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": 2}}),
    )
    .await;
    let reply = read_frame(&mut cr).await;
    assert_eq!(
        reply,
        json!({"jsonrpc": "2.0", "id": 2, "error": cancel_error})
    );
    let stopped = wait_for_stop(tag, Duration::from_secs(1)).await;
    assert!(stopped.is_some(), "the cancelled handler was not dropped");

    // Closing with a request still in flight: `serve` must not wait for it.
    let work = json!({"jsonrpc": "2.0", "id": 3, "method": "bench/work", "params": {"ms": 3_600_000, "tag": tag + 1000}});
    write_frame(&mut cw, work).await;
    cw.shutdown().await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), served)
        .await
        .unwrap()
        .unwrap();
}

async fn write_frame(w: &mut (impl AsyncWrite + Unpin), msg: Value) {
    let body = msg.to_string();
    let frame = format!("Content-Length: {}\r\n\r\n{body}", body.len());
    w.write_all(frame.as_bytes()).await.unwrap();
}

async fn read_frame(r: &mut (impl AsyncBufRead + Unpin)) -> Value {
    let mut len = None;
    loop {
        let mut line = String::new();
        assert!(r.read_line(&mut line).await.unwrap() > 0, "EOF in headers");
        if line == "\r\n" {
            break;
        }
        if let Some(v) = line.strip_prefix("Content-Length: ") {
            len = Some(v.trim().parse::<usize>().unwrap());
        }
    }
    let mut body = vec![0; len.unwrap()];
    r.read_exact(&mut body).await.unwrap();
    serde_json::from_slice(&body).unwrap()
}
