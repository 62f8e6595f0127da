//! JSON equality for values that went through text and back.

use serde_json::Value;

/// JSON equality, but for floats: serde_json (without its `float_roundtrip` feature) may parse a float it wrote
/// to a neighbouring value.
pub fn same_json(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) if x.is_f64() && y.is_f64() => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            (x - y).abs() <= 4.0 * f64::EPSILON * x.abs().max(y.abs())
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_json(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, x)| y.get(k).is_some_and(|y| same_json(x, y)))
        }
        (a, b) => a == b,
    }
}

/// `a` and `b` serialized, compared with [`same_json`]: for typed values that went through text and back (a
/// struct holding a float or a `Value` may not compare equal with `==` after the trip).
pub fn same_serialized<T: serde::Serialize>(a: &T, b: &T) -> bool {
    match (serde_json::to_value(a), serde_json::to_value(b)) {
        (Ok(a), Ok(b)) => same_json(&a, &b),
        _ => false,
    }
}
