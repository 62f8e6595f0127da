//! Between our messages and the SDK's raw frames: a request of the stack becomes a raw request under the bridge's
//! own id, and what the SDK sends back becomes a result, an error, or a message to the client.

use agent_client_protocol::{
    RawJsonRpcError, RawJsonRpcId, RawJsonRpcMessage, RawJsonRpcNotification, RawJsonRpcParams,
    RawJsonRpcRequest, RawJsonRpcResponse, TransportFrame,
};
use serde_json::{json, Value};
use tower_cancel::{dialect::Acp, ErrorObject, PeerError, WireRequest};

/// ACP's code for a cancelled request.
const REQUEST_CANCELLED: i32 = -32800;

/// The params of `request` as the SDK carries them: an object, an array, or none. Anything else (a number, a
/// string) is not JSON-RPC params: -32602, as the SDK would answer it.
fn params(request: &WireRequest) -> Result<Option<RawJsonRpcParams>, ErrorObject> {
    let Some(raw) = request.params() else {
        return Ok(None);
    };
    let value: Value = serde_json::from_str(raw.get()).map_err(ErrorObject::invalid_params)?;
    RawJsonRpcParams::from_value(value)
        .map_err(|_| ErrorObject::invalid_params("params must be an object or an array"))
}

/// The request the SDK reads for the client's request `request`, under the bridge's id `link_id` (the client's own
/// id stays with the stack).
pub(crate) fn request(
    request: &WireRequest,
    link_id: i64,
) -> Result<RawJsonRpcRequest, ErrorObject> {
    Ok(RawJsonRpcRequest {
        id: RawJsonRpcId::Number(link_id),
        method: request.method().into(),
        params: params(request)?,
    })
}

/// A request as a frame.
pub(crate) fn request_frame(request: RawJsonRpcRequest) -> TransportFrame {
    frame(RawJsonRpcMessage::Request(request))
}

/// The frame the SDK reads for the client's notification, if its params are JSON-RPC params.
pub(crate) fn notification(notification: &WireRequest) -> Option<TransportFrame> {
    let params = params(notification).ok()?;
    Some(frame(RawJsonRpcMessage::Notification(
        RawJsonRpcNotification {
            method: notification.method().into(),
            params,
        },
    )))
}

/// The cancel the SDK reads for its request `id`: it sets that handler's `RequestCancellation`.
pub(crate) fn cancel(id: RawJsonRpcId) -> TransportFrame {
    let params = RawJsonRpcParams::from_value(json!({ "requestId": id }))
        .expect("an object is JSON-RPC params");
    frame(RawJsonRpcMessage::Notification(RawJsonRpcNotification {
        method: Acp::CANCEL_METHOD.into(),
        params,
    }))
}

/// The client's answer to a request the agent made (`id` is the SDK's), as the SDK reads it.
pub(crate) fn nested_answer(id: RawJsonRpcId, answer: Result<Value, PeerError>) -> TransportFrame {
    let result = match answer {
        Ok(result) => Ok(result),
        Err(PeerError::Rejected(error)) => Err(raw_error(error)),
        // Given up on this side (the request it was made in ended, or the agent withdrew it): what a client
        // answers a cancelled request.
        Err(PeerError::Cancelled) => {
            Err(RawJsonRpcError::new(REQUEST_CANCELLED, "Request cancelled"))
        }
        // The other ends happen on this side too: the agent gets them as an error, as it would a closed transport.
        Err(other) => Err(RawJsonRpcError::new(-32603, other.to_string())),
    };
    frame(RawJsonRpcMessage::Response(RawJsonRpcResponse::new(
        id,
        result.map_err(Box::new),
    )))
}

/// The SDK's error as ours.
pub(crate) fn error_object(error: &RawJsonRpcError) -> ErrorObject {
    let value = serde_json::to_value(error).unwrap_or_default();
    let code = value["code"].as_i64().unwrap_or(-32603);
    let message = value["message"].as_str().unwrap_or_default().to_owned();
    let object = ErrorObject::new(code, message);
    match value.get("data") {
        Some(data) => object.with_data(data.clone()),
        None => object,
    }
}

/// Our error as the SDK's.
fn raw_error(error: ErrorObject) -> RawJsonRpcError {
    let code = i32::try_from(error.code).unwrap_or(-32603);
    let raw = RawJsonRpcError::new(code, error.message);
    match error.data {
        Some(data) => raw.data(data),
        None => raw,
    }
}

/// The method and params of a raw message of the SDK's, as our peer sends them.
pub(crate) fn method_and_params(method: &str, params: Option<RawJsonRpcParams>) -> (String, Value) {
    let params = params.map_or(Value::Null, |p| {
        serde_json::to_value(p).unwrap_or(Value::Null)
    });
    (method.to_owned(), params)
}

/// The `sessionId` of params, if they have one (every ACP request of an agent to its client has).
pub(crate) fn session_id(params: &Value) -> Option<String> {
    params.get("sessionId")?.as_str().map(str::to_owned)
}

/// The request id a raw `$/cancel_request` of the SDK names.
pub(crate) fn cancelled_id(params: Option<&RawJsonRpcParams>) -> Option<RawJsonRpcId> {
    let params = serde_json::to_value(params?).ok()?;
    serde_json::from_value(params.get("requestId")?.clone()).ok()
}

fn frame(message: RawJsonRpcMessage) -> TransportFrame {
    TransportFrame::Single(message)
}
