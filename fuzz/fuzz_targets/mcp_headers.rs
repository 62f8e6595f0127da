//! The checks an MCP Streamable HTTP endpoint makes of a POST's headers: which revision it speaks and whether a
//! stateless request's headers match its body (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name` with its
//! `=?base64?...?=` values), the version a session POST may name, and what `Accept` allows.
//!
//! The input is lines: `MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`, `Accept`, then the body (the rest). A
//! line that is not a valid header value leaves its header out.
//!
//! # Invariants checked
//!
//! - A header value without the markers decodes to itself; one with them decodes exactly when its inside is
//!   canonical base64 of UTF-8, and then encodes back to it. Any text, encoded as the revision tells clients to,
//!   is a valid header value and decodes back to the text.
//! - A stateless request is taken only with the version header equal to a version this server speaks, the
//!   method header equal to its method, and (for `tools/call`, `prompts/get`, `resources/read`) the decoded
//!   name header equal to its name or uri; a refusal is a 400 with `HeaderMismatch`, `UnsupportedProtocolVersion`
//!   or invalid params, and a message that stays small. The same request with headers a client would send (its
//!   name from the input, encoded) is taken; with another name, refused.
//! - A session POST's version header is taken exactly when it names a session revision.
//! - `Accept` reads the same in capitals, always allows something once `application/json` or `text/event-stream` is added to it, and an SSE
//!   stream once `text/event-stream` is.
//! - Classifying holds at most `peak::allocation_bound` of the input's length.

#![no_main]

use base64::{engine::general_purpose::STANDARD, Engine};
use http::{header, HeaderMap, HeaderValue, StatusCode};
use libfuzzer_sys::fuzz_target;
use serde_json::{json, Value};
use tower_cancel::Message;
use tower_cancel_fuzz::peak::{bounded, Counting};
use tower_cancel_http::{
    fuzzing::mcp::{accepts, check_session_version, classify, decode_header_value},
    mcp::{HEADER_MISMATCH, SESSION_VERSIONS, STATELESS_VERSIONS, UNSUPPORTED_PROTOCOL_VERSION},
};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const PREFIX: &str = "=?base64?";
const SUFFIX: &str = "?=";
const INVALID_PARAMS: i64 = -32602;

fuzz_target!(|data: &[u8]| {
    let mut lines = data.splitn(5, |&byte| byte == b'\n');
    let mut next = || lines.next().unwrap_or_default();
    let (version, method, name, accept, body) = (next(), next(), next(), next(), next());

    for line in [version, method, name, accept] {
        if let Ok(value) = HeaderValue::from_bytes(line) {
            if let Ok(text) = value.to_str() {
                check_decode(text);
            }
        }
        check_encode(&String::from_utf8_lossy(line));
    }

    let mut headers = HeaderMap::new();
    for (header, line) in [
        ("mcp-protocol-version", version),
        ("mcp-method", method),
        ("mcp-name", name),
        ("accept", accept),
    ] {
        if let Ok(value) = HeaderValue::from_bytes(line) {
            headers.insert(header, value);
        }
    }
    check_session(&headers);
    check_accept(&headers);
    if let Ok(message) = Message::from_slice(body) {
        check_classify(&headers, &message, data.len());
    }
    check_matching_headers(&String::from_utf8_lossy(name));
});

/// How the revision tells clients to send a value: as it is when it is plain visible ASCII without surrounding
/// space and does not wear the markers, else base64 of its UTF-8 between them.
fn encode(value: &str) -> String {
    let plain = value.bytes().all(|byte| (0x20..=0x7e).contains(&byte))
        && value.trim() == value
        && !(value.starts_with(PREFIX) && value.ends_with(SUFFIX));
    if plain {
        value.to_owned()
    } else {
        format!("{PREFIX}{}{SUFFIX}", STANDARD.encode(value))
    }
}

fn check_decode(value: &str) {
    let decoded = decode_header_value(value);
    let Some(inside) = value
        .strip_prefix(PREFIX)
        .and_then(|rest| rest.strip_suffix(SUFFIX))
    else {
        assert_eq!(
            decoded.ok().as_deref(),
            Some(value),
            "a plain value changed"
        );
        return;
    };
    let reference = STANDARD
        .decode(inside)
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok());
    match decoded {
        Ok(text) => {
            assert_eq!(Some(&text), reference.as_ref(), "{value:?}");
            assert_eq!(
                STANDARD.encode(&text),
                inside,
                "{value:?} does not encode back"
            );
        }
        Err((status, error)) => {
            assert_eq!(reference, None, "{value:?} refused");
            assert_eq!(
                (status, error.code),
                (StatusCode::BAD_REQUEST, HEADER_MISMATCH)
            );
        }
    }
}

fn check_encode(text: &str) {
    let encoded = encode(text);
    let value = HeaderValue::from_str(&encoded).expect("an encoded value is a header value");
    let value = value.to_str().expect("and visible ASCII");
    let decoded = decode_header_value(value).map_err(|(_, error)| error);
    assert_eq!(decoded.as_deref(), Ok(text), "{text:?} sent as {encoded:?}");
}

fn header<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name).and_then(|value| value.to_str().ok())
}

fn check_classify(headers: &HeaderMap, message: &Message, input_len: usize) {
    let verdict = bounded(input_len, || classify(headers, message));
    let version_header = header(headers, "mcp-protocol-version");
    let request = match message {
        Message::Request(request) => Some(request),
        Message::Response(_) => None,
    };
    let params: Value = request.and_then(|r| r.params_as().ok()).unwrap_or_default();
    let meta_version = params
        .pointer("/_meta/io.modelcontextprotocol~1protocolVersion")
        .and_then(Value::as_str);
    match verdict {
        // (Not checked: that a session request has no `_meta` version. One whose `_meta` names it twice is
        // refused by the typed reading, and is read as a session request; `Value` takes the last.)
        Ok(None) => assert!(!version_header.is_some_and(|v| STATELESS_VERSIONS.contains(&v))),
        Ok(Some(version)) => {
            let Some(request) = request.filter(|r| r.id().is_some()) else {
                // A notification or a response of the revision: no header rules (see `classify`).
                return;
            };
            assert!(
                STATELESS_VERSIONS.contains(&version.as_str()),
                "{version:?}"
            );
            assert_eq!(version_header, Some(version.as_str()));
            // From the params' `_meta`, which only an object has.
            assert_eq!(meta_version, Some(version.as_str()), "{params}");
            assert_eq!(header(headers, "mcp-method"), Some(request.method()));
            let named = match request.method() {
                "tools/call" | "prompts/get" => Some("name"),
                "resources/read" => Some("uri"),
                _ => None,
            };
            if let Some(field) = named {
                let sent = header(headers, "mcp-name").expect("a name header");
                let decoded = decode_header_value(sent).expect("a name header that decodes");
                assert_eq!(
                    params.get(field).and_then(Value::as_str),
                    Some(decoded.as_str())
                );
            }
        }
        Err((status, error)) => {
            assert_eq!(status, StatusCode::BAD_REQUEST);
            assert!(
                [
                    HEADER_MISMATCH,
                    UNSUPPORTED_PROTOCOL_VERSION,
                    INVALID_PARAMS
                ]
                .contains(&error.code),
                "{error:?}"
            );
            // It quotes header values and body values, each once: never more than the input and some words.
            assert!(error.message.len() <= 2 * input_len + 256, "{error:?}");
        }
    }
}

/// A `tools/call` named `name` from the input, with the headers a client of the revision sends: taken; with the
/// name header of another name: refused as a mismatch.
fn check_matching_headers(name: &str) {
    let version = STATELESS_VERSIONS[0];
    let body = json!({
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": name,
            "arguments": {},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": version,
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    });
    let message =
        Message::from_slice(&serde_json::to_vec(&body).expect("JSON")).expect("a request");
    let with_name = |sent: &str| {
        let mut headers = HeaderMap::new();
        headers.insert("mcp-protocol-version", HeaderValue::from_static(version));
        headers.insert("mcp-method", HeaderValue::from_static("tools/call"));
        headers.insert(
            "mcp-name",
            HeaderValue::from_str(&encode(sent)).expect("a header value"),
        );
        classify(&headers, &message)
    };
    match with_name(name) {
        Ok(Some(taken)) => assert_eq!(taken, version),
        other => panic!("a tools/call of {name:?} with a client's headers: {other:?}"),
    }
    match with_name(&format!("{name}x")) {
        Err((StatusCode::BAD_REQUEST, error)) => assert_eq!(error.code, HEADER_MISMATCH),
        other => panic!("a tools/call of {name:?} named otherwise in its header: {other:?}"),
    }
}

fn check_session(headers: &HeaderMap) {
    let verdict = check_session_version(headers);
    match headers.get("mcp-protocol-version") {
        None => assert!(verdict.is_ok()),
        Some(value) => {
            let session = value.to_str().is_ok_and(|v| SESSION_VERSIONS.contains(&v));
            match verdict {
                Ok(()) => assert!(session, "{value:?} taken for a session"),
                Err((status, error)) => {
                    assert!(!session, "{value:?} refused for a session");
                    assert_eq!(
                        (status, error.code),
                        (StatusCode::BAD_REQUEST, UNSUPPORTED_PROTOCOL_VERSION)
                    );
                }
            }
        }
    }
}

fn check_accept(headers: &HeaderMap) {
    let Some(accept) = headers.get(header::ACCEPT) else {
        assert_eq!(accepts(headers), Some(true), "no Accept: anything goes");
        return;
    };
    let Ok(accept) = accept.to_str() else {
        return;
    };
    let with = |added: &str| {
        let mut headers = headers.clone();
        let value = HeaderValue::from_str(&format!("{accept}, {added}")).expect("a header value");
        headers.insert(header::ACCEPT, value);
        accepts(&headers)
    };
    // Media types are case-insensitive (RFC 9110, section 8.3.1).
    let mut upper = headers.clone();
    let value = HeaderValue::from_str(&accept.to_ascii_uppercase()).expect("a header value");
    upper.insert(header::ACCEPT, value);
    assert_eq!(accepts(&upper), accepts(headers), "{accept:?} in capitals");
    assert_eq!(with("text/event-stream"), Some(true), "{accept:?}");
    assert!(with("application/json").is_some(), "{accept:?}");
}
