//! The messages both variants read and write: a typed request read from its frame (borrowing its method and
//! params), what it asks for, and the reply framed for the writer.

use std::{borrow::Cow, io::Write};

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::{Action, Outgoing};

/// A request id as the user's own code types it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub(super) enum Id {
    Number(i64),
    String(String),
}

/// One incoming message: a request, a notification, or (ignored here) a reply, which has no method (read as
/// empty). Its method and params are read in place, in the frame's bytes (a method with escapes is unescaped into
/// a string of its own).
#[derive(Deserialize)]
struct Message<'a> {
    id: Option<Id>,
    #[serde(borrow, default)]
    method: Cow<'a, str>,
    #[serde(borrow)]
    params: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct CancelParams {
    id: Id,
}

/// What a frame asks for.
pub(super) fn read(frame: &[u8]) -> Action {
    let Ok(message) = serde_json::from_slice::<Message<'_>>(frame) else {
        return Action::Nothing;
    };
    let params = message.params.map_or("null", RawValue::get);
    match (message.id, &*message.method) {
        // A reply to a request of ours: this server sends none.
        (_, "") => Action::Nothing,
        (Some(id), "initialize") => Action::Reply(id, Answer::Capabilities),
        (Some(id), "bench/work") => match serde_json::from_str(params) {
            Ok(params) => Action::Work(id, params),
            Err(e) => Action::Reply(id, Answer::Error(-32602, e.to_string().into())),
        },
        (Some(id), other) => {
            let message = format!("no method {other}");
            Action::Reply(id, Answer::Error(-32601, message.into()))
        }
        (None, "$/cancelRequest") => match serde_json::from_str::<CancelParams>(params) {
            Ok(CancelParams { id }) => Action::Cancel(id),
            Err(_) => Action::Nothing,
        },
        // `initialized` and the rest: nothing to do.
        (None, _) => Action::Nothing,
    }
}

/// A request's answer.
pub(super) enum Answer {
    /// `initialize`'s result.
    Capabilities,
    /// `bench/work`'s result, `"done"`.
    Done,
    /// An error object.
    Error(i64, Cow<'static, str>),
}

impl Answer {
    /// The answer to a request cancelled by its peer.
    pub(super) fn cancelled() -> Self {
        Answer::Error(-32800, Cow::Borrowed("RequestCancelled"))
    }
}

#[derive(Serialize)]
struct Success<'a, R> {
    jsonrpc: &'static str,
    id: &'a Id,
    result: R,
}

#[derive(Serialize)]
struct Failure<'a> {
    jsonrpc: &'static str,
    id: &'a Id,
    error: ErrorObject<'a>,
}

#[derive(Serialize)]
struct ErrorObject<'a> {
    code: i64,
    message: &'a str,
}

#[derive(Serialize)]
struct Capabilities {
    capabilities: Empty,
}

#[derive(Serialize)]
struct Empty {}

/// Serialize a reply, framed, and queue it for the writer.
pub(super) fn send(out: &Outgoing, id: &Id, answer: Answer) {
    let body = match answer {
        Answer::Capabilities => serde_json::to_vec(&Success {
            jsonrpc: "2.0",
            id,
            result: Capabilities {
                capabilities: Empty {},
            },
        }),
        Answer::Done => serde_json::to_vec(&Success {
            jsonrpc: "2.0",
            id,
            result: "done",
        }),
        Answer::Error(code, message) => serde_json::to_vec(&Failure {
            jsonrpc: "2.0",
            id,
            error: ErrorObject {
                code,
                message: &message,
            },
        }),
    }
    .expect("a reply serializes");
    let mut frame = Vec::with_capacity(body.len() + 32);
    write!(frame, "Content-Length: {}\r\n\r\n", body.len()).expect("a Vec takes any write");
    frame.extend_from_slice(&body);
    // The writer is gone only when the connection is.
    let _ = out.send(frame);
}
