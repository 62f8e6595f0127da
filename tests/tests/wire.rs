//! What the connection driver does with the wire: exact ids, duplicate ids in flight, bytes that are not JSON,
//! JSON that is not a message, frames over the size limit. The connection always goes on.

use serde_json::{json, Value};
use tests::{Conn, Counts, Ended, Probe};
use tower::ServiceBuilder;
use tower_cancel::{CancelReason, CancelStack};
use tower_cancel_io::{Framing, Server};

/// Assert an error reply with id `null`, code `code`, and a message starting with `prefix`.
fn assert_null_id_error(reply: &Value, code: i64, prefix: &str) {
    assert_eq!(reply["jsonrpc"], "2.0", "{reply}");
    assert_eq!(reply["id"], Value::Null, "{reply}");
    assert!(reply.get("result").is_none(), "{reply}");
    assert_eq!(reply["error"]["code"], code, "{reply}");
    let message = reply["error"]["message"].as_str().unwrap();
    assert!(message.starts_with(prefix), "{reply}");
    assert_eq!(reply.as_object().unwrap().len(), 3, "{reply}");
}

#[tokio::test(start_paused = true)]
async fn the_number_1_and_the_string_1_are_different_requests() {
    let probe = Probe::new();
    let mut conn = Conn::lsp(&probe);
    conn.send(r#"{"jsonrpc":"2.0","id":1,"method":"hang"}"#)
        .await;
    probe.wait_started(1).await;
    // Not a duplicate of 1.
    conn.send(r#"{"jsonrpc":"2.0","id":"1","method":"hang"}"#)
        .await;
    probe.wait_started("1").await;
    assert_eq!(conn.registry().len(), 2);

    conn.send(r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":"1"}}"#)
        .await;
    conn.expect(
        r#"{"jsonrpc":"2.0","id":"1","error":{"code":-32800,"message":"Request cancelled"}}"#,
    )
    .await;
    assert_eq!(probe.ended_of(1), None, "the number 1 is still running");
    assert!(conn.registry().contains(&1.into()));

    conn.send(r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":1}}"#)
        .await;
    conn.expect(
        r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32800,"message":"Request cancelled"}}"#,
    )
    .await;
    assert_eq!(
        probe.ended(),
        [
            Ended::stopped("1", "hang", Some(CancelReason::peer(None))),
            Ended::stopped(1, "hang", Some(CancelReason::peer(None)))
        ]
    );
    conn.finish_counting(Counts::new(2, 0, 2)).await;
}

#[tokio::test(start_paused = true)]
async fn a_duplicate_id_in_flight_gets_invalid_request_and_the_first_is_untouched() {
    let probe = Probe::new();
    let mut conn = Conn::lsp(&probe);
    conn.send(r#"{"jsonrpc":"2.0","id":7,"method":"sleep","params":{"ms":100}}"#)
        .await;
    probe.wait_started(7).await;
    conn.send(r#"{"jsonrpc":"2.0","id":7,"method":"echo","params":"second"}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32600,"message":"Invalid Request: request id 7 is already in flight"}}"#)
        .await;
    // The first request 7 goes on and answers; then the id is free again.
    conn.expect(r#"{"jsonrpc":"2.0","id":7,"result":{"slept":100}}"#)
        .await;
    conn.send(r#"{"jsonrpc":"2.0","id":7,"method":"echo","params":"third"}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":7,"result":"third"}"#)
        .await;
    assert_eq!(probe.started(), 2, "the duplicate never ran");

    conn.finish_counting(Counts::new(2, 2, 0)).await;
}

#[tokio::test(start_paused = true)]
async fn a_duplicate_of_a_request_that_cannot_be_cancelled_is_refused_too() {
    let probe = Probe::new();
    let mut conn = Conn::mcp(&probe);
    conn.send(r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"ms":100}}"#)
        .await;
    probe.wait_started(0).await;
    conn.send(r#"{"jsonrpc":"2.0","id":0,"method":"initialize"}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":0,"error":{"code":-32600,"message":"Invalid Request: request id 0 is already in flight"}}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":0,"result":{"capabilities":{}}}"#)
        .await;
    conn.finish_counting(Counts::default()).await;
}

/// Each of the `garbage` inputs (raw bytes) gets -32700 with id `null`, and the connection goes on.
async fn garbage_gets_parse_errors(mut conn: Conn, garbage: &[&[u8]]) {
    for bytes in garbage {
        conn.send_raw(bytes).await;
        assert_null_id_error(&conn.recv_json().await, -32700, "Parse error");
    }
    conn.send(r#"{"jsonrpc":"2.0","id":5,"method":"echo","params":"still here"}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":5,"result":"still here"}"#)
        .await;
    conn.finish_counting(Counts::new(1, 1, 0)).await;
}

#[tokio::test(start_paused = true)]
async fn ndjson_garbage_gets_parse_error_with_id_null() {
    garbage_gets_parse_errors(
        Conn::mcp(&Probe::new()),
        &[
            b"this is not json\n",
            b"{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\n",
            b"\xff\xfe\x00garbage\n",
        ],
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn content_length_garbage_gets_parse_error_with_id_null() {
    garbage_gets_parse_errors(
        Conn::lsp(&Probe::new()),
        &[
            // A well-framed body that is not JSON.
            tests::frame("{not json at all", Framing::ContentLength).as_bytes(),
            // A header block that cannot be read.
            b"Content-Length: twelve\r\n\r\n",
            b"Content-Type: application/json\r\n\r\n",
        ],
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn json_that_is_not_a_message_gets_invalid_request() {
    let probe = Probe::new();
    let mut conn = Conn::acp(&probe);
    for bad in [
        r#"{"foo":1}"#,
        r#"[{"jsonrpc":"2.0","id":1,"method":"echo"}]"#,
        "42",
        r#"{"jsonrpc":"2.0","id":null,"method":"echo"}"#,
        r#"{"jsonrpc":"2.0","id":1.5,"method":"echo"}"#,
        r#"{"jsonrpc":"2.0","id":true,"method":"echo"}"#,
    ] {
        conn.send(bad).await;
        assert_null_id_error(&conn.recv_json().await, -32600, "Invalid Request");
    }
    // An invalid message whose id can be read is answered with that id.
    conn.send(r#"{"jsonrpc":"1.0","id":3,"method":"echo"}"#)
        .await;
    assert_eq!(
        conn.recv_json().await,
        json!({"jsonrpc":"2.0","id":3,"error":{"code":-32600,"message":"Invalid Request: jsonrpc must be \"2.0\""}})
    );
    conn.send(r#"{"jsonrpc":"2.0","id":4,"method":"echo","result":1}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":4,"error":{"code":-32600,"message":"Invalid Request: expected exactly one of method, result or error"}}"#)
        .await;
    assert_eq!(probe.started(), 0);
    conn.finish_counting(Counts::default()).await;
}

#[tokio::test(start_paused = true)]
async fn replies_from_the_peer_never_reach_the_service_and_are_not_answered() {
    let probe = Probe::new();
    let mut conn = Conn::lsp(&probe);
    conn.send(r#"{"jsonrpc":"2.0","id":99,"result":{"unsolicited":true}}"#)
        .await;
    conn.send(r#"{"jsonrpc":"2.0","id":98,"error":{"code":-1,"message":"nope"}}"#)
        .await;
    conn.send(r#"{"jsonrpc":"2.0","id":1,"method":"echo"}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":1,"result":null}"#)
        .await;
    assert_eq!(probe.started(), 1);
    assert!(probe.notifications().is_empty());
    conn.finish_counting(Counts::new(1, 1, 0)).await;
}

fn limited(probe: &Probe, framing: Framing, limit: usize) -> Conn {
    let service = ServiceBuilder::new()
        .layer(CancelStack::lsp())
        .service(probe.service());
    Conn::start(Server::new(service).max_frame_size(limit), framing)
}

/// After the requests over the limit, a small one is answered: the only one that ran.
async fn a_small_request_still_works(mut conn: Conn, probe: &Probe) {
    conn.send(r#"{"jsonrpc":"2.0","id":2,"method":"echo","params":"small"}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":2,"result":"small"}"#)
        .await;
    assert_eq!(probe.started(), 1, "the big requests never ran");
    conn.finish_counting(Counts::new(1, 1, 0)).await;
}

#[tokio::test(start_paused = true)]
async fn content_length_a_frame_over_the_limit_gets_invalid_request_and_the_next_request_works() {
    let probe = Probe::new();
    let mut conn = limited(&probe, Framing::ContentLength, 64);
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"echo","params":"{}"}}"#,
        "x".repeat(200)
    );
    conn.send(&big).await;
    conn.expect(&format!(
        r#"{{"jsonrpc":"2.0","id":null,"error":{{"code":-32600,"message":"Invalid Request: frame of {} bytes exceeds the limit of 64 bytes"}}}}"#,
        big.len()
    ))
    .await;
    a_small_request_still_works(conn, &probe).await;
}

#[tokio::test(start_paused = true)]
async fn ndjson_a_line_over_the_limit_gets_invalid_request_and_the_next_request_works() {
    let probe = Probe::new();
    let mut conn = limited(&probe, Framing::Ndjson, 64);
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"echo","params":"{}"}}"#,
        "x".repeat(200)
    );
    conn.send(&big).await;
    assert_null_id_error(&conn.recv_json().await, -32600, "Invalid Request: frame of");
    // A longer one, streamed in pieces: discarded as it arrives, reported once.
    let huge = format!(
        r#"{{"jsonrpc":"2.0","id":3,"method":"echo","params":"{}"}}"#,
        "y".repeat(100_000)
    );
    for chunk in huge.as_bytes().chunks(1000) {
        conn.send_raw(chunk).await;
    }
    conn.send_raw(b"\n").await;
    assert_null_id_error(&conn.recv_json().await, -32600, "Invalid Request: frame");
    a_small_request_still_works(conn, &probe).await;
}

#[tokio::test(start_paused = true)]
async fn content_length_frames_split_across_writes_and_with_content_type_are_read() {
    let probe = Probe::new();
    let mut conn = Conn::lsp(&probe);
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"echo","params":"pieces"}"#;
    let frame = format!(
        "Content-Length: {}\r\nContent-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n{body}",
        body.len()
    );
    for piece in frame.as_bytes().chunks(7) {
        conn.send_raw(piece).await;
    }
    conn.expect(r#"{"jsonrpc":"2.0","id":1,"result":"pieces"}"#)
        .await;
    conn.finish_counting(Counts::new(1, 1, 0)).await;
}
