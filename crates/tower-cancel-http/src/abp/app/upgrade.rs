//! The door to a session: what an upgrade to a WebSocket must pass before the app accepts it.
//!
//! | the upgrade | the answer |
//! |---|---|
//! | from an `Origin` the app does not allow | 403, no session |
//! | once the app's shutdown has begun | 503, no session |
//! | past the app's limit of sessions | 503 with `Retry-After`, no session |
//! | otherwise | 101, and the session runs |

use axum::{
    extract::WebSocketUpgrade,
    response::{IntoResponse, Response as HttpResponse},
};
use http::{header, HeaderMap, HeaderValue, StatusCode};

use super::{limits::SESSIONS_FULL_RETRY_AFTER_SECS, session, sessions, Config};
use crate::{call::RpcService, front::Endpoint};

pub(super) async fn to_session<S: RpcService>(
    headers: HeaderMap,
    upgrade: WebSocketUpgrade,
    endpoint: Endpoint<S, Config>,
) -> HttpResponse {
    let config = endpoint.protocol();
    if !config.origins.allows(&headers) {
        // A page of another site, through the user's browser: as MCP's front end answers it.
        tracing::debug!(origin = ?headers.get(header::ORIGIN), "ABP upgrade from an origin not allowed");
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
    // The slot goes with the session; an upgrade that fails drops it with the callback.
    upgrade
        .max_message_size(max)
        .max_frame_size(max)
        .on_upgrade(move |socket| session::run(socket, endpoint, slot))
}
