//! Between tower-cancel's messages and tower-lsp's.

use serde_json::Value;
use tower_cancel::{BoxError, ErrorObject, PeerError, Request};
use tower_lsp_server::{
    jsonrpc::{self, ErrorCode},
    ExitedError,
};

/// LSP's `RequestCancelled`.
const REQUEST_CANCELLED: i64 = -32800;

/// `req` as tower-lsp reads it, carrying `id` (see [`crate::ids`]).
pub(crate) fn to_lsp(req: &Request, id: Option<jsonrpc::Id>) -> jsonrpc::Request {
    let mut lsp = jsonrpc::Request::build(req.method().to_owned());
    // The parser gave valid JSON; absent params stay absent (tower-lsp tells `null` from none).
    if let Some(params) = req
        .params()
        .and_then(|raw| serde_json::from_str::<Value>(raw.get()).ok())
    {
        lsp = lsp.params(params);
    }
    if let Some(id) = id {
        lsp = lsp.id(id);
    }
    lsp.finish()
}

/// tower-lsp's answer to a request (`request`) or a notification of `method`, as the stack's inner service answers.
pub(crate) fn from_lsp(
    answer: Result<Option<jsonrpc::Response>, ExitedError>,
    method: &str,
    request: bool,
) -> Result<Value, BoxError> {
    match answer {
        Ok(Some(response)) => match response.into_parts().1 {
            Ok(result) => Ok(result),
            Err(error) => Err(Box::new(error_object(error))),
        },
        // A notification, or a `$/` request tower-lsp does not know (it answers those with nothing): a request
        // always gets a reply.
        Ok(None) if request => Err(Box::new(ErrorObject::method_not_found(method))),
        Ok(None) => Ok(Value::Null),
        Err(ExitedError { .. }) => Err(Box::new(ErrorObject::new(
            tower_cancel::message::code::INVALID_REQUEST,
            "the language server has exited",
        ))),
    }
}

fn error_object(error: jsonrpc::Error) -> ErrorObject {
    let object = ErrorObject::new(error.code.code(), error.message.into_owned());
    match error.data {
        Some(data) => object.with_data(data),
        None => object,
    }
}

/// The client's answer to one of the server's own requests, as tower-lsp's waiter reads it.
pub(crate) fn client_answer(answer: Result<Value, PeerError>) -> Result<Value, jsonrpc::Error> {
    let (code, message) = match answer {
        Ok(result) => return Ok(result),
        Err(PeerError::Rejected(object)) => {
            return Err(jsonrpc::Error {
                code: ErrorCode::from(object.code),
                message: object.message.into(),
                data: object.data,
            })
        }
        Err(PeerError::Cancelled) => (REQUEST_CANCELLED, "Request cancelled"),
        Err(PeerError::TimedOut) => (REQUEST_CANCELLED, "request timed out"),
        Err(PeerError::Closed) => (ErrorCode::InternalError.code(), "connection closed"),
        Err(_) => (ErrorCode::InternalError.code(), "request failed"),
    };
    Err(jsonrpc::Error {
        code: ErrorCode::from(code),
        message: message.into(),
        data: None,
    })
}
