//! What a POST's `Accept` header allows: the reply as an SSE stream, as JSON, or neither (406).

use http::{header, HeaderMap};

/// Whether the client takes an SSE stream (`Some(true)`), only JSON (`Some(false)`), or neither (`None`).
pub(crate) fn accepts(headers: &HeaderMap) -> Option<bool> {
    let Some(accept) = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) else {
        // No Accept header: anything goes.
        return Some(true);
    };
    let types: Vec<&str> = accept
        .split(',')
        .map(|t| t.split(';').next().unwrap_or_default().trim())
        .collect();
    // Media types are case-insensitive (RFC 9110, section 8.3.1), wildcards included.
    let listed = |names: [&str; 2]| {
        types
            .iter()
            .any(|t| *t == "*/*" || names.iter().any(|name| t.eq_ignore_ascii_case(name)))
    };
    let sse = listed(["text/event-stream", "text/*"]);
    let json = listed(["application/json", "application/*"]);
    match (json, sse) {
        (_, true) => Some(true),
        (true, false) => Some(false),
        (false, false) => None,
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    fn accepting(accept: &str) -> Option<bool> {
        let mut headers = HeaderMap::new();
        headers.insert(header::ACCEPT, HeaderValue::from_str(accept).unwrap());
        accepts(&headers)
    }

    #[test]
    fn sse_json_or_neither() {
        assert_eq!(accepts(&HeaderMap::new()), Some(true));
        assert_eq!(accepting("application/json, text/event-stream"), Some(true));
        assert_eq!(accepting("application/json;q=0.9"), Some(false));
        assert_eq!(accepting("*/*"), Some(true));
        assert_eq!(accepting("image/png"), None);
    }

    #[test]
    fn wildcards_in_capitals_are_the_same_wildcards() {
        // Found by fuzzing: `Text/*` and `APPLICATION/*` were compared case-sensitively, and refused with 406.
        assert_eq!(accepting("Text/*"), Some(true));
        assert_eq!(accepting("APPLICATION/*;q=0.5"), Some(false));
        assert_eq!(accepting("TEXT/EVENT-STREAM"), Some(true));
    }
}
