//! MCP Streamable HTTP: the checks the front end makes of a POST's headers.

use http::{HeaderMap, StatusCode};
use tower_cancel::{ErrorObject, Message};

use crate::mcp::{
    accept,
    revision::{self, Refusal, Spoken},
};

/// Which revision a POST with these headers and this message speaks: `Ok(None)` for the session revision,
/// `Ok(Some(version))` for a stateless one, or the refusal's status and error.
pub fn classify(
    headers: &HeaderMap,
    message: &Message,
) -> Result<Option<String>, (StatusCode, ErrorObject)> {
    match revision::classify(headers, message) {
        Ok(Spoken::Session) => Ok(None),
        Ok(Spoken::Stateless(version)) => Ok(Some(version)),
        Err(refusal) => Err(unpack(refusal)),
    }
}

/// A POST of the session revision: whether its `MCP-Protocol-Version` header (if any) is one with sessions.
pub fn check_session_version(headers: &HeaderMap) -> Result<(), (StatusCode, ErrorObject)> {
    revision::check_session_version(headers).map_err(unpack)
}

/// An `Mcp-Name` header value as compared with the body: `=?base64?...?=` decoded, anything else as it is.
pub fn decode_header_value(value: &str) -> Result<String, (StatusCode, ErrorObject)> {
    revision::decode(value).map_err(unpack)
}

/// What the `Accept` header allows: an SSE stream (`Some(true)`), JSON only (`Some(false)`), or neither.
pub fn accepts(headers: &HeaderMap) -> Option<bool> {
    accept::accepts(headers)
}

fn unpack(refusal: Refusal) -> (StatusCode, ErrorObject) {
    (refusal.status, refusal.error)
}
