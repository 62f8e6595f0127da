//! Which MCP revision a POST speaks, and the checks the stateless revision makes of its headers.
//!
//! A request whose `params._meta` carries `io.modelcontextprotocol/protocolVersion`, or a POST whose
//! `MCP-Protocol-Version` header names a stateless revision (`2026-07-28`), is stateless. Everything else is the
//! session revision (`2025-11-25` and the earlier ones with sessions): an `initialize`, or a POST with
//! `Mcp-Session-Id`.

use base64::Engine;
use http::{HeaderMap, StatusCode};
use serde::{de::IgnoredAny, Deserialize};
use serde_json::{json, value::RawValue};
use tower_cancel::{ErrorObject, Message, Request};

use crate::body;

/// The stateless revisions this server speaks (each request carries its version; no session).
pub const STATELESS_VERSIONS: &[&str] = &["2026-07-28"];
/// The revisions with sessions this server speaks (`initialize` mints a session).
pub const SESSION_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26"];

/// The header that names the request's revision.
pub(crate) const PROTOCOL_VERSION: &str = "mcp-protocol-version";
const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
const META_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";

/// `HeaderMismatch`: the HTTP headers do not match the body, or a required one is missing.
pub const HEADER_MISMATCH: i64 = -32020;
/// `UnsupportedProtocolVersion`: the request's version is not one this server speaks.
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;

/// The revision a request is served under, as its handler sees it (in the request's extensions).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Revision {
    /// A stateless revision (`2026-07-28`): the version came with the request; a hang-up is its cancel.
    Stateless {
        /// The request's protocol version.
        version: String,
    },
    /// A revision with sessions (`2025-11-25` and earlier).
    Session {
        /// The session's id (none for the `initialize` that opens it, until it succeeds).
        id: Option<String>,
        /// The `MCP-Protocol-Version` header, if the client sent one.
        version: Option<String>,
    },
}

/// A refusal of a stateless request: 400 with the JSON-RPC error.
#[derive(Debug)]
pub(crate) struct Refusal {
    pub(crate) status: StatusCode,
    pub(crate) error: ErrorObject,
}

impl Refusal {
    fn bad(error: ErrorObject) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            error,
        }
    }

    fn mismatch(detail: String) -> Self {
        Self::bad(ErrorObject::new(
            HEADER_MISMATCH,
            format!("Header mismatch: {detail}"),
        ))
    }
}

/// What a request's `params` say of the revision, read once.
#[derive(Deserialize, Default)]
struct Params<'a> {
    #[serde(default, rename = "_meta")]
    meta: Option<Meta>,
    #[serde(default, borrow)]
    name: Option<&'a RawValue>,
    #[serde(default, borrow)]
    uri: Option<&'a RawValue>,
}

/// The keys of `_meta` the revision requires (the client's capabilities are only checked for presence).
#[derive(Deserialize)]
struct Meta {
    #[serde(default, rename = "io.modelcontextprotocol/protocolVersion")]
    version: Option<String>,
    #[serde(default, rename = "io.modelcontextprotocol/clientCapabilities")]
    capabilities: Option<IgnoredAny>,
}

/// The revision a POST speaks.
#[derive(Debug)]
pub(crate) enum Spoken {
    /// A revision with sessions.
    Session,
    /// The stateless revision, and its version (checked for a request; as sent for a notification).
    Stateless(String),
}

/// Which revision a POST speaks (see the module docs), and, for a stateless request, whether it keeps the
/// revision's rules: `MCP-Protocol-Version` equals `_meta`'s version, which this server speaks; `_meta` has the
/// required keys; `Mcp-Method` equals the method; `Mcp-Name` equals `params.name` or `params.uri` where the
/// method needs it. A notification of that revision has no header rules (the TS client POSTs
/// `notifications/cancelled` as it closes a listen stream, with only the version header).
pub(crate) fn classify(headers: &HeaderMap, message: &Message) -> Result<Spoken, Refusal> {
    let header_version = headers
        .get(PROTOCOL_VERSION)
        .and_then(|v| v.to_str().ok())
        .filter(|v| STATELESS_VERSIONS.contains(v));
    let Message::Request(request) = message else {
        return Ok(match header_version {
            Some(version) => Spoken::Stateless(version.to_owned()),
            None => Spoken::Session,
        });
    };
    let params = match request.params() {
        // Only an object has a `_meta`: serde's derived reading would also take an array, by position (see
        // `body::is_object`), and read its first element as `_meta`.
        Some(raw) if body::is_object(raw.get().as_bytes()) => {
            serde_json::from_str::<Params<'_>>(raw.get())
        }
        Some(_) | None => Ok(Params::default()),
    };
    let body_version = params
        .as_ref()
        .ok()
        .and_then(|p| p.meta.as_ref()?.version.clone());
    let version = match (body_version, header_version) {
        (None, None) => return Ok(Spoken::Session),
        (Some(version), _) => version,
        (None, Some(version)) => version.to_owned(),
    };
    if request.id().is_none() {
        return Ok(Spoken::Stateless(version));
    }
    let params = params.map_err(|e| Refusal::bad(ErrorObject::invalid_params(e)))?;
    check(headers, request, &params).map(Spoken::Stateless)
}

fn check(headers: &HeaderMap, request: &Request, params: &Params<'_>) -> Result<String, Refusal> {
    let meta = params
        .meta
        .as_ref()
        .ok_or_else(|| Refusal::bad(ErrorObject::invalid_params("params._meta is required")))?;
    let version = meta.version.as_deref().ok_or_else(|| {
        Refusal::bad(ErrorObject::invalid_params(format!(
            "_meta[\"{META_VERSION}\"] is required"
        )))
    })?;
    match header(headers, PROTOCOL_VERSION)? {
        None => {
            return Err(Refusal::mismatch(
                "the MCP-Protocol-Version header is missing".into(),
            ))
        }
        Some(value) if value != version => {
            return Err(Refusal::mismatch(format!(
                "MCP-Protocol-Version header value '{value}' does not match body value '{version}'"
            )))
        }
        Some(_) => {}
    }
    if !STATELESS_VERSIONS.contains(&version) {
        return Err(unsupported(version));
    }
    if meta.capabilities.is_none() {
        return Err(Refusal::bad(ErrorObject::invalid_params(format!(
            "_meta[\"{META_CAPABILITIES}\"] is required"
        ))));
    }
    match header(headers, "mcp-method")? {
        Some(method) if method == request.method() => {}
        Some(method) => {
            return Err(Refusal::mismatch(format!(
                "Mcp-Method header value '{method}' does not match body value '{}'",
                request.method()
            )))
        }
        None => return Err(Refusal::mismatch("the Mcp-Method header is missing".into())),
    }
    let named = match request.method() {
        "tools/call" | "prompts/get" => Some(("name", params.name)),
        "resources/read" => Some(("uri", params.uri)),
        _ => None,
    };
    if let Some((field, value)) = named {
        let body = value.and_then(|raw| serde_json::from_str::<String>(raw.get()).ok());
        let header = header(headers, "mcp-name")?.map(decode).transpose()?;
        match (header, body) {
            (Some(header), Some(body)) if header == body => {}
            (None, _) => return Err(Refusal::mismatch("the Mcp-Name header is missing".into())),
            (Some(header), body) => {
                return Err(Refusal::mismatch(format!(
                "Mcp-Name header value '{header}' does not match body value '{}' (params.{field})",
                body.unwrap_or_default()
            )))
            }
        }
    }
    Ok(version.to_owned())
}

/// A POST of the session revision: its `MCP-Protocol-Version` header, if it sent one, must name a revision with
/// sessions.
pub(crate) fn check_session_version(headers: &HeaderMap) -> Result<(), Refusal> {
    match headers.get(PROTOCOL_VERSION) {
        None => Ok(()),
        Some(version) => {
            let version = version.to_str().unwrap_or("(not text)");
            if SESSION_VERSIONS.contains(&version) {
                Ok(())
            } else {
                Err(unsupported(version))
            }
        }
    }
}

/// `UnsupportedProtocolVersion`, naming every version this server speaks.
pub(crate) fn unsupported(requested: &str) -> Refusal {
    let supported: Vec<&str> = STATELESS_VERSIONS
        .iter()
        .chain(SESSION_VERSIONS)
        .copied()
        .collect();
    Refusal::bad(
        ErrorObject::new(UNSUPPORTED_PROTOCOL_VERSION, "Unsupported protocol version")
            .with_data(json!({ "supported": supported, "requested": requested })),
    )
}

/// A header's value as text; a value that is not visible ASCII is a mismatch.
fn header<'h>(headers: &'h HeaderMap, name: &str) -> Result<Option<&'h str>, Refusal> {
    headers
        .get(name)
        .map(|value| {
            value
                .to_str()
                .map_err(|_| Refusal::mismatch(format!("the {name} header has invalid characters")))
        })
        .transpose()
}

/// Decode a `=?base64?...?=` value (how the revision sends values that are not plain ASCII).
pub(crate) fn decode(value: &str) -> Result<String, Refusal> {
    let Some(encoded) = value
        .strip_prefix("=?base64?")
        .and_then(|v| v.strip_suffix("?="))
    else {
        return Ok(value.to_owned());
    };
    base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .ok_or_else(|| {
            Refusal::mismatch(format!(
                "the header value '{value}' is not valid base64 UTF-8"
            ))
        })
}

/// The HTTP status of a stateless request's JSON reply: the revision maps some errors to 4xx.
pub(crate) fn stateless_status(reply: &tower_cancel::Response) -> StatusCode {
    match reply.outcome.as_ref().err().map(|error| error.code) {
        Some(-32601) => StatusCode::NOT_FOUND,
        Some(-32602 | HEADER_MISMATCH | -32021 | UNSUPPORTED_PROTOCOL_VERSION) => {
            StatusCode::BAD_REQUEST
        }
        _ => StatusCode::OK,
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    fn request(body: &str) -> Message {
        Message::from_slice(body.as_bytes()).unwrap()
    }

    fn stateless_headers(method: &'static str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(PROTOCOL_VERSION, HeaderValue::from_static("2026-07-28"));
        headers.insert("mcp-method", HeaderValue::from_static(method));
        headers
    }

    #[test]
    fn a_stateless_request_with_its_headers_is_taken() {
        let message = request(
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{
                "io.modelcontextprotocol/protocolVersion":"2026-07-28",
                "io.modelcontextprotocol/clientCapabilities":{}}}}"#,
        );
        let spoken = classify(&stateless_headers("tools/list"), &message);
        assert!(matches!(spoken, Ok(Spoken::Stateless(v)) if v == "2026-07-28"));
    }

    #[test]
    fn params_by_position_have_no_meta() {
        // Found by fuzzing: an array's first element was read as `_meta`, so this request was taken as one of the
        // stateless revision, its handler given params by position.
        let message = request(
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":[{
                "io.modelcontextprotocol/protocolVersion":"2026-07-28",
                "io.modelcontextprotocol/clientCapabilities":{}}]}"#,
        );
        match classify(&stateless_headers("tools/list"), &message) {
            Err(refusal) => assert_eq!(refusal.error.code, -32602, "{:?}", refusal.error),
            Ok(spoken) => panic!("taken as {spoken:?}"),
        }
        assert!(matches!(
            classify(&HeaderMap::new(), &message),
            Ok(Spoken::Session)
        ));
    }

    #[test]
    fn base64_header_values_decode_and_plain_ones_do_not() {
        assert_eq!(decode("=?base64?aMOpbGxv?=").unwrap(), "h\u{e9}llo");
        assert_eq!(decode("hello").unwrap(), "hello");
        assert_eq!(decode("=?base64?aMOpbGxv?").unwrap(), "=?base64?aMOpbGxv?");
        assert!(decode("=?base64?not base64?=").is_err());
        assert!(decode("=?base64?/w==?=").is_err(), "not UTF-8");
    }
}
