//! Bad input on a real connection, byte for byte as a broken or hostile peer would send it: frames over the limit
//! or announcing absurd sizes, bytes that are not UTF-8, wrong or missing `Content-Length` headers, garbage between
//! frames, frames cut off by the end of the stream, JSON nested 100 000 deep, ids of every JSON type, cancels of
//! the wrong shape for every dialect, and batches with cancels inside.
//!
//! Each case asserts the exact reply on the wire, or silence where the protocol says so: most cases send the bad
//! input, then an ordinary request, and assert that the frames before that request's reply are exactly the ones
//! the case expects, which also shows the connection is still up. Every test ends with the connection closed,
//! `serve` returning `Ok`, the registry empty (no request in flight), no handler running, and the registry's
//! counters as expected. `wire.rs` covers the simpler cases (garbage, non-message JSON, `id` null, `1.5` and
//! `true`, frames just over a small limit, `1` vs `"1"`, duplicate ids); they are not repeated here.
//!
//! The replies follow JSON-RPC 2.0 §5.1: -32700 for bytes that are not JSON text (RFC 8259 §8.1: JSON text
//! exchanged between systems MUST be UTF-8, so invalid UTF-8 is not JSON), -32600 for JSON that is not a
//! request object, both with id `null` where the id cannot be read. Ids are integers (`i64`) or strings, as LSP
//! (`integer | string`) and the MCP TypeScript SDK (`z.union([z.string(), z.number().int()])`) define them.
//! Batches are not supported (LSP and ACP have none, MCP removed them in 2025-06-18): one -32600 for the whole
//! array, and nothing inside it runs.

use serde_json::Value;
use tests::{Conn, Counts, End, Ended, Probe};
use tower::{service_fn, ServiceBuilder};
use tower_cancel::{BoxError, CancelReason, CancelStack, PeerError, Request};
use tower_cancel_io::{Framing, Server};

/// The request every table case ends with. Its reply coming next shows that the bad input before it got exactly
/// the replies the case lists (or none), and that the connection is still up.
const NEXT: &str = r#"{"jsonrpc":"2.0","id":"next","method":"echo","params":"still up"}"#;
const NEXT_REPLY: &str = r#"{"jsonrpc":"2.0","id":"next","result":"still up"}"#;

/// The default frame size limit, as the replies spell it.
const LIMIT: usize = 16 * 1024 * 1024;

/// Request 1 cancelled, as LSP and ACP answer it.
const CANCELLED_1: &str =
    r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32800,"message":"Request cancelled"}}"#;

/// An error reply with id `null`, exactly as it is written on the wire.
fn null_id(code: i64, message: &str) -> String {
    let message = serde_json::to_string(message).unwrap();
    format!(r#"{{"jsonrpc":"2.0","id":null,"error":{{"code":{code},"message":{message}}}}}"#)
}

fn parse_error(detail: &str) -> String {
    null_id(-32700, &format!("Parse error: {detail}"))
}

fn invalid_request(detail: &str) -> String {
    null_id(-32600, &format!("Invalid Request: {detail}"))
}

/// `body` framed as `framing` frames it (bytes, so that it may be anything but UTF-8).
fn framed(body: &[u8], framing: Framing) -> Vec<u8> {
    match framing {
        Framing::ContentLength => [
            format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes(),
            body,
        ]
        .concat(),
        Framing::Ndjson => [body, b"\n"].concat(),
    }
}

/// The dialect each framing is tested with: LSP over `Content-Length`, MCP over NDJSON.
fn connect(probe: &Probe, framing: Framing) -> Conn {
    match framing {
        Framing::ContentLength => Conn::lsp(probe),
        Framing::Ndjson => Conn::mcp(probe),
    }
}

const FRAMINGS: [Framing; 2] = [Framing::ContentLength, Framing::Ndjson];

/// One table case: raw bytes, and the replies they get before [`NEXT`]'s reply.
struct Case {
    name: String,
    input: Vec<u8>,
    replies: Vec<String>,
}

impl Case {
    fn new(name: impl Into<String>, input: impl Into<Vec<u8>>, replies: Vec<String>) -> Self {
        Self {
            name: name.into(),
            input: input.into(),
            replies,
        }
    }

    /// `body` framed for `framing`, getting the one reply `reply`; named after the framing and `name`.
    fn framed(framing: Framing, name: impl std::fmt::Display, body: &[u8], reply: String) -> Self {
        Self::new(
            format!("{framing:?} {name}"),
            framed(body, framing),
            vec![reply],
        )
    }
}

/// Send each case's bytes and then [`NEXT`]; assert the replies in between, then `NEXT`'s reply.
async fn run(conn: &mut Conn, cases: &[Case]) {
    for case in cases {
        conn.send_raw(&case.input).await;
        conn.send(NEXT).await;
        for expected in &case.replies {
            assert_eq!(&conn.recv().await, expected, "case {}", case.name);
        }
        assert_eq!(conn.recv().await, NEXT_REPLY, "case {}", case.name);
    }
}

/// Close the connection, assert that nothing more was written, that serve returned `Ok` with an empty registry
/// (checked by [`Conn::finish`]) and no handler running, and return the registry's counters.
async fn close_quietly(conn: Conn, probe: &Probe) -> Counts {
    let registry = conn.registry().clone();
    conn.finish_quiet().await;
    assert_eq!(probe.running(), 0, "handlers still running");
    Counts::of(&registry)
}

/// `n` requests registered and completed, nothing else.
fn completed(n: u64) -> Counts {
    Counts {
        registered: n,
        completed: n,
        ..Counts::default()
    }
}

/// `n` requests registered and cancelled, nothing else.
fn cancelled(n: u64) -> Counts {
    Counts {
        registered: n,
        cancelled: n,
        ..Counts::default()
    }
}

/// Send request 1, a `hang` (in flight until it is cancelled), and wait until its handler runs.
async fn hang_1(conn: &mut Conn, probe: &Probe) {
    conn.send(r#"{"jsonrpc":"2.0","id":1,"method":"hang"}"#)
        .await;
    probe.wait_started(1).await;
}

// ---------------------------------------------------------------------------------------------------------------
// Ids
// ---------------------------------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn ids_of_every_type_are_echoed_exactly_or_refused_with_id_null() {
    let long = "x".repeat(100 * 1024);
    let long_id = format!("\"{long}\"");
    // (the id as sent, the id in the reply). JSON escapes are read, so the reply carries the same JSON value
    // (`"\u0041"` is answered as `"A"`), written the way serde_json writes it.
    let accepted: Vec<(&str, &str)> = vec![
        ("0", "0"),
        ("-1", "-1"),
        ("9223372036854775807", "9223372036854775807"),
        ("-9223372036854775808", "-9223372036854775808"),
        (r#""""#, r#""""#),
        (r#""é😀""#, r#""é😀""#),
        (r#""\u0041""#, r#""A""#),
        (r#""a\u0000b""#, r#""a\u0000b""#),
        (r#""7""#, r#""7""#),
        (&long_id, &long_id),
    ];
    // Not an integer that fits in i64, nor a string: -32600 with id null (JSON-RPC 2.0 §5: the id could not be
    // read). `-0` is read as a float by serde_json; `1e400` is out of any float's range.
    let refused = [
        "1.0",
        "-0",
        "1e2",
        "1e400",
        "9223372036854775808",
        "18446744073709551615",
        "18446744073709551616",
        "-9223372036854775809",
        "false",
        "{}",
        r#"{"id":1}"#,
        "[]",
        "[1]",
        r#""\ud800""#,
    ];
    for framing in FRAMINGS {
        let probe = Probe::new();
        let mut conn = connect(&probe, framing);
        let request =
            |id: &str| format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"echo","params":"ok"}}"#);
        let mut cases = Vec::new();
        for (sent, answered) in &accepted {
            let reply = format!(r#"{{"jsonrpc":"2.0","id":{answered},"result":"ok"}}"#);
            let name = format!("id {sent:.20}");
            cases.push(Case::framed(framing, name, request(sent).as_bytes(), reply));
        }
        for sent in refused {
            let reply = invalid_request("id must be an integer or a string");
            let name = format!("id {sent}");
            cases.push(Case::framed(framing, name, request(sent).as_bytes(), reply));
        }
        run(&mut conn, &cases).await;
        let n = (accepted.len() + cases.len()) as u64;
        assert_eq!(close_quietly(conn, &probe).await, completed(n));
    }
}

// ---------------------------------------------------------------------------------------------------------------
// UTF-8
// ---------------------------------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn bytes_that_are_not_utf8_get_parse_error_inside_strings_and_out() {
    let request = |params: &[u8]| {
        [
            &br#"{"jsonrpc":"2.0","id":1,"method":"echo","params":""#[..],
            params,
            b"\"}",
        ]
        .concat()
    };
    // (name, body, the reply; the columns are serde_json's).
    let table: Vec<(&str, Vec<u8>, String)> = vec![
        (
            "0xff inside a string",
            request(b"a\xffb"),
            parse_error("invalid unicode code point at line 1 column 52"),
        ),
        (
            "overlong encoding of '/' inside a string",
            request(b"\xc0\xaf"),
            parse_error("invalid unicode code point at line 1 column 51"),
        ),
        (
            "a UTF-16 surrogate encoded as UTF-8 (CESU-8)",
            request(b"\xed\xa0\x80"),
            parse_error("invalid unicode code point at line 1 column 51"),
        ),
        (
            "a multi-byte sequence cut short",
            request(b"\xe2\x82"),
            parse_error("invalid unicode code point at line 1 column 51"),
        ),
        (
            "a raw control character inside a string",
            request(b"a\x01b"),
            parse_error("control character (\\u0000-\\u001F) found while parsing a string at line 1 column 51"),
        ),
        (
            "0xff inside the method",
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ec\xffho\"}".to_vec(),
            parse_error("invalid unicode code point at line 1 column 37"),
        ),
        (
            "0xff outside any string",
            b"{\"jsonrpc\":\"2.0\",\"id\":1\xff,\"method\":\"echo\"}".to_vec(),
            parse_error("expected `,` or `}` at line 1 column 24"),
        ),
        (
            // RFC 8259 §8.1: a parser MAY ignore a byte order mark; this one does not.
            "a UTF-8 byte order mark",
            b"\xef\xbb\xbf{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"echo\"}".to_vec(),
            parse_error("expected value at line 1 column 1"),
        ),
        (
            "UTF-16LE",
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"echo\"}"
                .encode_utf16()
                .flat_map(u16::to_le_bytes)
                .collect(),
            parse_error("key must be a string at line 1 column 2"),
        ),
    ];
    for framing in FRAMINGS {
        let probe = Probe::new();
        let mut conn = connect(&probe, framing);
        let cases: Vec<Case> = table
            .iter()
            .map(|(name, body, reply)| Case::framed(framing, name, body, reply.clone()))
            .collect();
        run(&mut conn, &cases).await;
        // Valid UTF-8 beyond ASCII is echoed byte for byte.
        conn.send(r#"{"jsonrpc":"2.0","id":2,"method":"echo","params":"é ✓ 😀 \u00e9"}"#)
            .await;
        conn.expect(r#"{"jsonrpc":"2.0","id":2,"result":"é ✓ 😀 é"}"#)
            .await;
        // Left as it is: a member nobody reads is skipped without decoding its strings, so bad bytes there go
        // unnoticed and the request is served (checking every frame's UTF-8 would cost a pass over each one).
        conn.send_raw(&framed(
            b"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"echo\",\"unknown\":\"\xff\"}",
            framing,
        ))
        .await;
        conn.expect(r#"{"jsonrpc":"2.0","id":3,"result":null}"#)
            .await;
        assert_eq!(probe.started(), cases.len() + 2, "no bad request ran");
        let n = cases.len() as u64 + 2;
        assert_eq!(close_quietly(conn, &probe).await, completed(n));
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Deep nesting
// ---------------------------------------------------------------------------------------------------------------

const DEEP: usize = 100_000;

#[tokio::test(start_paused = true)]
async fn json_nested_100_000_deep_gets_an_error_reply_not_a_stack_overflow() {
    let open_arrays = "[".repeat(DEEP);
    let arrays = format!("{open_arrays}{}", "]".repeat(DEEP));
    let open_objects = r#"{"a":"#.repeat(DEEP);
    let objects = format!("{open_objects}1{}", "}".repeat(DEEP));
    let in_id = format!(r#"{{"jsonrpc":"2.0","id":{arrays},"method":"echo"}}"#);
    let in_method = format!(r#"{{"jsonrpc":"2.0","id":1,"method":{arrays}}}"#);
    let table = [
        (
            "arrays never closed",
            open_arrays.clone(),
            parse_error(&format!("EOF while parsing a list at line 1 column {DEEP}")),
        ),
        (
            "arrays closed: an array is a batch",
            arrays.clone(),
            invalid_request("batches are not supported"),
        ),
        (
            "objects never closed",
            open_objects.clone(),
            parse_error(&format!(
                "EOF while parsing a value at line 1 column {}",
                open_objects.len()
            )),
        ),
        (
            // Valid JSON, an object, but not a message: unknown members are skipped without recursion.
            "objects closed",
            objects.clone(),
            invalid_request("expected exactly one of method, result or error"),
        ),
        (
            "as the id",
            in_id,
            invalid_request("id must be an integer or a string"),
        ),
        (
            "as the method",
            in_method,
            invalid_request("invalid type: sequence, expected a string at line 1 column 33"),
        ),
    ];
    for framing in FRAMINGS {
        let probe = Probe::new();
        let mut conn = connect(&probe, framing);
        let cases: Vec<Case> = table
            .iter()
            .map(|(name, body, reply)| Case::framed(framing, name, body.as_bytes(), reply.clone()))
            .collect();
        run(&mut conn, &cases).await;
        assert_eq!(probe.started(), cases.len(), "only NEXT ran");
        let n = cases.len() as u64;
        assert_eq!(close_quietly(conn, &probe).await, completed(n));
    }
}

#[tokio::test(start_paused = true)]
async fn deeply_nested_params_stay_raw_and_the_handler_that_reads_them_gets_invalid_params() {
    for framing in FRAMINGS {
        // A handler that answers its params parsed (the probe would hide the parse error).
        let service = ServiceBuilder::new()
            .layer(CancelStack::lsp())
            .service(service_fn(|req: Request| async move {
                req.params_as::<Value>().map_err(BoxError::from)
            }));
        let mut conn = Conn::start(Server::new(service), framing);
        let deep = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"read","params":{}1{}}}"#,
            "[".repeat(DEEP),
            "]".repeat(DEEP)
        );
        conn.send(&deep).await;
        // serde_json's recursion limit (128) is the clear error, as the handler's -32602.
        conn.expect(r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"Invalid params: recursion limit exceeded at line 1 column 128"}}"#)
            .await;
        // Nested as deep as the limit allows, it is read and answered whole.
        let nested = format!("{}1{}", "[".repeat(127), "]".repeat(127));
        conn.send(&format!(
            r#"{{"jsonrpc":"2.0","id":2,"method":"read","params":{nested}}}"#
        ))
        .await;
        conn.expect(&format!(r#"{{"jsonrpc":"2.0","id":2,"result":{nested}}}"#))
            .await;
        let registry = conn.registry().clone();
        conn.finish_quiet().await;
        assert_eq!(Counts::of(&registry), completed(2));
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Content-Length headers
// ---------------------------------------------------------------------------------------------------------------

const BODY: &str = r#"{"jsonrpc":"2.0","id":1,"method":"echo","params":"body"}"#;
const BODY_REPLY: &str = r#"{"jsonrpc":"2.0","id":1,"result":"body"}"#;

fn header_error(detail: &str) -> String {
    parse_error(&format!("invalid frame header: {detail}"))
}

#[tokio::test(start_paused = true)]
async fn content_length_headers_that_are_wrong_or_missing() {
    let len = BODY.len();
    let cases = [
        Case::new(
            "2^64: does not fit, refused before anything is allocated",
            "Content-Length: 18446744073709551616\r\n\r\n",
            vec![header_error(
                r#"invalid Content-Length "18446744073709551616""#,
            )],
        ),
        Case::new(
            "negative",
            "Content-Length: -1\r\n\r\n",
            vec![header_error(r#"invalid Content-Length "-1""#)],
        ),
        Case::new(
            "empty",
            "Content-Length: \r\n\r\n",
            vec![header_error(r#"invalid Content-Length """#)],
        ),
        Case::new(
            "hexadecimal",
            "Content-Length: 0x10\r\n\r\n",
            vec![header_error(r#"invalid Content-Length "0x10""#)],
        ),
        Case::new(
            "not UTF-8",
            &b"Content-Length: 2\xff\r\n\r\n"[..],
            vec![header_error("header is not UTF-8")],
        ),
        Case::new(
            "zero: an empty body is not JSON",
            "Content-Length: 0\r\n\r\n",
            vec![parse_error("EOF while parsing a value at line 1 column 0")],
        ),
        Case::new(
            "blank lines between frames are tolerated",
            "\r\n\r\n\r\n",
            vec![],
        ),
        Case::new(
            "lower case, spaces around the value, unknown headers: accepted",
            format!("content-length:   {len}  \r\nX-Unknown: 1\r\n\r\n{BODY}"),
            vec![BODY_REPLY.to_owned()],
        ),
        Case::new(
            "duplicated, the last one right: the last one counts (as in vscode-jsonrpc)",
            format!("Content-Length: 5\r\nContent-Length: {len}\r\n\r\n{BODY}"),
            vec![BODY_REPLY.to_owned()],
        ),
        // From here on the body of the broken frame is read as the start of the next header block: that block
        // is unreadable too, and reading resumes at its `Content-Length` (as tower-lsp does), so the frame after
        // it is read.
        Case::new(
            "duplicated, the last one too small",
            format!("Content-Length: {len}\r\nContent-Length: 5\r\n\r\n{BODY}"),
            vec![
                parse_error("EOF while parsing a string at line 1 column 5"),
                header_error("missing Content-Length"),
            ],
        ),
        Case::new(
            "smaller than the body: the rest is garbage before the next frame",
            format!("Content-Length: 10\r\n\r\n{BODY}"),
            vec![
                parse_error("EOF while parsing an object at line 1 column 10"),
                header_error("missing Content-Length"),
            ],
        ),
        Case::new(
            "missing, with a body",
            format!("Content-Type: application/json\r\n\r\n{BODY}"),
            vec![
                header_error("missing Content-Length"),
                header_error("missing Content-Length"),
            ],
        ),
        Case::new(
            "a header line without a colon, with a body",
            format!("Content-Length {len}\r\n\r\n{BODY}"),
            vec![
                header_error(&format!(r#"malformed header line "Content-Length {len}""#)),
                header_error("missing Content-Length"),
            ],
        ),
        Case::new(
            "a header line without a colon before a good one",
            format!("garbage\r\nContent-Length: {len}\r\n\r\n{BODY}"),
            vec![
                header_error(r#"malformed header line "garbage""#),
                BODY_REPLY.to_owned(),
            ],
        ),
        Case::new(
            "garbage between frames",
            "%$#garbage{}",
            vec![header_error("missing Content-Length")],
        ),
        Case::new(
            "garbage with line breaks between frames",
            "garbage\r\n\r\n",
            vec![header_error(r#"malformed header line "garbage""#)],
        ),
    ];
    let probe = Probe::new();
    let mut conn = Conn::lsp(&probe);
    run(&mut conn, &cases).await;
    assert_eq!(
        probe.started(),
        cases.len() + 3,
        "NEXT, and the three good bodies"
    );
    let n = probe.started() as u64;
    assert_eq!(close_quietly(conn, &probe).await, completed(n));
}

#[tokio::test(start_paused = true)]
async fn content_length_a_very_long_header_line_is_refused_in_bounded_memory() {
    let probe = Probe::new();
    let mut conn = Conn::lsp(&probe);
    // 9008 bytes with no header terminator: over the 8 KiB a header block may take. The codec searches the first
    // 8 KiB + 1, drops them but their last 3 (which could start a terminator) and says so once, whether the bytes
    // came in one write or many.
    let line = format!("X-Long: {}", "a".repeat(9000));
    conn.send_raw(line.as_bytes()).await;
    conn.expect(&header_error("no header terminator within 8 KiB"))
        .await;
    // The line ends: what is left of it is a header line without a colon; reading resumes at the frame's own
    // `Content-Length`.
    let left = "a".repeat(line.len() - (8 * 1024 - 2));
    conn.send_raw(b"\r\n").await;
    conn.send(NEXT).await;
    conn.expect(&header_error(&format!("malformed header line \"{left}\"")))
        .await;
    conn.expect(NEXT_REPLY).await;
    assert_eq!(close_quietly(conn, &probe).await, completed(1));
}

#[tokio::test(start_paused = true)]
async fn content_length_larger_than_the_body_waits_then_is_truncated_at_eof() {
    let probe = Probe::new();
    let mut conn = Conn::lsp(&probe);
    hang_1(&mut conn, &probe).await;
    // 1000 bytes announced, fewer sent: the server waits for the rest; the next frame becomes part of this body.
    conn.send_raw(format!("Content-Length: 1000\r\n\r\n{BODY}").as_bytes())
        .await;
    conn.send(NEXT).await;
    let silence = tokio::time::timeout(std::time::Duration::from_secs(60), conn.recv()).await;
    assert!(silence.is_err(), "no reply while the body is incomplete");
    assert_eq!(probe.started(), 1);
    // The peer hangs up: the frame is cut off (-32700, JSON-RPC's reply to JSON it cannot parse), and the
    // request in flight is cancelled with reason Disconnect and answered as LSP answers a cancelled request.
    let registry = conn.registry().clone();
    let rest = conn.finish().await;
    assert_eq!(
        rest,
        [
            parse_error("stream ended in the middle of a frame"),
            CANCELLED_1.to_owned()
        ]
    );
    assert_eq!(
        probe.ended(),
        [Ended::stopped(1, "hang", Some(CancelReason::Disconnect))]
    );
    assert_eq!(Counts::of(&registry), cancelled(1));
}

// ---------------------------------------------------------------------------------------------------------------
// Oversize frames
// ---------------------------------------------------------------------------------------------------------------

fn limited(probe: &Probe, framing: Framing, limit: usize) -> Conn {
    Conn::serve_configured(CancelStack::lsp(), probe, framing, |server| {
        server.max_frame_size(limit)
    })
}

/// A request of exactly `len` bytes, and its params.
fn request_of_len(id: u32, len: usize) -> (String, String) {
    let bare = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"echo","params":""}}"#);
    let params = "x".repeat(len - bare.len());
    let request = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"echo","params":"{params}"}}"#);
    (request, params)
}

#[tokio::test(start_paused = true)]
async fn a_frame_at_the_limit_is_read_and_one_byte_over_is_refused() {
    for framing in FRAMINGS {
        let probe = Probe::new();
        let mut conn = limited(&probe, framing, 100);
        let (at, params) = request_of_len(1, 100);
        let (over, _) = request_of_len(2, 101);
        let cases = [
            Case::new(
                "at the limit",
                framed(at.as_bytes(), framing),
                vec![format!(r#"{{"jsonrpc":"2.0","id":1,"result":"{params}"}}"#)],
            ),
            Case::new(
                "one byte over",
                framed(over.as_bytes(), framing),
                vec![invalid_request(
                    "frame of 101 bytes exceeds the limit of 100 bytes",
                )],
            ),
        ];
        run(&mut conn, &cases).await;
        assert_eq!(close_quietly(conn, &probe).await, completed(3));
    }
}

#[tokio::test(start_paused = true)]
async fn a_content_length_of_2_pow_63_is_skipped_never_allocated() {
    for announced in ["9223372036854775808", "18446744073709551615"] {
        let probe = Probe::new();
        let mut conn = Conn::lsp(&probe);
        hang_1(&mut conn, &probe).await;
        // A buffer of that size cannot be allocated: the server would abort. It refuses the frame by its
        // header, and skips the announced bytes as they arrive, without keeping them.
        conn.send_raw(format!("Content-Length: {announced}\r\n\r\n").as_bytes())
            .await;
        conn.expect(&invalid_request(&format!(
            "frame of {announced} bytes exceeds the limit of {LIMIT} bytes"
        )))
        .await;
        // Whatever follows is the announced body: skipped, never answered, never run.
        conn.send(NEXT).await;
        conn.send_raw(&vec![b'x'; 200_000]).await;
        // The request in flight still settles: the peer hangs up, it is cancelled (Disconnect) and answered.
        // The end of the stream inside a skipped frame is not reported again.
        let registry = conn.registry().clone();
        let rest = conn.finish().await;
        assert_eq!(rest, [CANCELLED_1]);
        assert_eq!(probe.started(), 1, "NEXT was skipped");
        assert_eq!(probe.running(), 0);
        assert_eq!(Counts::of(&registry), cancelled(1));
    }
}

#[tokio::test(start_paused = true)]
async fn ndjson_a_line_that_never_ends_is_refused_once_and_dropped_as_it_streams() {
    let probe = Probe::new();
    let mut conn = limited(&probe, Framing::Ndjson, 100);
    hang_1(&mut conn, &probe).await;
    conn.send_raw(br#"{"jsonrpc":"2.0","id":2,"method":"echo","params":""#)
        .await;
    for _ in 0..100 {
        conn.send_raw(&[b'y'; 1000]).await;
    }
    conn.expect(&invalid_request("frame exceeds the limit of 100 bytes"))
        .await;
    // The end of the stream inside it: nothing more is said about it, and the request in flight is cancelled.
    let registry = conn.registry().clone();
    let rest = conn.finish().await;
    assert_eq!(rest, [CANCELLED_1]);
    assert_eq!(
        probe.ended(),
        [Ended::stopped(1, "hang", Some(CancelReason::Disconnect))]
    );
    assert_eq!(Counts::of(&registry), cancelled(1));
}

// ---------------------------------------------------------------------------------------------------------------
// The end of the stream
// ---------------------------------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_frame_cut_off_by_the_end_of_the_stream_ends_the_connection_cleanly() {
    let cut = parse_error("stream ended in the middle of a frame");
    // (framing, the bytes before the end, what the server still writes). LSP answers the request in flight
    // with -32800; MCP sends nothing for a cancelled request.
    let table: Vec<(Framing, Vec<u8>, Vec<String>)> = vec![
        (
            Framing::ContentLength,
            b"Content-Len".to_vec(),
            vec![cut.clone(), CANCELLED_1.to_owned()],
        ),
        (
            Framing::ContentLength,
            b"Content-Length: 57\r\n".to_vec(),
            vec![cut.clone(), CANCELLED_1.to_owned()],
        ),
        (
            Framing::ContentLength,
            b"Content-Length: 57\r\n\r\n".to_vec(),
            vec![cut.clone(), CANCELLED_1.to_owned()],
        ),
        (
            Framing::ContentLength,
            b"Content-Length: 57\r\n\r\n{\"jsonrpc\":\"2.0\",\"id\":2,".to_vec(),
            vec![cut.clone(), CANCELLED_1.to_owned()],
        ),
        (
            // A last line without its newline is still read whole; cut inside the JSON, it is a parse error.
            Framing::Ndjson,
            br#"{"jsonrpc":"2.0","id":2,"method":"ec"#.to_vec(),
            vec![parse_error(
                "EOF while parsing a string at line 1 column 36",
            )],
        ),
        (
            Framing::Ndjson,
            b"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"echo\",\"params\":\"\xe2\x82".to_vec(),
            vec![parse_error(
                "EOF while parsing a string at line 1 column 52",
            )],
        ),
        (
            // Whole but for its newline: it is served, and answered before the connection closes.
            Framing::Ndjson,
            br#"{"jsonrpc":"2.0","id":2,"method":"echo","params":"last"}"#.to_vec(),
            vec![r#"{"jsonrpc":"2.0","id":2,"result":"last"}"#.to_owned()],
        ),
        (Framing::Ndjson, b"   ".to_vec(), vec![]),
    ];
    for (framing, tail, expected) in table {
        let probe = Probe::new();
        let mut conn = connect(&probe, framing);
        hang_1(&mut conn, &probe).await;
        conn.send_raw(&tail).await;
        let registry = conn.registry().clone();
        let rest = conn.finish().await;
        let shown = String::from_utf8_lossy(&tail);
        assert_eq!(rest, expected, "{framing:?} {shown}");
        assert_eq!(
            probe.ended_of(1),
            Some(Ended::stopped(1, "hang", Some(CancelReason::Disconnect))),
            "{shown}"
        );
        assert_eq!(probe.running(), 0);
        let served = u64::from(probe.started() == 2);
        assert_eq!(
            Counts::of(&registry),
            Counts {
                registered: 1 + served,
                completed: served,
                cancelled: 1,
                ..Counts::default()
            },
            "{shown}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_peer_that_sends_half_a_frame_then_vanishes() {
    for framing in FRAMINGS {
        let probe = Probe::new();
        let mut conn = connect(&probe, framing);
        for id in 1..=2 {
            conn.send(&format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"hang"}}"#))
                .await;
            probe.wait_started(id).await;
        }
        let frame = framed(BODY.as_bytes(), framing);
        conn.send_raw(&frame[..frame.len() / 2]).await;
        let registry = conn.registry().clone();
        // Both directions gone: the replies cannot be written, which is not an error of the server.
        conn.vanish().await;
        let mut ended = probe.ended();
        ended.sort_by_key(|e| e.id.clone());
        assert_eq!(
            ended,
            [1, 2].map(|id| Ended::stopped(id, "hang", Some(CancelReason::Disconnect)))
        );
        assert_eq!(Counts::of(&registry), cancelled(2));
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Cancels of the wrong shape
// ---------------------------------------------------------------------------------------------------------------

/// A dialect under test: its connection, its cancel's method and id member, and how it answers a cancelled
/// request (`None`: no reply, MCP).
struct Dialect {
    name: &'static str,
    connect: fn(&Probe) -> Conn,
    method: &'static str,
    key: &'static str,
    cancelled: Option<&'static str>,
    /// The other dialects' cancels, which this one does not know: plain notifications for the service.
    foreign: [&'static str; 2],
}

const DIALECTS: [Dialect; 4] = [
    Dialect {
        name: "lsp",
        connect: Conn::lsp,
        method: "$/cancelRequest",
        key: "id",
        cancelled: Some(CANCELLED_1),
        foreign: [
            r#"{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":1}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}"#,
        ],
    },
    Dialect {
        name: "acp",
        connect: Conn::acp,
        method: "$/cancel_request",
        key: "requestId",
        cancelled: Some(CANCELLED_1),
        foreign: [
            r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":1}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}"#,
        ],
    },
    Dialect {
        name: "acp draft",
        connect: Conn::acp_draft,
        method: "$/cancelRequest",
        key: "id",
        cancelled: Some(
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32800,"message":"Cancelled"}}"#,
        ),
        foreign: [
            r#"{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":1}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}"#,
        ],
    },
    Dialect {
        name: "mcp",
        connect: Conn::mcp,
        method: "notifications/cancelled",
        key: "requestId",
        cancelled: None,
        foreign: [
            r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":1}}"#,
            r#"{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":1}}"#,
        ],
    },
];

impl Dialect {
    /// One case per input, framed for `conn`, each getting `replies` before [`NEXT`]'s reply.
    fn cases(&self, conn: &Conn, inputs: &[impl AsRef<str>], replies: &[String]) -> Vec<Case> {
        inputs
            .iter()
            .map(|input| {
                let input = input.as_ref();
                Case::new(
                    format!("{} {input}", self.name),
                    conn.frame(input),
                    replies.to_vec(),
                )
            })
            .collect()
    }

    /// The request [`with_request_1_in_flight`](Self::with_request_1_in_flight) started has not ended.
    fn assert_request_1_runs(&self, probe: &Probe) {
        assert_eq!(
            probe.ended_of(1),
            None,
            "{}: request 1 still runs",
            self.name
        );
    }

    /// A connection (initialized, for the ACP draft, whose cancels only count after `initialize`) with request 1
    /// hanging.
    async fn with_request_1_in_flight(&self, probe: &Probe) -> Conn {
        let mut conn = (self.connect)(probe);
        conn.send(r#"{"jsonrpc":"2.0","id":0,"method":"initialize"}"#)
            .await;
        conn.expect(r#"{"jsonrpc":"2.0","id":0,"result":{"capabilities":{}}}"#)
            .await;
        hang_1(&mut conn, probe).await;
        conn
    }

    /// Cancel request 1 with a well-formed cancel carrying extra members (which must not matter), assert the
    /// reply and the handler stopped, close, and check the counters.
    async fn cancel_and_close(&self, mut conn: Conn, probe: &Probe, extra: u64) {
        let cancel = format!(
            r#"{{"jsonrpc":"2.0","method":"{}","params":{{"{}":1,"reason":"done","_meta":{{"x":1}},"extra":[true]}}}}"#,
            self.method, self.key
        );
        conn.send(&cancel).await;
        conn.send(NEXT).await;
        if let Some(reply) = self.cancelled {
            conn.expect(reply).await;
        }
        conn.expect(NEXT_REPLY).await;
        let reason = Some(CancelReason::peer(
            (self.name == "mcp").then(|| "done".to_owned()),
        ));
        assert_eq!(
            probe.ended_of(1),
            Some(Ended::stopped(1, "hang", reason)),
            "{}",
            self.name
        );
        let counts = close_quietly(conn, probe).await;
        // initialize is never cancellable, so it is not registered.
        assert_eq!(
            counts,
            Counts {
                registered: 1 + extra,
                completed: extra,
                cancelled: 1,
                ..Counts::default()
            },
            "{}",
            self.name
        );
    }
}

#[tokio::test(start_paused = true)]
async fn malformed_cancels_are_consumed_in_silence_and_the_request_runs_on() {
    for dialect in &DIALECTS {
        let (method, key) = (dialect.method, dialect.key);
        let cancel = |params: &str| format!(r#"{{"jsonrpc":"2.0","method":"{method}"{params}}}"#);
        let mut inputs = vec![
            cancel(r#","params":{}"#),
            cancel(&format!(r#","params":{{"{key}":true}}"#)),
            cancel(&format!(r#","params":{{"{key}":null}}"#)),
            cancel(&format!(r#","params":{{"{key}":1.5}}"#)),
            cancel(&format!(r#","params":{{"{key}":1.0}}"#)),
            cancel(&format!(r#","params":{{"{key}":{{"id":1}}}}"#)),
            cancel(&format!(r#","params":{{"{key}":[1]}}"#)),
            cancel(&format!(r#","params":{{"{key}":9223372036854775808}}"#)),
            cancel(&format!(r#","params":{{"{key}":1,"{key}":1}}"#)),
            cancel(&format!(r#","params":{{"{}":1}}"#, other_key(key))),
            cancel(r#","params":[1]"#),
            cancel(r#","params":[{"id":1,"requestId":1}]"#),
            cancel(r#","params":1"#),
            cancel(r#","params":"1""#),
            cancel(r#","params":null"#),
            cancel(""),
        ];
        if dialect.name == "mcp" {
            // The reason must be a string: a cancel with another one is malformed as a whole.
            inputs.push(cancel(r#","params":{"requestId":1,"reason":5}"#));
        }
        let probe = Probe::new();
        let mut conn = dialect.with_request_1_in_flight(&probe).await;
        let cases = dialect.cases(&conn, &inputs, &[]);
        run(&mut conn, &cases).await;
        dialect.assert_request_1_runs(&probe);
        assert!(conn.registry().contains(&1.into()));
        assert_eq!(
            probe.notifications(),
            [],
            "{}: consumed by the cancel layer",
            dialect.name
        );
        assert_eq!(conn.counts().early_cancels, 0, "{}", dialect.name);
        dialect
            .cancel_and_close(conn, &probe, cases.len() as u64 + 1)
            .await;
    }
}

fn other_key(key: &str) -> &'static str {
    if key == "id" {
        "requestId"
    } else {
        "id"
    }
}

#[tokio::test(start_paused = true)]
async fn another_dialects_cancel_is_a_plain_notification_for_the_service() {
    for dialect in &DIALECTS {
        let probe = Probe::new();
        let mut conn = dialect.with_request_1_in_flight(&probe).await;
        let cases = dialect.cases(&conn, &dialect.foreign, &[]);
        run(&mut conn, &cases).await;
        dialect.assert_request_1_runs(&probe);
        let seen: Vec<String> = probe
            .notifications()
            .into_iter()
            .map(|(method, params)| format!("{method} {params}"))
            .collect();
        let sent: Vec<String> = dialect
            .foreign
            .iter()
            .map(|input| {
                let value: Value = serde_json::from_str(input).unwrap();
                format!("{} {}", value["method"].as_str().unwrap(), value["params"])
            })
            .collect();
        assert_eq!(seen, sent, "{}", dialect.name);
        dialect.cancel_and_close(conn, &probe, 3).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_cancel_sent_as_a_request_is_an_ordinary_request_and_cancels_nothing() {
    for dialect in &DIALECTS {
        let probe = Probe::new();
        let mut conn = dialect.with_request_1_in_flight(&probe).await;
        let request = format!(
            r#"{{"jsonrpc":"2.0","id":9,"method":"{}","params":{{"{}":1}}}}"#,
            dialect.method, dialect.key
        );
        // The service has no such request method: -32601, as LSP prescribes for an unknown `$/` request.
        let reply = format!(
            r#"{{"jsonrpc":"2.0","id":9,"error":{{"code":-32601,"message":"Method not found: {}"}}}}"#,
            dialect.method
        );
        let cases = [Case::new(dialect.name, conn.frame(&request), vec![reply])];
        run(&mut conn, &cases).await;
        dialect.assert_request_1_runs(&probe);
        assert_eq!(
            probe.ended_of(9).map(|e| e.end),
            Some(End::Finished),
            "{}",
            dialect.name
        );
        dialect.cancel_and_close(conn, &probe, 3).await;
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Batches
// ---------------------------------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn batches_are_refused_whole_and_the_cancels_inside_cancel_nothing() {
    for dialect in &DIALECTS {
        let (method, key) = (dialect.method, dialect.key);
        let cancel = format!(r#"{{"jsonrpc":"2.0","method":"{method}","params":{{"{key}":1}}}}"#);
        let request = r#"{"jsonrpc":"2.0","id":2,"method":"echo","params":"in a batch"}"#;
        let batches = [
            format!("[{request},{cancel}]"),
            format!("[{cancel}]"),
            format!("[{cancel},{cancel}]"),
            format!("[{request}]"),
            "[]".to_owned(),
            "[1,2]".to_owned(),
            "  [ ]  ".to_owned(),
        ];
        let probe = Probe::new();
        let mut conn = dialect.with_request_1_in_flight(&probe).await;
        let cases = dialect.cases(
            &conn,
            &batches,
            &[invalid_request("batches are not supported")],
        );
        run(&mut conn, &cases).await;
        dialect.assert_request_1_runs(&probe);
        assert_eq!(
            probe.ended_of(2),
            None,
            "{}: nothing in a batch ran",
            dialect.name
        );
        assert!(probe.notifications().is_empty());
        assert_eq!(conn.counts().early_cancels, 0);
        dialect
            .cancel_and_close(conn, &probe, cases.len() as u64 + 1)
            .await;
    }
}

#[tokio::test(start_paused = true)]
async fn an_array_is_never_read_as_a_request_by_position() {
    // serde's derived Deserialize reads a struct from an array too, member by member in declaration order:
    // `["2.0", 5, "echo"]` must not be served as request 5.
    for framing in FRAMINGS {
        let probe = Probe::new();
        let mut conn = connect(&probe, framing);
        let cases = [
            r#"["2.0",5,"echo","by position"]"#,
            r#"["2.0",6,"$/cancelRequest",{"id":1}]"#,
        ]
        .map(|input| {
            let reply = invalid_request("batches are not supported");
            Case::framed(framing, input, input.as_bytes(), reply)
        });
        run(&mut conn, &cases).await;
        assert_eq!(probe.started(), cases.len(), "only NEXT ran");
        assert_eq!(close_quietly(conn, &probe).await, completed(2));
    }
}

#[tokio::test(start_paused = true)]
async fn an_array_is_never_read_as_a_reply_by_position() {
    let probe = Probe::new();
    let (mut conn, peer) = Conn::with_peer(
        CancelStack::lsp(),
        &probe,
        Framing::ContentLength,
        tower_cancel::dialect::Lsp,
    );
    let call = tokio::spawn(peer.request("workspace/configuration", Value::Null));
    conn.expect(r#"{"jsonrpc":"2.0","id":0,"method":"workspace/configuration"}"#)
        .await;
    // `[jsonrpc, id, method, params, result]` by position would be a reply to call 0.
    conn.send(r#"["2.0",0,null,null,"by position"]"#).await;
    conn.expect(&invalid_request("batches are not supported"))
        .await;
    assert_eq!(peer.stats().pending, 1, "call 0 still waits");
    conn.send(r#"{"jsonrpc":"2.0","id":0,"result":"as an object"}"#)
        .await;
    assert_eq!(
        call.await.unwrap(),
        Ok(Value::String("as an object".into()))
    );
    assert_eq!(peer.stats().pending, 0);
    assert_eq!(close_quietly(conn, &probe).await, Counts::default());
    assert!(matches!(
        peer.request("late", Value::Null).await,
        Err(PeerError::Closed)
    ));
}
