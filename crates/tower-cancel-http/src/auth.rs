//! A bearer-token check for any endpoint of this crate, as a tower-http authorization layer.
//!
//! RAP requires the same authentication on invocations, cancels and closes; [`require_bearer`] is the common case
//! (a shared secret in `Authorization: Bearer ...`). Any other scheme (signatures, mTLS identities, JWTs) is a
//! tower layer of your own, mounted the same way.

use std::{fmt, future::Ready, sync::Arc};

use axum::{
    body::Body,
    response::{IntoResponse, Response},
};
use http::{header, HeaderValue, Request, StatusCode};
use tower_http::auth::{AsyncAuthorizeRequest, AsyncRequireAuthorizationLayer};

/// Checks `Authorization: Bearer TOKEN` against one expected token, in time independent of where they differ.
#[derive(Clone)]
pub struct BearerToken {
    expected: Arc<[u8]>,
}

impl BearerToken {
    /// Accept requests carrying `token`.
    pub fn new(token: impl AsRef<str>) -> Self {
        Self {
            expected: token.as_ref().as_bytes().into(),
        }
    }

    fn accepts(&self, headers: &http::HeaderMap) -> bool {
        let Some(value) = headers
            .get(header::AUTHORIZATION)
            .map(|value| value.as_bytes())
        else {
            return false;
        };
        // The scheme is case-insensitive (RFC 9110); an empty token never passes, even an expected empty one.
        let Some(given) = value
            .get(..7)
            .filter(|scheme| scheme.eq_ignore_ascii_case(b"bearer "))
            .map(|_| &value[7..])
            .filter(|given| !given.is_empty())
        else {
            return false;
        };
        // Every byte is compared whatever the first difference: the time taken tells nothing of the token but
        // its length.
        given.len() == self.expected.len()
            && given
                .iter()
                .zip(self.expected.iter())
                .fold(0u8, |diff, (a, b)| diff | (a ^ b))
                == 0
    }
}

impl fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BearerToken").finish_non_exhaustive()
    }
}

impl AsyncAuthorizeRequest<Body> for BearerToken {
    type RequestBody = Body;
    type ResponseBody = Body;
    type Future = Ready<Result<Request<Body>, Response>>;

    fn authorize(&mut self, request: Request<Body>) -> Self::Future {
        if self.accepts(request.headers()) {
            return std::future::ready(Ok(request));
        }
        tracing::debug!(path = %request.uri().path(), "a request without the expected bearer token: 401");
        std::future::ready(Err((
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"))],
        )
            .into_response()))
    }
}

/// The layer that answers 401 to a request without `Authorization: Bearer token`.
///
/// ```
/// use axum::{routing::post, Router};
/// use tower_cancel_http::auth::require_bearer;
///
/// let app: Router = Router::new()
///     .route("/cancel_tool_call", post(|| async {}))
///     .route_layer(require_bearer("s3cret"));
/// # let _ = app;
/// ```
pub fn require_bearer(token: impl AsRef<str>) -> AsyncRequireAuthorizationLayer<BearerToken> {
    AsyncRequireAuthorizationLayer::new(BearerToken::new(token))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(value: &str) -> http::HeaderMap {
        let mut headers = http::HeaderMap::new();
        headers.insert(header::AUTHORIZATION, HeaderValue::from_str(value).unwrap());
        headers
    }

    #[test]
    fn only_the_exact_token_passes() {
        let check = BearerToken::new("s3cret");
        assert!(check.accepts(&headers("Bearer s3cret")));
        assert!(!check.accepts(&headers("Bearer s3cre")));
        assert!(!check.accepts(&headers("Bearer s3cret2")));
        assert!(!check.accepts(&headers("Bearer S3cret")));
        assert!(!check.accepts(&headers("Basic s3cret")));
        assert!(check.accepts(&headers("bearer s3cret")));
        assert!(!check.accepts(&headers("Bearer ")));
        assert!(!BearerToken::new("").accepts(&headers("Bearer ")));
        assert!(!check.accepts(&headers("s3cret")));
        assert!(!check.accepts(&http::HeaderMap::new()));
    }
}
