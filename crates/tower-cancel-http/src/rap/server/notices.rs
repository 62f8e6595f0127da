//! The runtime's notices: `cancel_tool_call`, `close_thread`, and the `tool_call_status` question.
//!
//! The spec's rules for the two notices: 200 with an empty body whatever happened (found or not, cancelled or
//! not, a body that makes no sense), so the answer tells nothing about the server's calls; ids are untrusted
//! input. Before any of it, the authentication layer has turned away a stranger (401). A notice past its
//! client's rate limit is answered 200 too, and does nothing (a runtime never retries a notice, and the spec
//! allows no other status); a status question past it gets 429.

use std::time::Duration;

use axum::{
    body::Body,
    extract::State,
    response::{IntoResponse, Response as HttpResponse},
};
use http::{header, HeaderValue, StatusCode};
use serde::de::DeserializeOwned;
use tower_cancel::{CancelReason, Id};

use super::{client_limits::ClientLimits, threads::Thread, Limiters, ToolServer};
use crate::scopes::Scoped;
use crate::{
    body,
    rap::{
        ids,
        wire::{CallStatus, CancelToolCall, CloseThread},
    },
};

/// The largest notice body read: two ids of [`ids::MAX_ID_BYTES`] and their JSON fit many times over.
pub const MAX_NOTICE_BYTES: usize = 16 * 1024;

/// Why a thread is closed, in the reason its calls are cancelled with.
const THREAD_CLOSED: &str = "the thread was closed";

pub(super) async fn cancel_tool_call<S>(
    State(server): State<ToolServer<S>>,
    request: http::Request<Body>,
) -> HttpResponse {
    let config = server.config();
    config.counters.cancels.increment();
    if over_quota(&server, &request, "cancel_tool_call", |limiters| {
        &limiters.notices
    })
    .is_some()
    {
        return StatusCode::OK.into_response();
    }
    let Some(notice) = read::<CancelToolCall>(
        request,
        "cancel_tool_call",
        server.endpoint.settings().body_timeout,
    )
    .await
    else {
        return StatusCode::OK.into_response();
    };
    // A cancel before its invocation is remembered in the thread's scope, so the thread is made if need be; the
    // table and each scope's memory of early cancels are bounded.
    match config
        .threads
        .lease_or_insert(notice.thread_id.as_str().into(), || {
            Thread::new(&notice.thread_id, server.endpoint.settings())
        }) {
        Ok(thread) => {
            // A result on its way stops too (the handler's entry is gone by then).
            thread.cancel(&notice.tool_call_id);
            let outcome = thread.scope().cancel(
                &Id::String(notice.tool_call_id.clone()),
                CancelReason::peer(None),
            );
            tracing::debug!(thread = %notice.thread_id, call = %notice.tool_call_id, ?outcome, "cancel_tool_call");
        }
        Err(_full) => {
            tracing::warn!(thread = %notice.thread_id, call = %notice.tool_call_id, "cancel_tool_call: too many threads to remember it");
        }
    }
    StatusCode::OK.into_response()
}

pub(super) async fn close_thread<S>(
    State(server): State<ToolServer<S>>,
    request: http::Request<Body>,
) -> HttpResponse {
    let config = server.config();
    config.counters.closes.increment();
    if over_quota(&server, &request, "close_thread", |limiters| {
        &limiters.notices
    })
    .is_some()
    {
        return StatusCode::OK.into_response();
    }
    let Some(notice) = read::<CloseThread>(
        request,
        "close_thread",
        server.endpoint.settings().body_timeout,
    )
    .await
    else {
        return StatusCode::OK.into_response();
    };
    let closed = config.threads.remove(
        &notice.thread_id.as_str().into(),
        CancelReason::peer(Some(THREAD_CLOSED.into())),
    );
    tracing::debug!(thread = %notice.thread_id, known = closed.is_some(), "close_thread");
    StatusCode::OK.into_response()
}

pub(super) async fn tool_call_status<S>(
    State(server): State<ToolServer<S>>,
    request: http::Request<Body>,
) -> HttpResponse {
    if let Some(wait) = over_quota(&server, &request, "tool_call_status", |limiters| {
        &limiters.status
    }) {
        let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        return (
            StatusCode::TOO_MANY_REQUESTS,
            [(header::RETRY_AFTER, HeaderValue::from(seconds.max(1)))],
        )
            .into_response();
    }
    let alive = read::<CancelToolCall>(
        request,
        "tool_call_status",
        server.endpoint.settings().body_timeout,
    )
    .await
    .is_some_and(|notice| {
        server
            .config()
            .threads
            .get(&notice.thread_id.as_str().into())
            .is_some_and(|thread| thread.is_alive(&notice.tool_call_id))
    });
    body::json_response(StatusCode::OK, &CallStatus { alive })
}

/// Take one from the quota of the client that sent `request` (before its body is read); past it, how long until
/// it has one again (counted and logged).
fn over_quota<S>(
    server: &ToolServer<S>,
    request: &http::Request<Body>,
    endpoint: &'static str,
    quota: impl FnOnce(&Limiters) -> &ClientLimits,
) -> Option<std::time::Duration> {
    let limiters = server.config().limiter.as_ref()?;
    let client = limiters.clients.of(request.headers(), request.extensions());
    let wait = quota(limiters).check(client).err()?;
    server.config().counters.rate_limited.increment();
    let wait_ms = wait.as_millis() as u64;
    // A flood past the limit would be a flood of log lines too: one warning a second, the rest at debug level
    // (the stats count them all).
    if limiters.warn_now() {
        tracing::warn!(endpoint, ?client, wait_ms, "a notice past its client's rate limit: not acted on (further ones this second at debug level)");
    } else {
        tracing::debug!(
            endpoint,
            ?client,
            wait_ms,
            "a notice past its client's rate limit: not acted on"
        );
    }
    Some(wait)
}

/// A notice's body: the ids it carries are checked before anything is looked up with them.
pub(crate) trait Notice: DeserializeOwned {
    /// Each id with its field's name.
    fn ids(&self) -> impl Iterator<Item = (&'static str, &str)>;
}

impl Notice for CancelToolCall {
    fn ids(&self) -> impl Iterator<Item = (&'static str, &str)> {
        [
            ("thread_id", self.thread_id.as_str()),
            ("tool_call_id", self.tool_call_id.as_str()),
        ]
        .into_iter()
    }
}

impl Notice for CloseThread {
    fn ids(&self) -> impl Iterator<Item = (&'static str, &str)> {
        std::iter::once(("thread_id", self.thread_id.as_str()))
    }
}

/// The request's notice, or `None` (logged) if its body is not JSON, is over [`MAX_NOTICE_BYTES`], does not
/// arrive within `timeout`, or is not a notice ([`parse`]).
async fn read<T: Notice>(
    request: http::Request<Body>,
    endpoint: &'static str,
    timeout: Duration,
) -> Option<T> {
    let (parts, body) = request.into_parts();
    // The spec says JSON, and a runtime that says otherwise is not heard; one that says nothing is read as JSON
    // (its notice is never retried: a lost cancel costs a whole call).
    if parts.headers.contains_key(http::header::CONTENT_TYPE) {
        if let Err(refused) = body::check_json(&parts.headers) {
            tracing::warn!(endpoint, detail = refused.detail, "a notice ignored");
            return None;
        }
    }
    let bytes = match body::read(body, MAX_NOTICE_BYTES, timeout).await {
        Ok(bytes) => bytes,
        Err(refused) => {
            tracing::warn!(endpoint, detail = refused.detail, "a notice ignored");
            return None;
        }
    };
    parse(&bytes, endpoint)
}

/// A notice read from its body, or `None` (logged) if it is not a JSON object of that shape whose ids are valid.
pub(crate) fn parse<T: Notice>(bytes: &[u8], endpoint: &'static str) -> Option<T> {
    // Else `["t1", "c1"]` would cancel call c1 of thread t1 (see `body::is_object`).
    if !body::is_object(bytes) {
        tracing::warn!(endpoint, "a notice that is not a JSON object: ignored");
        return None;
    }
    let notice: T = match serde_json::from_slice(bytes) {
        Ok(notice) => notice,
        Err(error) => {
            tracing::warn!(endpoint, %error, "a notice that could not be read: ignored");
            return None;
        }
    };
    for (field, id) in notice.ids() {
        if let Err(invalid) = ids::validate(id) {
            tracing::warn!(endpoint, field, %invalid, "a notice with an invalid id: ignored");
            return None;
        }
    }
    Some(notice)
}
