//! The `_meta` object of a request's params, where MCP and ACP carry what is about the request rather than its
//! arguments.

use serde_json::{Map, Value};

/// The `_meta` object of `params`, made where missing: `params` is made an object if it is `null`. `None` if
/// `params` is neither an object nor `null`, or its `_meta` is not an object.
pub(crate) fn meta_object(params: &mut Value) -> Option<&mut Map<String, Value>> {
    if params.is_null() {
        *params = Value::Object(Map::new());
    }
    params
        .as_object_mut()?
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
}
