//! The door to a session: what an upgrade to a WebSocket must pass before the app accepts it.
//!
//! | the upgrade | the answer |
//! |---|---|
//! | from an `Origin` the app does not allow | 403, no session |
//! | once the app's shutdown has begun | 503, no session |
//! | past the app's limit of sessions | 503 with `Retry-After`, no session |
//! | not a WebSocket upgrade (HTTP/1.1, version 13) | 400 (426 if the connection cannot be upgraded) |
//! | otherwise | 101, and the session runs |
//!
//! The app upgrades the connection itself, rather than with axum's `ws`, to put a [`Refragment`] between the
//! connection and the WebSocket library (see there: no socket keeps a read buffer as large as its largest
//! message). No extension is negotiated, and no subprotocol; HTTP/2's extended CONNECT is not taken.

use axum::{
    body::Body,
    response::{IntoResponse, Response as HttpResponse},
};
use http::{header, HeaderMap, HeaderValue, Request, StatusCode};
use hyper::upgrade::{OnUpgrade, Upgraded};
use hyper_util::rt::TokioIo;
use tokio_tungstenite::{
    tungstenite::{
        handshake::derive_accept_key,
        protocol::{Role, WebSocketConfig},
    },
    WebSocketStream,
};

use super::{
    limits::SESSIONS_FULL_RETRY_AFTER_SECS, refragment::Refragment, session, sessions, Config,
};
use crate::{call::RpcService, front::Endpoint};

/// A session's WebSocket.
pub(super) type Socket = WebSocketStream<Refragment<TokioIo<Upgraded>>>;

pub(super) async fn to_session<S: RpcService>(
    request: Request<Body>,
    endpoint: Endpoint<S, Config>,
) -> HttpResponse {
    let (mut parts, _body) = request.into_parts();
    let Some(key) = websocket_key(&parts.headers) else {
        return (
            StatusCode::BAD_REQUEST,
            "a WebSocket upgrade (HTTP/1.1, Sec-WebSocket-Version 13) is expected here",
        )
            .into_response();
    };
    let Some(on_upgrade) = parts.extensions.remove::<OnUpgrade>() else {
        return (
            StatusCode::UPGRADE_REQUIRED,
            "this connection cannot be upgraded",
        )
            .into_response();
    };
    let config = endpoint.protocol();
    if !config.origins.allows(&parts.headers) {
        // A page of another site, through the user's browser: as MCP's front end answers it.
        tracing::debug!(origin = ?parts.headers.get(header::ORIGIN), "ABP upgrade from an origin not allowed");
        return (StatusCode::FORBIDDEN, "Origin not allowed").into_response();
    }
    if endpoint.state().is_shutting_down() {
        // No session opens once the shutdown has begun: the agent's connect fails with the status.
        return (StatusCode::SERVICE_UNAVAILABLE, "the app is shutting down").into_response();
    }
    let Some(slot) = sessions::take(&config.counters.sessions, config.max_sessions) else {
        tracing::debug!(
            max = config.max_sessions,
            "ABP upgrade refused: as many sessions as the app takes are open"
        );
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            [(
                header::RETRY_AFTER,
                HeaderValue::from(SESSIONS_FULL_RETRY_AFTER_SECS),
            )],
            "the app has as many sessions as it takes",
        )
            .into_response();
    };
    let max = endpoint.settings().max_body_bytes;
    let websocket = WebSocketConfig::default()
        .max_message_size(Some(max))
        .max_frame_size(Some(max));
    let accept = derive_accept_key(key.as_bytes());
    // The slot goes with the session; an upgrade that fails drops it.
    tokio::spawn(async move {
        let upgraded = match on_upgrade.await {
            Ok(upgraded) => upgraded,
            Err(error) => {
                tracing::debug!(%error, "ABP upgrade failed");
                return;
            }
        };
        let io = Refragment::new(TokioIo::new(upgraded));
        let socket = WebSocketStream::from_raw_socket(io, Role::Server, Some(websocket)).await;
        session::run(socket, endpoint, slot).await;
    });
    (
        StatusCode::SWITCHING_PROTOCOLS,
        [
            (header::UPGRADE, HeaderValue::from_static("websocket")),
            (header::CONNECTION, HeaderValue::from_static("upgrade")),
            (
                header::SEC_WEBSOCKET_ACCEPT,
                HeaderValue::try_from(accept).expect("base64 is a header value"),
            ),
        ],
    )
        .into_response()
}

/// The `Sec-WebSocket-Key` of a WebSocket upgrade (RFC 6455 §4.2.1), if the request is one.
fn websocket_key(headers: &HeaderMap) -> Option<&HeaderValue> {
    let has_token = |name: header::HeaderName, token: &str| {
        headers.get_all(name).iter().any(|value| {
            value.to_str().is_ok_and(|value| {
                value
                    .split(',')
                    .any(|item| item.trim().eq_ignore_ascii_case(token))
            })
        })
    };
    let upgrade = has_token(header::CONNECTION, "upgrade")
        && has_token(header::UPGRADE, "websocket")
        && headers
            .get(header::SEC_WEBSOCKET_VERSION)
            .is_some_and(|version| version == "13");
    upgrade
        .then(|| headers.get(header::SEC_WEBSOCKET_KEY))
        .flatten()
}
