//! What a tool handler answers, and the `tool_result` made of it.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tower_cancel::ErrorObject;

use super::wire::{Invocation, ToolResult};

/// A tool's result with more than text: content items (images), display segments. A handler returns it as its
/// JSON value (`ToolOutput::text("done").into()`).
///
/// What a handler's value becomes in the `tool_result`:
///
/// | the handler answers | the result carries |
/// |---|---|
/// | a string | it as `text` |
/// | a [`ToolOutput`] (an object of `text`, `content`, `display_as` only, with `text` or `content`) | those fields |
/// | any other JSON value | it, JSON-encoded, as `text` (the spec's way for structured data) |
/// | an error | `text`: `Error: ` and its message (the spec's convention) |
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolOutput {
    /// The result as text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Content items (`{"type":"text","text":...}`, `{"type":"image","data":...,"mediaType":...}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Vec<Value>>,
    /// Display segments for people (`{"type":"text","content":...}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_as: Option<Vec<Value>>,
}

impl ToolOutput {
    /// A text result.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: Some(text.into()),
            ..Self::default()
        }
    }

    /// A result of content items.
    pub fn content(content: Vec<Value>) -> Self {
        Self {
            content: Some(content),
            ..Self::default()
        }
    }

    /// With display segments.
    pub fn display_as(mut self, segments: Vec<Value>) -> Self {
        self.display_as = Some(segments);
        self
    }
}

impl From<ToolOutput> for Value {
    fn from(output: ToolOutput) -> Value {
        serde_json::to_value(output).unwrap_or(Value::Null)
    }
}

/// The `tool_result` for `invocation` whose handler ended with `outcome`.
pub(super) fn tool_result(
    invocation: &Invocation,
    outcome: Result<Value, ErrorObject>,
) -> ToolResult {
    let output = match outcome {
        Ok(Value::String(text)) => ToolOutput::text(text),
        Ok(value) => match as_output(&value) {
            Some(output) => output,
            None => ToolOutput::text(value.to_string()),
        },
        Err(error) => ToolOutput::text(format!("Error: {}", error.message)),
    };
    ToolResult {
        group_id: invocation.group_id.clone(),
        id: invocation.id.clone(),
        call_id: invocation.call_id.clone(),
        text: output.text,
        content: output.content,
        display_as: output.display_as,
    }
}

fn as_output(value: &Value) -> Option<ToolOutput> {
    let object = value.as_object()?;
    if !object.contains_key("text") && !object.contains_key("content") {
        return None;
    }
    ToolOutput::deserialize(value).ok()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn invocation() -> Invocation {
        serde_json::from_value(json!({
            "operation": "op", "arguments": {}, "id": "c1", "call_id": "p1",
            "callback_url": "http://127.0.0.1:1/cb", "group_id": "t1"
        }))
        .unwrap()
    }

    fn wire(outcome: Result<Value, ErrorObject>) -> Value {
        serde_json::to_value(tool_result(&invocation(), outcome)).unwrap()
    }

    #[test]
    fn a_string_is_the_text() {
        assert_eq!(
            wire(Ok(json!("slept 5 ms"))),
            json!({"type": "tool_result", "group_id": "t1", "id": "c1", "call_id": "p1", "text": "slept 5 ms"})
        );
    }

    #[test]
    fn structured_data_is_json_encoded_text() {
        let data = json!({"count": 1, "text_like": "x"});
        let result = wire(Ok(data.clone()));
        let text = result["text"].as_str().unwrap();
        assert_eq!(serde_json::from_str::<Value>(text).unwrap(), data);
    }

    #[test]
    fn a_tool_output_keeps_its_fields() {
        let output = ToolOutput::content(vec![json!({"type": "text", "text": "hi"})])
            .display_as(vec![json!({"type": "text", "content": "said hi"})]);
        let result = wire(Ok(output.into()));
        assert_eq!(result["content"], json!([{"type": "text", "text": "hi"}]));
        assert_eq!(
            result["display_as"],
            json!([{"type": "text", "content": "said hi"}])
        );
        assert!(result.get("text").is_none());
        // An object with other keys beside `text` is data, not an output.
        let data = json!({"text": "a", "other": 1});
        let result = wire(Ok(data.clone()));
        let text = result["text"].as_str().unwrap();
        assert_eq!(serde_json::from_str::<Value>(text).unwrap(), data);
    }

    #[test]
    fn an_error_is_text_that_says_so() {
        let result = wire(Err(ErrorObject::invalid_params("missing field `ms`")));
        assert_eq!(
            result["text"],
            json!("Error: Invalid params: missing field `ms`")
        );
    }
}
