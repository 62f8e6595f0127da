//! Writing into a request's `params._meta`, the object MCP and ACP reserve for data about the request itself.

use serde_json::{Map, Value};

use super::params_object;

/// The `_meta` object of `params`: `params` is made an object if it is `null`, and its `_meta` made if missing.
/// `None` if `params` is neither an object nor `null`, or `_meta` is there and not an object.
pub(crate) fn meta_object(params: &mut Value) -> Option<&mut Map<String, Value>> {
    params_object(params)?
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use crate::dialect::{Abp, Dialect, Lsp, Mcp, Rap, ServerCancellable};

    #[test]
    fn the_remaining_time_goes_into_meta_beside_what_is_there() {
        let mut params = json!({ "name": "x", "_meta": { "progressToken": 1 } });
        assert!(Mcp.attach_deadline(&mut params, "timeoutMs", Duration::from_micros(250_900)));
        assert_eq!(
            params,
            json!({ "name": "x", "_meta": { "progressToken": 1, "timeoutMs": 250 } }),
            "whole milliseconds, rounded down"
        );
        let mut none = serde_json::Value::Null;
        let dialect = ServerCancellable::new(Lsp, ["workspace/symbol"]);
        assert!(dialect.attach_deadline(&mut none, "budgetMs", Duration::from_millis(7)));
        assert_eq!(none, json!({ "_meta": { "budgetMs": 7 } }));
    }

    #[test]
    fn params_that_cannot_carry_it_are_left_alone() {
        for params in [json!([1, 2]), json!("text"), json!({ "_meta": 5 })] {
            let mut written = params.clone();
            assert!(!Mcp.attach_deadline(&mut written, "timeoutMs", Duration::from_millis(9)));
            assert_eq!(written, params);
        }
    }

    #[test]
    fn abp_and_rap_carry_their_timeouts_elsewhere() {
        let mut params = json!({ "name": "x" });
        assert!(!Abp.attach_deadline(&mut params, "timeoutMs", Duration::from_millis(9)));
        assert!(!Rap.attach_deadline(&mut params, "timeoutMs", Duration::from_millis(9)));
        assert_eq!(params, json!({ "name": "x" }));
    }
}
