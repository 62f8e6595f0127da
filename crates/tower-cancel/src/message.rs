//! The JSON-RPC 2.0 message model: the wire types, and nothing of this crate's own.
//!
//! Params stay raw JSON ([`RawValue`]) until a handler asks for them with [`WireRequest::params_as`]: the layers of
//! this crate only ever look at the method and the id. The [`Request`](crate::Request) a handler gets wraps a
//! [`WireRequest`] with what the layers add to it (its connection, its context, extensions); a
//! [`Message`](crate::Message) is a request or a reply read off the wire.

use std::{borrow::Cow, fmt};

use serde::{
    de::{self, DeserializeOwned, Visitor},
    Deserialize, Deserializer, Serialize, Serializer,
};
use serde_json::{value::RawValue, Value};

/// The standard error codes of JSON-RPC 2.0 and of the protocols built on it.
pub mod code {
    /// Invalid JSON was received.
    pub const PARSE_ERROR: i64 = -32700;
    /// The JSON sent is not a valid request object (also: an id already in flight on the connection).
    pub const INVALID_REQUEST: i64 = -32600;
    /// The method does not exist or is not available.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// Invalid method parameters.
    pub const INVALID_PARAMS: i64 = -32602;
    /// Internal error (also: a handler that panicked).
    pub const INTERNAL_ERROR: i64 = -32603;
    /// LSP and ACP: the request was cancelled.
    pub const REQUEST_CANCELLED: i64 = -32800;
    /// LSP: the content changed, the result is no longer valid.
    pub const CONTENT_MODIFIED: i64 = -32801;
    /// LSP 3.17: the server cancelled the request (only for request types that opt in).
    pub const SERVER_CANCELLED: i64 = -32802;
    /// The request timed out (the code the MCP TypeScript SDK uses; a server-side MCP timeout answers with it).
    pub const REQUEST_TIMEOUT: i64 = -32001;
}

/// A request id: a number or a string, compared exactly (the number `1` and the string `"1"` are different ids).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Id {
    /// An integer id.
    Number(i64),
    /// A string id.
    String(String),
}

impl fmt::Debug for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Id::Number(n) => write!(f, "{n}"),
            Id::String(s) => write!(f, "{s:?}"),
        }
    }
}

impl From<i64> for Id {
    fn from(n: i64) -> Self {
        Id::Number(n)
    }
}

impl From<i32> for Id {
    fn from(n: i32) -> Self {
        Id::Number(n.into())
    }
}

impl From<&str> for Id {
    fn from(s: &str) -> Self {
        Id::String(s.to_owned())
    }
}

impl From<String> for Id {
    fn from(s: String) -> Self {
        Id::String(s)
    }
}

impl Serialize for Id {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Id::Number(n) => serializer.serialize_i64(*n),
            Id::String(s) => serializer.serialize_str(s),
        }
    }
}

impl<'de> Deserialize<'de> for Id {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct IdVisitor;
        impl Visitor<'_> for IdVisitor {
            type Value = Id;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an integer or a string")
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<Id, E> {
                Ok(Id::Number(n))
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Id, E> {
                i64::try_from(n)
                    .map(Id::Number)
                    .map_err(|_| E::custom("id out of range"))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Id, E> {
                Ok(Id::String(s.to_owned()))
            }
            fn visit_string<E: de::Error>(self, s: String) -> Result<Id, E> {
                Ok(Id::String(s))
            }
        }
        deserializer.deserialize_any(IdVisitor)
    }
}

/// A JSON-RPC error object.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ErrorObject {
    /// The error code (see [`code`]).
    pub code: i64,
    /// A short description.
    pub message: String,
    /// Additional information.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl ErrorObject {
    /// An error object with a code and a message.
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// Attach `data`.
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    /// -32700 Parse error.
    pub fn parse_error(detail: impl fmt::Display) -> Self {
        Self::new(code::PARSE_ERROR, format!("Parse error: {detail}"))
    }

    /// -32600 Invalid Request.
    pub fn invalid_request(detail: impl fmt::Display) -> Self {
        Self::new(code::INVALID_REQUEST, format!("Invalid Request: {detail}"))
    }

    /// -32601 Method not found.
    pub fn method_not_found(method: &str) -> Self {
        Self::new(
            code::METHOD_NOT_FOUND,
            format!("Method not found: {method}"),
        )
    }

    /// -32602 Invalid params.
    pub fn invalid_params(detail: impl fmt::Display) -> Self {
        Self::new(code::INVALID_PARAMS, format!("Invalid params: {detail}"))
    }

    /// -32603 Internal error.
    pub fn internal_error(detail: impl fmt::Display) -> Self {
        Self::new(code::INTERNAL_ERROR, format!("Internal error: {detail}"))
    }
}

impl fmt::Display for ErrorObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

impl std::error::Error for ErrorObject {}

/// A request or a notification as the wire carries it: its id (none for a notification), its method and its raw
/// params. What a [`Dialect`](crate::Dialect) reads and renders, and what this side sends; the
/// [`Request`](crate::Request) a handler gets wraps one (and dereferences to it).
#[derive(Clone, Debug)]
pub struct WireRequest {
    id: Option<Id>,
    method: String,
    params: Option<Box<RawValue>>,
}

impl WireRequest {
    /// A request with an id. `params` is serialized once, here.
    pub fn new(id: impl Into<Id>, method: impl Into<String>, params: impl Serialize) -> Self {
        Self::build(Some(id.into()), method.into(), params)
    }

    /// A notification (no id, never answered).
    pub fn notification(method: impl Into<String>, params: impl Serialize) -> Self {
        Self::build(None, method.into(), params)
    }

    fn build(id: Option<Id>, method: String, params: impl Serialize) -> Self {
        let params = serde_json::value::to_raw_value(&params)
            .ok()
            .filter(|raw| raw.get() != "null");
        Self::from_parts(id, method, params)
    }

    /// A request from its parts, params already raw.
    pub fn from_parts(id: Option<Id>, method: String, params: Option<Box<RawValue>>) -> Self {
        Self { id, method, params }
    }

    /// The id, or `None` for a notification.
    pub fn id(&self) -> Option<&Id> {
        self.id.as_ref()
    }

    /// Whether this is a notification (no id: never answered).
    pub fn is_notification(&self) -> bool {
        self.id.is_none()
    }

    /// The method name.
    pub fn method(&self) -> &str {
        &self.method
    }

    /// The raw params, as they arrived.
    pub fn params(&self) -> Option<&RawValue> {
        self.params.as_deref()
    }

    /// Parse the params. Missing params parse as JSON `null`. The error is the -32602 reply to send.
    pub fn params_as<T: DeserializeOwned>(&self) -> Result<T, ErrorObject> {
        let raw = self.params.as_deref().map_or("null", RawValue::get);
        serde_json::from_str(raw).map_err(ErrorObject::invalid_params)
    }
}

impl Serialize for WireRequest {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Wire<'a> {
            jsonrpc: &'static str,
            #[serde(skip_serializing_if = "Option::is_none")]
            id: Option<&'a Id>,
            method: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            params: Option<&'a RawValue>,
        }
        Wire {
            jsonrpc: "2.0",
            id: self.id.as_ref(),
            method: &self.method,
            params: self.params.as_deref(),
        }
        .serialize(serializer)
    }
}

/// A reply: the id it answers (`None` is JSON `null`, for errors about a message whose id could not be read) and
/// either a result or an error.
#[derive(Clone, Debug, PartialEq)]
pub struct Response {
    /// The id of the request this answers.
    pub id: Option<Id>,
    /// The result, or the error.
    pub outcome: Result<Value, ErrorObject>,
}

impl Response {
    /// A successful reply.
    pub fn ok(id: Id, result: Value) -> Self {
        Self {
            id: Some(id),
            outcome: Ok(result),
        }
    }

    /// An error reply.
    pub fn error(id: Option<Id>, error: ErrorObject) -> Self {
        Self {
            id,
            outcome: Err(error),
        }
    }
}

impl Serialize for Response {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Wire<'a> {
            jsonrpc: &'static str,
            id: Option<&'a Id>,
            #[serde(skip_serializing_if = "Option::is_none")]
            result: Option<&'a Value>,
            #[serde(skip_serializing_if = "Option::is_none")]
            error: Option<&'a ErrorObject>,
        }
        let (result, error) = match &self.outcome {
            Ok(value) => (Some(value), None),
            Err(error) => (None, Some(error)),
        };
        Wire {
            jsonrpc: "2.0",
            id: self.id.as_ref(),
            result,
            error,
        }
        .serialize(serializer)
    }
}

impl Response {
    /// Append the reply as JSON text to `out`: the bytes `serde_json::to_vec` makes of it (members in the order of
    /// its `Serialize` impl), written without serde's struct and key machinery, which costs a connection's read loop several
    /// hundred instructions for every reply it sends.
    pub(crate) fn write_json(&self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        out.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
        match &self.id {
            Some(id) => serde_json::to_writer(&mut *out, id)?,
            None => out.extend_from_slice(b"null"),
        }
        match &self.outcome {
            Ok(value) => {
                out.extend_from_slice(br#","result":"#);
                serde_json::to_writer(&mut *out, value)?;
            }
            Err(error) => {
                out.extend_from_slice(br#","error":"#);
                serde_json::to_writer(&mut *out, error)?;
            }
        }
        out.push(b'}');
        Ok(())
    }
}

/// What [`parse`] read: a request or notification, or a reply to one of this side's requests.
#[derive(Debug)]
pub(crate) enum Parsed {
    Request(WireRequest),
    Response(Response),
}

/// Why bytes could not be read as a message: the reply the sender gets (the id is `None` where it could not be
/// read, as JSON-RPC 2.0 says).
#[derive(Debug, Clone, PartialEq)]
pub struct InvalidMessage {
    /// The id of the offending request, if one could be read.
    pub id: Option<Id>,
    /// The error to reply with: -32700 for bytes that are not JSON, -32600 for JSON that is not a message.
    pub error: ErrorObject,
}

impl fmt::Display for InvalidMessage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.error, f)
    }
}

impl std::error::Error for InvalidMessage {}

/// A message as serde reads it. `I` is how its `id` is read: in one pass ([`IdRead`]), or kept raw ([`RawId`]) for a
/// second reading of a message the first could not read.
#[derive(Deserialize)]
#[serde(bound(deserialize = "I: Deserialize<'de>"))]
struct WireMessage<'a, I> {
    #[serde(default, borrow)]
    jsonrpc: Option<Cow<'a, str>>,
    // Absent is a notification, `null` is an invalid id: `present` keeps the two apart.
    #[serde(default, deserialize_with = "present")]
    id: Option<I>,
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    params: Option<Box<RawValue>>,
    // `"result": null` is a result (the answer to LSP's `shutdown`): `present` keeps it from reading as absent.
    #[serde(default, deserialize_with = "present")]
    result: Option<Value>,
    #[serde(default)]
    error: Option<ErrorObject>,
}

impl<'a, I> WireMessage<'a, I> {
    fn read_id(self, read: impl FnOnce(I) -> IdRead) -> WireMessage<'a, IdRead> {
        WireMessage {
            jsonrpc: self.jsonrpc,
            id: self.id.map(read),
            method: self.method,
            params: self.params,
            result: self.result,
            error: self.error,
        }
    }
}

/// A message's `id` member, read in the same pass as the rest: an id, `null`, or any other value (consumed, so that
/// a syntax error later in the message is still found).
enum IdRead {
    Id(Id),
    Null,
    Invalid,
}

impl<'de> Deserialize<'de> for IdRead {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct IdReadVisitor;
        impl<'de> Visitor<'de> for IdReadVisitor {
            type Value = IdRead;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<IdRead, E> {
                Ok(IdRead::Id(Id::Number(n)))
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<IdRead, E> {
                Ok(i64::try_from(n).map_or(IdRead::Invalid, |n| IdRead::Id(Id::Number(n))))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<IdRead, E> {
                Ok(IdRead::Invalid)
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<IdRead, E> {
                Ok(IdRead::Invalid)
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<IdRead, E> {
                Ok(IdRead::Id(Id::String(s.to_owned())))
            }
            fn visit_string<E: de::Error>(self, s: String) -> Result<IdRead, E> {
                Ok(IdRead::Id(Id::String(s)))
            }
            fn visit_unit<E: de::Error>(self) -> Result<IdRead, E> {
                Ok(IdRead::Null)
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<IdRead, A::Error> {
                while seq.next_element::<de::IgnoredAny>()?.is_some() {}
                Ok(IdRead::Invalid)
            }
            fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<IdRead, A::Error> {
                while map
                    .next_entry::<de::IgnoredAny, de::IgnoredAny>()?
                    .is_some()
                {}
                Ok(IdRead::Invalid)
            }
        }
        deserializer.deserialize_any(IdReadVisitor)
    }
}

/// A message's `id` member kept as its text, for the second reading.
struct RawId<'a>(&'a RawValue);

impl<'de: 'a, 'a> Deserialize<'de> for RawId<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        <&RawValue>::deserialize(deserializer).map(RawId)
    }
}

impl RawId<'_> {
    /// Read as the first reading reads an id; text that does not read at all (a string that is not valid text) is
    /// an invalid id.
    fn read(self) -> IdRead {
        serde_json::from_str(self.0.get()).unwrap_or(IdRead::Invalid)
    }
}

fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    deserializer: D,
) -> Result<Option<T>, D::Error> {
    T::deserialize(deserializer).map(Some)
}

/// Read one message from the bytes of a frame.
///
/// A missing `jsonrpc` member is tolerated (some protocol texts omit it); any other value than `"2.0"` is not.
/// Batches (JSON arrays) are not supported and get -32600.
pub(crate) fn parse(bytes: &[u8]) -> Result<Parsed, InvalidMessage> {
    // One pass in the common case, the id read with the rest. A message that does not read that way is read again
    // with its id kept as text, which tells what was wrong with it as the id alone: a string id that is not valid
    // text (a lone surrogate escaped) is an invalid id, not a message that cannot be read.
    let wire = match serde_json::from_slice::<WireMessage<'_, IdRead>>(bytes) {
        Ok(wire) => wire,
        Err(_) => match serde_json::from_slice::<WireMessage<'_, RawId<'_>>>(bytes) {
            Ok(wire) => wire.read_id(RawId::read),
            Err(error) => return Err(classify(bytes, error)),
        },
    };
    // serde's derived `Deserialize` reads a struct from a JSON array too, member by member in declaration order:
    // without this check `["2.0",5,"m"]` would be served as request 5, and `["2.0",5,null,null,1]` taken for the
    // reply to this side's call 5.
    if is_array(bytes) {
        return Err(batch());
    }
    let invalid = |id: Option<Id>, detail: &str| InvalidMessage {
        id,
        error: ErrorObject::invalid_request(detail),
    };
    if wire.jsonrpc.as_deref().is_some_and(|v| v != "2.0") {
        let id = match wire.id {
            Some(IdRead::Id(id)) => Some(id),
            _ => None,
        };
        return Err(invalid(id, "jsonrpc must be \"2.0\""));
    }
    // `id` absent is a notification; `id` present must be an integer or a string (`null` only on a reply).
    let id = match wire.id {
        None => None,
        Some(IdRead::Id(id)) => Some(id),
        Some(IdRead::Null) if wire.method.is_none() => None,
        Some(IdRead::Null | IdRead::Invalid) => {
            return Err(invalid(None, "id must be an integer or a string"))
        }
    };
    match (wire.method, wire.result, wire.error) {
        (Some(method), None, None) => Ok(Parsed::Request(WireRequest::from_parts(
            id,
            method,
            wire.params.filter(|raw| raw.get() != "null"),
        ))),
        (None, Some(result), None) => match id {
            Some(id) => Ok(Parsed::Response(Response::ok(id, result))),
            None => Err(invalid(None, "a result needs an id")),
        },
        (None, None, Some(error)) => Ok(Parsed::Response(Response::error(id, error))),
        _ => Err(invalid(
            id,
            "expected exactly one of method, result or error",
        )),
    }
}

fn classify(bytes: &[u8], error: serde_json::Error) -> InvalidMessage {
    // Not JSON: -32700, with the syntax error as the detail (the message's own error may be about a type it
    // met before the syntax went wrong). Skipping values does not decode strings, so bytes that are not UTF-8
    // inside one pass that check; they are not JSON text all the same (RFC 8259 §8.1).
    let error = match serde_json::from_slice::<de::IgnoredAny>(bytes) {
        Err(syntax) => ErrorObject::parse_error(syntax),
        Ok(_) if std::str::from_utf8(bytes).is_err() => ErrorObject::parse_error(error),
        Ok(_) if is_array(bytes) => return batch(),
        Ok(_) => ErrorObject::invalid_request(error),
    };
    InvalidMessage { id: None, error }
}

fn batch() -> InvalidMessage {
    InvalidMessage {
        id: None,
        error: ErrorObject::invalid_request("batches are not supported"),
    }
}

/// Whether the JSON text in `bytes` is an array (a batch).
fn is_array(bytes: &[u8]) -> bool {
    bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[')
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_reply_as_json_is_what_serde_makes_of_it() {
        let replies = [
            Response::ok(1.into(), json!("done")),
            Response::ok(Id::from(-7), Value::Null),
            Response::ok(
                Id::from("6f1c\"\\é\u{1}"),
                json!({ "b": [1, 2.5, null], "a": { "x": "\n" } }),
            ),
            Response::error(Some(3.into()), ErrorObject::method_not_found("nope")),
            Response::error(
                None,
                ErrorObject::new(-32000, "with data").with_data(json!({ "why": "x" })),
            ),
        ];
        for reply in replies {
            // Appended after what the buffer holds (an outbox leaves room for a frame's header first).
            let mut out = b"before".to_vec();
            reply.write_json(&mut out).unwrap();
            assert_eq!(
                (&out[..6], std::str::from_utf8(&out[6..]).unwrap()),
                (
                    &b"before"[..],
                    serde_json::to_string(&reply).unwrap().as_str()
                )
            );
        }
    }

    fn request(bytes: &str) -> WireRequest {
        match parse(bytes.as_bytes()).unwrap() {
            Parsed::Request(r) => r,
            other => panic!("not a request: {other:?}"),
        }
    }

    #[test]
    fn number_and_string_ids_differ() {
        assert_ne!(Id::from(1), Id::from("1"));
        assert_eq!(
            request(r#"{"jsonrpc":"2.0","id":1,"method":"m"}"#).id(),
            Some(&Id::Number(1))
        );
        assert_eq!(
            request(r#"{"jsonrpc":"2.0","id":"1","method":"m"}"#).id(),
            Some(&Id::String("1".into()))
        );
    }

    #[test]
    fn params_stay_raw_until_asked() {
        let r = request(r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"ms": 5}}"#);
        assert_eq!(r.params().unwrap().get(), r#"{"ms": 5}"#);
        assert_eq!(r.params_as::<Value>().unwrap(), json!({"ms": 5}));
    }

    #[test]
    fn notification_has_no_id() {
        let r = request(r#"{"jsonrpc":"2.0","method":"initialized","params":{}}"#);
        assert!(r.is_notification());
    }

    #[test]
    fn bad_ids_are_invalid_requests() {
        for body in [
            r#"{"jsonrpc":"2.0","id":1.5,"method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":true,"method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":null,"method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":{"a":1},"method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":18446744073709551615,"method":"m"}"#,
        ] {
            let err = parse(body.as_bytes()).unwrap_err();
            assert_eq!(err.error.code, code::INVALID_REQUEST, "{body}");
            assert_eq!(err.id, None);
        }
    }

    #[test]
    fn garbage_is_a_parse_error_and_shapes_are_invalid_requests() {
        assert_eq!(
            parse(b"{not json").unwrap_err().error.code,
            code::PARSE_ERROR
        );
        assert_eq!(
            parse(b"\xff\xfe").unwrap_err().error.code,
            code::PARSE_ERROR
        );
        assert_eq!(
            parse(b"[1,2]").unwrap_err().error.code,
            code::INVALID_REQUEST
        );
        assert_eq!(parse(b"42").unwrap_err().error.code, code::INVALID_REQUEST);
        let wrong_version = parse(br#"{"jsonrpc":"1.0","id":3,"method":"m"}"#).unwrap_err();
        assert_eq!(wrong_version.id, Some(Id::Number(3)));
    }

    #[test]
    fn arrays_are_batches_never_messages_read_by_position() {
        for body in [r#"["2.0",5,"m"]"#, r#" ["2.0",5,null,null,1]"#, "[]"] {
            let err = parse(body.as_bytes()).unwrap_err();
            assert_eq!(err.id, None, "{body}");
            assert_eq!(
                err.error,
                ErrorObject::invalid_request("batches are not supported"),
                "{body}"
            );
        }
    }

    #[test]
    fn bytes_that_are_not_utf8_are_a_parse_error_inside_strings_too() {
        let err = parse(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\xff\"}").unwrap_err();
        assert_eq!(err.error.code, code::PARSE_ERROR);
    }

    #[test]
    fn responses_are_recognised() {
        match parse(br#"{"jsonrpc":"2.0","id":"a","result":{"x":1}}"#).unwrap() {
            Parsed::Response(r) => assert_eq!(r, Response::ok("a".into(), json!({"x": 1}))),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_null_result_is_a_result() {
        match parse(br#"{"jsonrpc":"2.0","id":6,"result":null}"#).unwrap() {
            Parsed::Response(r) => assert_eq!(r, Response::ok(6.into(), Value::Null)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn replies_serialize_exactly() {
        let ok = serde_json::to_string(&Response::ok(7.into(), json!({"slept": 5}))).unwrap();
        assert_eq!(ok, r#"{"jsonrpc":"2.0","id":7,"result":{"slept":5}}"#);
        let err = serde_json::to_string(&Response::error(
            Some("x".into()),
            ErrorObject::new(code::REQUEST_CANCELLED, "Request cancelled"),
        ))
        .unwrap();
        assert_eq!(
            err,
            r#"{"jsonrpc":"2.0","id":"x","error":{"code":-32800,"message":"Request cancelled"}}"#
        );
        let null_id =
            serde_json::to_string(&Response::error(None, ErrorObject::parse_error("x"))).unwrap();
        assert!(null_id.starts_with(r#"{"jsonrpc":"2.0","id":null,"error""#));
    }
}
