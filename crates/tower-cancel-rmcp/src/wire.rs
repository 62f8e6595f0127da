//! Between our messages and rmcp's: a request of the stack becomes one of rmcp's typed client messages under the
//! bridge's own id, and what rmcp sends back becomes a result, an error, or a message to the client.

use std::borrow::Cow;

use rmcp::model::{
    ClientJsonRpcMessage, ClientResult, ErrorCode, ErrorData, JsonRpcError, JsonRpcResponse,
    JsonRpcVersion2_0, ProgressToken, RequestId,
};
use serde_json::{json, Value};
use tower_cancel::{ErrorObject, PeerError, WireRequest};

/// The message rmcp reads for the client's request `request`, under the bridge's id `link_id` (the client's own id
/// stays with the stack). A request rmcp cannot read is the client's fault: -32602.
pub(crate) fn client_request(
    request: &WireRequest,
    link_id: i64,
) -> Result<ClientJsonRpcMessage, ErrorObject> {
    serde_json::from_str(&envelope(request, Some(link_id))).map_err(ErrorObject::invalid_params)
}

/// The message rmcp reads for the client's notification `notification`, if rmcp can read it.
pub(crate) fn client_notification(notification: &WireRequest) -> Option<ClientJsonRpcMessage> {
    serde_json::from_str(&envelope(notification, None)).ok()
}

/// The message as text, its params spliced in raw as they came off the wire: rmcp reads it in one pass, as it reads
/// a line of its own transport (building a `Value` first would parse the params twice).
fn envelope(request: &WireRequest, id: Option<i64>) -> String {
    let method = serde_json::to_string(request.method()).expect("a string serializes");
    let params = request.params().map(|params| params.get());
    let mut message = String::with_capacity(48 + method.len() + params.map_or(0, str::len));
    message.push_str(r#"{"jsonrpc":"2.0","#);
    if let Some(id) = id {
        message.push_str(&format!(r#""id":{id},"#));
    }
    message.push_str(r#""method":"#);
    message.push_str(&method);
    if let Some(params) = params {
        message.push_str(r#","params":"#);
        message.push_str(params);
    }
    message.push('}');
    message
}

/// The cancel rmcp reads for its request `link_id`: it fires that handler's `ct`.
pub(crate) fn cancel(link_id: i64, reason: Option<String>) -> ClientJsonRpcMessage {
    let mut params = json!({ "requestId": link_id });
    if let Some(reason) = reason {
        params["reason"] = json!(reason);
    }
    client_message(
        json!({ "jsonrpc": "2.0", "method": "notifications/cancelled", "params": params }),
    )
}

/// The client's progress on a request the handler made, under the token rmcp asked with.
pub(crate) fn nested_progress(
    token: &ProgressToken,
    update: &tower_cancel::progress::ProgressUpdate,
) -> ClientJsonRpcMessage {
    let mut params = json!({ "progressToken": token, "progress": update.progress });
    if let Some(total) = update.total {
        params["total"] = json!(total);
    }
    if let Some(message) = &update.message {
        params["message"] = json!(message);
    }
    client_message(
        json!({ "jsonrpc": "2.0", "method": "notifications/progress", "params": params }),
    )
}

/// A message of ours, built as JSON (rmcp's structs cannot be built outside rmcp), read as rmcp reads one.
fn client_message(message: Value) -> ClientJsonRpcMessage {
    serde_json::from_value(message).expect("a well-formed client notification")
}

/// What the client answered to a request the handler made through rmcp's peer (`id` is rmcp's), as rmcp reads it.
pub(crate) fn nested_answer(
    id: RequestId,
    answer: Result<Value, PeerError>,
) -> ClientJsonRpcMessage {
    let error = match answer {
        Ok(result) => match serde_json::from_value::<ClientResult>(result) {
            Ok(result) => {
                return ClientJsonRpcMessage::Response(JsonRpcResponse {
                    jsonrpc: JsonRpcVersion2_0,
                    id,
                    result,
                })
            }
            Err(e) => ErrorData::internal_error(format!("unreadable result: {e}"), None),
        },
        Err(PeerError::Rejected(error)) => error_data(error),
        // The other ends happen on this side: rmcp's handler gets them as an error, as it would a closed transport.
        Err(other) => ErrorData::new(ErrorCode::INTERNAL_ERROR, other.to_string(), None),
    };
    ClientJsonRpcMessage::Error(JsonRpcError {
        jsonrpc: JsonRpcVersion2_0,
        id: Some(id),
        error,
    })
}

/// rmcp's error as ours.
pub(crate) fn error_object(error: ErrorData) -> ErrorObject {
    let object = ErrorObject::new(error.code.0.into(), error.message);
    match error.data {
        Some(data) => object.with_data(data),
        None => object,
    }
}

/// Our error as rmcp's.
fn error_data(error: ErrorObject) -> ErrorData {
    let code = i32::try_from(error.code).unwrap_or(ErrorCode::INTERNAL_ERROR.0);
    ErrorData::new(ErrorCode(code), Cow::Owned(error.message), error.data)
}

/// Where MCP names the subscription a message belongs to: the `subscriptions/listen` request's id.
const SUBSCRIPTION_ID_META: &str = "io.modelcontextprotocol/subscriptionId";

/// The bridge's id of the subscription a notification's `params` name, if any.
pub(crate) fn subscription_id(params: &Value) -> Option<i64> {
    params.get("_meta")?.get(SUBSCRIPTION_ID_META)?.as_i64()
}

/// `params` naming the subscription by the client's `id` instead of the bridge's (rmcp only knows the bridge's).
pub(crate) fn name_subscription(params: &mut Value, id: &tower_cancel::Id) {
    if let Some(meta) = params
        .get_mut("_meta")
        .and_then(|meta| meta.get_mut(SUBSCRIPTION_ID_META))
    {
        *meta = json!(id);
    }
}

/// A progress token as a table key: its JSON text, so that `1` and `"1"` differ.
pub(crate) fn token_key(token: &Value) -> String {
    token.to_string()
}

/// An rmcp progress token as a table key (see [`token_key`]).
pub(crate) fn rmcp_token_key(token: &ProgressToken) -> String {
    serde_json::to_value(token).map_or_else(|_| String::new(), |t| token_key(&t))
}
