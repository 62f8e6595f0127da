//! `POST {endpoint}`: an invocation is acknowledged at once, then runs as a request of its thread's scope, and its
//! result is POSTed to the runtime's `callback_url`, unless the runtime cancelled the call.

use std::sync::Arc;

use axum::{
    body::Body,
    extract::State,
    response::{IntoResponse, Response as HttpResponse},
};
use http::{header, HeaderValue, StatusCode};
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tower::{service_fn, ServiceBuilder};
use tower_cancel::{CancelStack, ErrorObject, Id, Outbox, Request};

use super::{
    callback_url,
    deliver::Delivered,
    threads::{CallHold, Thread},
    ToolServer,
};
use crate::{
    body,
    call::{self, RpcService},
    front::{OnHangUp, BUSY_RETRY_AFTER_SECS},
    rap::{ids, output, wire::Invocation, Rap, ToolCall},
    scopes::Scoped,
};

/// The longest explanation of a refusal (its body, its log line).
pub(crate) const MAX_DETAIL_BYTES: usize = 256;

/// The longest `call_id` echoed back (a provider's id; it is only echoed, never looked up).
pub(crate) const MAX_CALL_ID_BYTES: usize = 1024;

pub(super) async fn invoke<S: RpcService>(
    State(server): State<ToolServer<S>>,
    request: http::Request<Body>,
) -> HttpResponse {
    let (parts, body) = request.into_parts();
    let config = server.config();
    let refuse = |status: StatusCode, detail: String| {
        config.counters.refused.increment();
        tracing::warn!(%status, %detail, "an invocation was refused");
        (status, detail).into_response()
    };
    if let Err(refused) = body::check_json(&parts.headers) {
        return refuse(refused.status, refused.detail.into());
    }
    let bytes = match server.endpoint.read_body(body).await {
        Ok(bytes) => bytes,
        Err(refused) => return refuse(refused.status, refused.detail.into()),
    };
    // An invocation that cannot be read has nowhere to send an error result: it is refused (the runtime records a
    // refusal as the call's error result). Everything after this point is answered 200 and by a result.
    let invocation = match read_invocation(&bytes) {
        Ok(invocation) => invocation,
        Err(detail) => return refuse(StatusCode::BAD_REQUEST, detail),
    };
    if config.refuse_private_callbacks {
        if let Err(internal) = callback_url::check_public(&invocation.callback_url) {
            return refuse(StatusCode::BAD_REQUEST, format!("callback_url: {internal}"));
        }
    }

    if server.endpoint.state().is_shutting_down() {
        return refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            "the tool server is shutting down".into(),
        );
    }
    // Past a bound, 503 with `Retry-After`: the runtime records the refusal as the call's error result, at once.
    let busy = |detail: String| {
        config.counters.refused.increment();
        tracing::warn!(thread = %invocation.group_id, call = %invocation.id, %detail, "an invocation was refused: busy");
        (
            StatusCode::SERVICE_UNAVAILABLE,
            [(
                header::RETRY_AFTER,
                HeaderValue::from(BUSY_RETRY_AFTER_SECS),
            )],
            detail,
        )
            .into_response()
    };
    let thread = match config
        .threads
        .lease_or_insert(invocation.group_id.as_str().into(), || {
            Thread::new(&invocation.group_id, server.endpoint.settings())
        }) {
        Ok(thread) => thread,
        Err(_full) => return busy("too many threads in progress".into()),
    };
    let id: Arc<str> = invocation.id.as_str().into();
    if thread.is_alive(&id) {
        // A second invocation of a call still in progress (the runtime retried one it thought lost): the first
        // one's result answers both. Checked before the bounds: the call has its room already.
        tracing::debug!(thread = %invocation.group_id, call = %invocation.id, "a call already in progress: not run again");
        return StatusCode::OK.into_response();
    }
    // Room in the server's bound and in the thread's, taken before the call is: a refused call leaves nothing.
    // Counted from here (not from the task's start), so that `in_flight` is never 0 while an accepted call waits
    // for its task.
    let admitted = match server
        .endpoint
        .front()
        .admit_one(false, Some(thread.in_flight()))
    {
        Ok(admitted) => admitted,
        Err(full) => {
            let whose = if thread.in_flight().in_use() >= thread.in_flight().max() {
                "this thread's"
            } else {
                "the tool server's"
            };
            return busy(format!(
                "too many calls in flight (at most {} in {whose}): try again later",
                full.max
            ));
        }
    };
    let Some(stop) = thread.accept(&id) else {
        // The same retry, come in between the check and here: its room is given back.
        tracing::debug!(thread = %invocation.group_id, call = %invocation.id, "a call already in progress: not run again");
        return StatusCode::OK.into_response();
    };
    config.counters.accepted.increment();
    // A shutdown that comes before the task opens its link finds the link refusing: the call starts out cancelled
    // and its runtime gets the shutdown's error result.
    let hold = CallHold::new(thread, id, admitted);
    tokio::spawn(run(server.clone(), invocation, parts, hold, stop));
    StatusCode::OK.into_response()
}

/// An invocation's body, read and checked: a JSON object of the invocation's shape, its ids valid, its `call_id`
/// at most [`MAX_CALL_ID_BYTES`], its `callback_url` an http(s) URL with a host. The error is the refusal's
/// detail, at most [`MAX_DETAIL_BYTES`] and an ellipsis.
pub(crate) fn read_invocation(bytes: &[u8]) -> Result<Invocation, String> {
    let invocation = if body::is_object(bytes) {
        serde_json::from_slice::<Invocation>(bytes)
    } else {
        Err(serde::de::Error::custom("not a JSON object"))
    };
    let invocation = match invocation {
        Ok(invocation) => invocation,
        Err(error) => {
            // serde's message may quote the offending value whole (megabytes): it is cut.
            let mut detail = format!("the invocation could not be read: {error}");
            if detail.len() > MAX_DETAIL_BYTES {
                let cut = (0..=MAX_DETAIL_BYTES)
                    .rev()
                    .find(|&at| detail.is_char_boundary(at))
                    .unwrap_or(0);
                detail.truncate(cut);
                detail.push_str("...");
            }
            return Err(detail);
        }
    };
    if let Err(invalid) = ids::validate(&invocation.group_id) {
        return Err(format!("group_id: {invalid}"));
    }
    if let Err(invalid) = ids::validate(&invocation.id) {
        return Err(format!("id: {invalid}"));
    }
    if invocation
        .call_id
        .as_ref()
        .is_some_and(|call_id| call_id.len() > MAX_CALL_ID_BYTES)
    {
        return Err("call_id: too long".into());
    }
    if let Err(invalid) = check_callback_url(&invocation.callback_url) {
        return Err(format!("callback_url: {invalid}"));
    }
    Ok(invocation)
}

/// The call, on a task of its own: the handler through the stack, then the result's delivery.
async fn run<S: RpcService>(
    server: ToolServer<S>,
    mut invocation: Invocation,
    parts: http::request::Parts,
    hold: CallHold,
    stop: CancellationToken,
) {
    let config = server.config();
    if invocation.arguments.is_null() {
        // Left out (the reference runtime's type defaults it): no arguments.
        invocation.arguments = Value::Object(Default::default());
    }
    let refusal = if !config.operations.contains(&invocation.operation) {
        Some(ErrorObject::method_not_found(&invocation.operation))
    } else if !invocation.arguments.is_object() {
        Some(ErrorObject::invalid_params(
            "the arguments must be an object",
        ))
    } else {
        None
    };
    let mut request = Request::new(
        Id::String(invocation.id.clone()),
        invocation.operation.clone(),
        std::mem::take(&mut invocation.arguments),
    );
    // The call's link, open while it runs: the shutdown reaches it there. A runtime does not hang up on a call
    // (it waits at its callback), so there is no hang-up to make a cancel of.
    let front = server.endpoint.front();
    let link = front.link(
        hold.thread().scope().connect_exchange(Outbox::closed()),
        OnHangUp::RunOn,
    );
    link.prepare(&mut request, Some(&parts));
    request.extensions_mut().insert(ToolCall::of(&invocation));
    let outcome = match refusal {
        None => call::run(server.endpoint.service.clone(), request).await,
        // Answered without the handler, but through a cancel layer of the thread all the same, so that a cancel
        // that came before the invocation still means no result.
        Some(refusal) => {
            let refuse = ServiceBuilder::new()
                .layer(CancelStack::new(Rap))
                .service(service_fn(move |_: Request| {
                    std::future::ready(Err::<Value, _>(refusal.clone()))
                }));
            call::run(refuse, request).await
        }
    }
    .map(|reply| reply.outcome);
    drop(link);
    let Some(outcome) = outcome else {
        // The runtime cancelled it (or closed its thread): it has put its own result in the conversation.
        config.counters.cancelled.increment();
        tracing::debug!(thread = %invocation.group_id, call = %invocation.id, "cancelled by the runtime: no result is sent");
        return;
    };
    let result = output::tool_result(&invocation, outcome);
    match config
        .callback
        .send(&invocation.callback_url, &result, &stop)
        .await
    {
        Delivered::Accepted => config.counters.delivered.increment(),
        Delivered::Failed => config.counters.undelivered.increment(),
        Delivered::Cancelled => {
            config.counters.cancelled.increment();
            tracing::debug!(thread = %invocation.group_id, call = %invocation.id, "cancelled by the runtime while its result was on its way: not sent");
        }
    }
    drop(hold);
}

fn check_callback_url(url: &str) -> Result<(), &'static str> {
    let uri: http::Uri = url.parse().map_err(|_| "not a URL")?;
    match uri.scheme_str() {
        Some("http" | "https") if uri.host().is_some() => Ok(()),
        Some("http" | "https") => Err("no host"),
        _ => Err("not an http or https URL"),
    }
}
