//! How an HTTP front end says "busy": 503 with `Retry-After`.

use axum::response::{IntoResponse, Response as HttpResponse};
use http::{header, HeaderValue, StatusCode};

use super::{limits::BUSY_RETRY_AFTER_SECS, quota::Busy};

/// 503 `Service Unavailable`, with `Retry-After` and why as plain text: a request refused before it ran, for a
/// bound on requests in flight (or on what the front end keeps) was reached.
pub(crate) fn busy_response(busy: &Busy) -> HttpResponse {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(
            header::RETRY_AFTER,
            HeaderValue::from(BUSY_RETRY_AFTER_SECS),
        )],
        busy.to_string(),
    )
        .into_response()
}
