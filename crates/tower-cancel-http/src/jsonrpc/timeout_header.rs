//! A deadline over JSON-RPC over HTTP: the header that carries the time a request may take, in milliseconds.
//!
//! There is no convention for JSON-RPC over HTTP. gRPC has `grpc-timeout` (a value and a unit), the Connect
//! protocol `Connect-Timeout-Ms`; this header is of the same shape as Connect's, an integer of milliseconds, under
//! a name of our own ([`DEFAULT_TIMEOUT_HEADER`], configurable with [`JsonRpc::timeout_header`]) so as not to
//! claim another protocol's. It is what `params._meta.timeoutMs` is over a stream.

use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue};
use tokio::time::Instant;
use tower_cancel::RequestContext;

#[cfg(doc)]
use super::JsonRpc;

/// The header [`JsonRpc`] reads a request's timeout from by default: `Timeout-Ms`, milliseconds as an integer.
pub const DEFAULT_TIMEOUT_HEADER: HeaderName = HeaderName::from_static("timeout-ms");

/// The most digits a value may have: ten, as Connect's `Connect-Timeout-Ms` (over 115 days).
const MAX_DIGITS: usize = 10;

/// The timeout the header `name` of `headers` asks for: ASCII digits only (at most ten), one value. Anything else
/// is no timeout at all, as a missing header is.
pub(crate) fn requested(headers: &HeaderMap, name: &HeaderName) -> Option<Duration> {
    let mut values = headers.get_all(name).iter();
    let value = values.next()?;
    if values.next().is_some() {
        tracing::debug!(header = %name, "timeout header given twice: ignored");
        return None;
    }
    let text = value.as_bytes();
    if text.is_empty() || text.len() > MAX_DIGITS || !text.iter().all(u8::is_ascii_digit) {
        tracing::debug!(header = %name, "timeout header not an integer of milliseconds: ignored");
        return None;
    }
    // Ten digits at most: it fits in a u64.
    let millis = text
        .iter()
        .fold(0u64, |millis, digit| millis * 10 + u64::from(digit - b'0'));
    Some(Duration::from_millis(millis))
}

/// The value of the timeout header for a call a handler makes over HTTP on behalf of its request (`context`): the
/// milliseconds left until the request's deadline, rounded down (a hop never extends a deadline). `None` if the
/// request has no deadline. A deadline that has passed gives `0`, which the next hop's layer expires at once.
///
/// ```
/// # fn forward(ctx: &tower_cancel::RequestContext, client: &reqwest::Client) -> reqwest::RequestBuilder {
/// use tower_cancel_http::jsonrpc::{timeout_header_value, DEFAULT_TIMEOUT_HEADER};
///
/// let mut post = client.post("http://localhost:8080/rpc");
/// if let Some(left) = timeout_header_value(ctx) {
///     post = post.header(DEFAULT_TIMEOUT_HEADER, left);
/// }
/// # post }
/// ```
pub fn timeout_header_value(context: &RequestContext) -> Option<HeaderValue> {
    let left = context
        .deadline()?
        .saturating_duration_since(Instant::now());
    Some(HeaderValue::from(
        u64::try_from(left.as_millis()).unwrap_or(u64::MAX),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(values: &[&str]) -> Option<Duration> {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(
                DEFAULT_TIMEOUT_HEADER,
                HeaderValue::from_str(value).unwrap(),
            );
        }
        requested(&headers, &DEFAULT_TIMEOUT_HEADER)
    }

    #[test]
    fn an_integer_of_milliseconds_is_a_timeout() {
        assert_eq!(asked(&["250"]), Some(Duration::from_millis(250)));
        assert_eq!(asked(&["0"]), Some(Duration::ZERO));
        assert_eq!(
            asked(&["9999999999"]),
            Some(Duration::from_millis(9_999_999_999))
        );
        assert_eq!(asked(&[]), None);
    }

    #[test]
    fn anything_else_is_no_timeout() {
        for bad in [
            "",
            "-5",
            "+5",
            "1.5",
            "5s",
            " 5",
            "12345678901",
            "0x10",
            "٣",
        ] {
            assert_eq!(asked(&[bad]), None, "{bad:?}");
        }
        assert_eq!(asked(&["5", "6"]), None, "twice");
    }
}
