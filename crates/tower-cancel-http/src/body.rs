//! Reading a POST's body: its size and its time bounded, its content type checked, its JSON-RPC messages parsed.

use std::time::Duration;

use std::fmt;

use axum::{
    body::Body,
    response::{IntoResponse, Response as HttpResponse},
};
use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, StatusCode};
use serde::{
    de::{IgnoredAny, SeqAccess, Visitor},
    Deserializer as _, Serialize,
};
use serde_json::value::RawValue;
use tower_cancel::{message::InvalidMessage, ErrorObject, Message};

/// What a POST carried.
#[derive(Debug)]
pub(crate) enum Messages {
    /// One message, or what made it unreadable.
    One(Result<Message, InvalidMessage>),
    /// A batch: each element parsed on its own (a bad element is answered, the others are served).
    Batch(Vec<Result<Message, InvalidMessage>>),
}

/// Why a body was refused before any JSON-RPC reply could be made.
#[derive(Debug)]
pub(crate) struct Refused {
    pub(crate) status: StatusCode,
    pub(crate) detail: &'static str,
}

/// Read the body, at most `limit` bytes of it, all of it within `timeout`.
pub(crate) async fn read(body: Body, limit: usize, timeout: Duration) -> Result<Bytes, Refused> {
    let Ok(read) = tokio::time::timeout(timeout, axum::body::to_bytes(body, limit)).await else {
        return Err(Refused {
            status: StatusCode::REQUEST_TIMEOUT,
            detail: "the body did not arrive in time",
        });
    };
    read.map_err(|error| {
        let too_large = std::error::Error::source(&error)
            .is_some_and(|source| source.is::<http_body_util::LengthLimitError>());
        if too_large {
            Refused {
                status: StatusCode::PAYLOAD_TOO_LARGE,
                detail: "the body is over the size limit",
            }
        } else {
            Refused {
                status: StatusCode::BAD_REQUEST,
                detail: "the body could not be read",
            }
        }
    })
}

/// `Content-Type` must be JSON (parameters such as `charset` allowed).
pub(crate) fn check_json(headers: &HeaderMap) -> Result<(), Refused> {
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"));
    if json {
        Ok(())
    } else {
        Err(Refused {
            status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
            detail: "Content-Type must be application/json",
        })
    }
}

/// Parse the body's messages. A JSON array is a batch when `max_batch_len` allows batches (`Some`), and one
/// invalid request (-32600) otherwise; so is an empty batch, as JSON-RPC 2.0 says, and a batch longer than
/// `max_batch_len` (counted without keeping its elements: a body of a million tiny elements costs no more than
/// the bound).
pub(crate) fn parse(bytes: &[u8], max_batch_len: Option<usize>) -> Messages {
    let Some(max) = max_batch_len.filter(|_| is_array(bytes)) else {
        return Messages::One(Message::from_slice(bytes));
    };
    let invalid = |why: String| {
        Messages::One(Err(InvalidMessage {
            id: None,
            error: ErrorObject::invalid_request(why),
        }))
    };
    match elements(bytes, max) {
        Ok(Elements::Within(elements)) if elements.is_empty() => invalid("an empty batch".into()),
        Ok(Elements::Within(elements)) => Messages::Batch(
            elements
                .into_iter()
                .map(|element| {
                    if is_array(element.get().as_bytes()) {
                        // A batch inside a batch is not a message.
                        Err(InvalidMessage {
                            id: None,
                            error: ErrorObject::invalid_request("a batch inside a batch"),
                        })
                    } else {
                        Message::from_slice(element.get().as_bytes())
                    }
                })
                .collect(),
        ),
        Ok(Elements::Over(len)) => invalid(format!(
            "a batch of {len} messages is over the limit of {max}"
        )),
        // Not JSON, or an array that does not close: the whole body is unreadable.
        Err(_) => Messages::One(Message::from_slice(bytes)),
    }
}

/// A batch's elements, or how many there were past the bound.
enum Elements<'a> {
    Within(Vec<&'a RawValue>),
    Over(usize),
}

/// Read the array in `bytes` element by element, keeping at most `max` of them.
fn elements(bytes: &[u8], max: usize) -> Result<Elements<'_>, serde_json::Error> {
    struct Bounded(usize);

    impl<'de> Visitor<'de> for Bounded {
        type Value = Elements<'de>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a JSON-RPC batch")
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut kept = Vec::new();
            while let Some(element) = seq.next_element::<&'de RawValue>()? {
                if kept.len() == self.0 {
                    // Past the bound: count the rest (the body must still be one whole array), keep none.
                    let mut len = kept.len() + 1;
                    while seq.next_element::<IgnoredAny>()?.is_some() {
                        len += 1;
                    }
                    return Ok(Elements::Over(len));
                }
                kept.push(element);
            }
            Ok(Elements::Within(kept))
        }
    }

    let mut reader = serde_json::Deserializer::from_slice(bytes);
    let elements = reader.deserialize_seq(Bounded(max))?;
    reader.end()?;
    Ok(elements)
}

fn is_array(bytes: &[u8]) -> bool {
    first_byte(bytes) == Some(b'[')
}

/// Whether the body is a JSON object (by its first byte). Read a struct only from an object: serde's derived
/// `Deserialize` also reads one from an array, by position, a shape no protocol of ours allows.
pub(crate) fn is_object(bytes: &[u8]) -> bool {
    first_byte(bytes) == Some(b'{')
}

fn first_byte(bytes: &[u8]) -> Option<u8> {
    bytes
        .iter()
        .copied()
        .find(|byte| !byte.is_ascii_whitespace())
}

/// A JSON body with `status` (a reply, or an array of them).
pub(crate) fn json_response(status: StatusCode, body: &impl Serialize) -> HttpResponse {
    match serde_json::to_vec(body) {
        Ok(body) => (
            status,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            body,
        )
            .into_response(),
        Err(error) => {
            // Our replies' maps have string keys and their numbers are finite: this does not happen.
            tracing::error!(%error, "a reply could not be serialized");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}
