//! RAP's messages as they travel: what the runtime POSTs to a tool server, and what the tool server POSTs back.
//!
//! Field names are the wire's (`group_id`, `tool_call_id`, `inputSchema`); optional fields are left out when
//! absent, as the reference crates (`rap-protocol`) do.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The discovery document, `GET {base}/.well-known/rap-toolset`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Toolset {
    /// The toolset's name (1 to 128 characters).
    pub name: String,
    /// What the toolset is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Where the runtime POSTs invocations.
    pub endpoint: String,
    /// The operations, at least one.
    pub tools: Vec<ToolDef>,
}

/// One operation of a [`Toolset`]: its name is an invocation's `operation`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolDef {
    /// The operation's name (ASCII letters, digits, `_` and `-`; 1 to 128 characters).
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// The JSON Schema of its `arguments`.
    #[serde(rename = "inputSchema")]
    pub input_schema: Value,
    /// Hints about its behaviour (`readOnly`, `destructive`, `longRunning`...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Value>,
}

impl ToolDef {
    /// An operation taking arguments described by `input_schema`.
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        input_schema: Value,
    ) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
            input_schema,
            annotations: None,
        }
    }

    /// With these annotations.
    pub fn annotations(mut self, annotations: Value) -> Self {
        self.annotations = Some(annotations);
        self
    }
}

/// A tool invocation, `POST {endpoint}`: the runtime asks for `operation` and waits for its result at
/// `callback_url`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Invocation {
    /// The operation, a tool of the toolset.
    pub operation: String,
    /// Its arguments, an object.
    #[serde(default)]
    pub arguments: Value,
    /// The tool call's id (unique in its thread): `tool_call_id` in a cancel.
    pub id: String,
    /// A second id some model providers use; echoed in the result.
    #[serde(default)]
    pub call_id: Option<String>,
    /// Where the result goes.
    pub callback_url: String,
    /// The conversation thread: `thread_id` in a cancel or a close.
    pub group_id: String,
    /// The thread's ancestors, root first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_ancestors: Option<Vec<String>>,
    /// The end user, if the runtime tells.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
}

/// A tool result, POSTed to the invocation's `callback_url` (`"type": "tool_result"` on the wire).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename = "tool_result")]
pub struct ToolResult {
    /// The invocation's `group_id`.
    pub group_id: String,
    /// The invocation's `id`.
    pub id: String,
    /// The invocation's `call_id`, echoed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// The result as text (an error starts with `Error: `).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// The result as content items (`{"type":"text","text":...}`, `{"type":"image","data":...,"mediaType":...}`);
    /// supersedes `text` for the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Vec<Value>>,
    /// Display segments for people (`{"type":"text","content":...}`...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_as: Option<Vec<Value>>,
}

/// `POST {base}/cancel_tool_call`: stop the call `tool_call_id` of thread `thread_id`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CancelToolCall {
    /// The invocation's `group_id`.
    pub thread_id: String,
    /// The invocation's `id`.
    pub tool_call_id: String,
}

/// `POST {base}/close_thread`: the thread is over; stop its calls and forget it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CloseThread {
    /// The thread's `group_id`.
    pub thread_id: String,
}

/// The answer of `POST {base}/tool_call_status` (asked with a [`CancelToolCall`]'s body).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallStatus {
    /// Whether the call is running (accepted and its result not yet delivered). False for a call the server
    /// does not know.
    pub alive: bool,
}
