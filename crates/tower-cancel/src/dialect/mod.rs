//! Dialects: how each protocol spells cancellation.
//!
//! A [`Dialect`] is a small value that says how a cancel message looks, which requests are cancellable, and what
//! a cancelled request gets on the wire. The built-in ones follow the protocols' texts and their reference
//! implementations:
//!
//! | dialect | cancel message | cancelled request gets |
//! |---|---|---|
//! | [`Lsp`] | `$/cancelRequest {id}`; `window/workDoneProgress/cancel {token}` for the request that created the token | error -32800 |
//! | [`Acp`] | `$/cancel_request {requestId}` | error -32800 |
//! | [`AcpDraft`] | `$/cancelRequest {id}`, only after `initialize` and if declared | error -32800 |
//! | [`Mcp`] | `notifications/cancelled {requestId, reason}` | no reply at all |
//! | [`Abp`] | `capabilities/cancel {callId, reason}`, itself answered ([`abp`]) | `{success: false, cancelled: true}` |
//! | [`Rap`] | none: the `/cancel_tool_call` endpoint (`tower-cancel-http`) | no result (an error result for a timeout or a shutdown) |
//!
//! Write your own by implementing the trait.

use std::time::Duration;

use http::Extensions;
use serde_json::Value;

use crate::{
    message::{ErrorObject, Id, WireRequest},
    outcome::CancelAck,
    progress_update::{ProgressEvent, ProgressUpdate},
    reason::CancelReason,
    session::SessionState,
};

pub mod abp;
mod acp;
mod group;
mod lsp;
mod mcp;
pub(crate) mod meta;
pub mod rap;
mod server_cancellable;

pub use abp::Abp;
pub use acp::{Acp, AcpDraft};
pub use group::GroupCancel;
pub use lsp::Lsp;
pub use mcp::Mcp;
pub use rap::Rap;
pub use server_cancellable::ServerCancellable;

/// A cancel message read off the wire.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CancelNotice {
    /// The id of the request to cancel.
    pub id: Id,
    /// The reason the peer gave, if the dialect carries one.
    pub reason: Option<String>,
}

/// How a dialect reads a notification.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Recognized {
    /// Not this dialect's cancel message (or one this side must not handle): pass it on to the service.
    NotACancel,
    /// A cancel message.
    Cancel(CancelNotice),
    /// This dialect's cancel method with params of the wrong shape: consumed and ignored, as every dialect says.
    Malformed,
    /// A cancel of a group of requests (ACP's `session/cancel`): the group's requests on the connection it arrived
    /// on are cancelled, then the notification is passed on to the service. No early cancel is remembered for it.
    CancelGroup(GroupCancel),
}

/// What a cancelled request gets.
#[derive(Clone, Debug, PartialEq)]
pub enum CancelledReply {
    /// An error reply.
    Error(ErrorObject),
    /// No reply at all (MCP).
    Nothing,
}

/// A protocol's rules for cancellation.
///
/// Object-safe: a [`Scope`](crate::Scope), its [`Peer`](crate::Peer)s and every request's progress reports hold
/// the one dialect value as an `Arc<dyn Dialect>`; the layers take it by value (and need it `Clone`).
pub trait Dialect: Send + Sync + 'static {
    /// A short name for logs.
    fn name(&self) -> &'static str;

    /// Read a notification: is it this dialect's cancel?
    fn recognize(&self, notification: &WireRequest, session: &SessionState) -> Recognized;

    /// Whether a request with this method can be cancelled in this session (`initialize` never can).
    fn is_cancellable(&self, method: &str, session: &SessionState) -> bool;

    /// Whether a request of `method` opens the conversation (`initialize`): its success marks the connection's
    /// [`SessionState`] initialized, which the ACP draft's rules depend on.
    fn initializes(&self, method: &str) -> bool {
        method == "initialize"
    }

    /// The reply a request cancelled for `reason` gets. `server_cancellable` tells whether the request's method
    /// opted in to being cancelled by the server (see [`Dialect::is_server_cancellable`]).
    fn cancelled_reply(&self, reason: &CancelReason, server_cancellable: bool) -> CancelledReply;

    /// Whether requests of `method` opted in to a distinct reply when the server itself cancels them (LSP 3.17's
    /// ServerCancelled, -32802). Asked once per request, so keep it cheap.
    fn is_server_cancellable(&self, _method: &str) -> bool {
        false
    }

    /// Whether a request of `method` that a group cancel ended ([`CancelReason::Group`]) is answered with the
    /// result [`group_cancelled_result`](Self::group_cancelled_result) instead of the
    /// [cancelled reply](Self::cancelled_reply) (ACP's `session/prompt`, whose cancelled turn is the result
    /// `{"stopReason":"cancelled"}`). Asked once per request, so keep it cheap. `false` by default.
    fn answers_group_cancel(&self, _method: &str) -> bool {
        false
    }

    /// The result a request that [answers group cancels](Self::answers_group_cancel) gets when one ended it.
    fn group_cancelled_result(&self, _reason: &CancelReason) -> Value {
        Value::Null
    }

    /// The progress token a request carries, if the dialect has progress and the request asked for it: in its
    /// params, or (ABP) in what its transport put on its [`Request`](crate::Request)'s `extensions`.
    fn progress_token(&self, _request: &WireRequest, _extensions: &Extensions) -> Option<Value> {
        None
    }

    /// The notification that carries a progress event for `token`, if the dialect has one for it.
    fn progress_notification(
        &self,
        _token: &Value,
        _event: ProgressEvent<'_>,
    ) -> Option<WireRequest> {
        None
    }

    /// Read a progress notification the peer sent about one of this side's requests: its token and the report.
    fn read_progress(&self, _notification: &WireRequest) -> Option<(Value, ProgressUpdate)> {
        None
    }

    /// Ask for progress in the params of a request this side sends, under `token`. Returns `false` if the
    /// dialect has no progress or the params cannot carry a token (they are not an object).
    fn attach_progress_token(&self, _params: &mut Value, _token: &Value) -> bool {
        false
    }

    /// The progress token a request this side sends creates, if it is the dialect's request for that (LSP's
    /// `window/workDoneProgress/create {token}`). A handler's child [`Peer`](crate::Peer) binds the token to the
    /// handler's request before it writes the request, so that the peer's cancel of the token
    /// (`window/workDoneProgress/cancel`) finds it.
    fn progress_created(&self, _outgoing: &WireRequest) -> Option<Id> {
        None
    }

    /// The method and params of the request that asks the peer to accept a progress token this side made
    /// (LSP's `window/workDoneProgress/create {token}`), if the dialect has one
    /// ([`Request::create_progress`](crate::Request::create_progress)).
    fn create_progress(&self, _token: &Id) -> Option<(&'static str, Value)> {
        None
    }

    /// Tell the next hop how long a request this side sends may run: write `remaining` (whole milliseconds,
    /// rounded down, so that a hop never extends its caller's deadline) into `params._meta.<field>`, the field
    /// the receiving [`TimeoutLayer::from_meta`](crate::timeout::TimeoutLayer::from_meta) reads. Called only for a
    /// request made inside a handler whose request has a deadline. Returns `false` if nothing was written: the
    /// params are neither an object nor `null` (or their `_meta` is not an object), or the dialect carries its
    /// timeouts elsewhere (ABP's `options.timeout`, RAP's runtime).
    fn attach_deadline(&self, params: &mut Value, field: &str, remaining: Duration) -> bool {
        let Some(meta) = meta::meta_object(params) else {
            return false;
        };
        let millis = u64::try_from(remaining.as_millis()).unwrap_or(u64::MAX);
        meta.insert(field.to_owned(), Value::from(millis));
        true
    }

    /// Whether a handler that stops cooperatively may answer with a partial result (LSP and ACP allow it).
    fn allows_partial_result(&self) -> bool {
        true
    }

    /// The cancel message this side sends to cancel its own request `id`, for `reason` (a dialect whose message
    /// carries a reason renders it; the others leave it out).
    fn cancel_message(&self, id: &Id, reason: &CancelReason) -> WireRequest;

    /// Look at an incoming request before it is dispatched (for example, read capabilities from `initialize`).
    fn observe_request(&self, _request: &WireRequest, _session: &SessionState) {}

    /// Look at the result of a request this side sent (for example, read the peer's capabilities from the
    /// `initialize` result).
    fn observe_response(&self, _method: &str, _result: &Value, _session: &SessionState) {}

    /// Whether this side may send a cancel for its own request of `method` (never for `initialize`; in the ACP
    /// draft only to a peer that declared the capability).
    fn may_send_cancel(&self, method: &str, _session: &SessionState) -> bool {
        method != "initialize"
    }

    /// Whether this dialect answers a peer's cancel with an acknowledgment (ABP's `capabilities/cancel-result`).
    /// The transport then hands each cancel to [`Connection::acknowledge_cancel`](crate::scope::Connection::acknowledge_cancel)
    /// and sends what [`acknowledge`](Self::acknowledge) renders; a scope made with such a dialect remembers how
    /// its last requests ended, so a cancel of a finished request is told from one of an unknown id.
    fn acknowledges_cancels(&self) -> bool {
        false
    }

    /// Whether a peer's cancel for an id that is not in flight is remembered as an early cancel, so that a request
    /// of that id arriving after it starts out cancelled (LSP, ACP, MCP: a cancel may overtake its request, on
    /// separate HTTP posts or across replicas). `false` where a cancel cannot overtake its request (ABP: one
    /// WebSocket delivers in order): such a cancel is for no request, its answer says so, and a request of that id
    /// arriving after it runs. A [`Scope`](crate::scope::Scope) made with such a dialect keeps no early cancels
    /// ([`Registry::without_early_cancels`](crate::registry::Registry::without_early_cancels)).
    fn remembers_early_cancels(&self) -> bool {
        true
    }

    /// The acknowledgment of the peer's cancel `notice`, with the outcome the request's lifecycle decided. `None`
    /// for dialects whose cancels are not answered (all the JSON-RPC ones).
    fn acknowledge(&self, _notice: &CancelNotice, _ack: CancelAck) -> Option<Value> {
        None
    }

    /// Whether a caller keeps waiting for the peer's reply after it sent a cancel (LSP and ACP: the peer still
    /// answers, with -32800 or a partial result) or stops at once (MCP: the peer sends nothing).
    fn waits_after_cancel(&self) -> bool {
        true
    }

    /// Whether a request of `method` is one the other side may end with this dialect's cancel message, and one
    /// whose end this side announces with it when it ends the request itself (MCP's `subscriptions/listen`: a
    /// stream of notifications that only a cancel ends). `false` by default.
    ///
    /// Serving such a request, the cancel layer sends [`end_notice`](Self::end_notice) whenever this side ends it
    /// (its handler answered, a timeout, a shutdown, a parent's cancel), never when the peer did (its cancel, its
    /// hang-up); the notice is the request's end, and no reply follows it. A handler that fails (a subscription
    /// refused) is answered with its error, as any request. Calling one, a [`Peer`](crate::Peer) takes the peer's cancel of its id
    /// as the end of the call ([`PeerError::CancelledByPeer`](crate::PeerError::CancelledByPeer)).
    fn ends_with_cancel(&self, _method: &str) -> bool {
        false
    }

    /// What this side sends when it ends request `id` of a method that [ends with a
    /// cancel](Self::ends_with_cancel): `reason` is why it was cancelled, or `None` when its handler returned.
    fn end_notice(&self, id: &Id, reason: Option<&CancelReason>) -> WireRequest {
        self.cancel_message(id, reason.unwrap_or(&CancelReason::local("ended")))
    }

    /// Whether this side may send requests of its own to the peer in this conversation (MCP's stateless revision
    /// has none from server to client: its calls fail at once with
    /// [`PeerError::NotAllowed`](crate::PeerError::NotAllowed)). `true` by default.
    fn may_send_request(&self, _method: &str, _session: &SessionState) -> bool {
        true
    }

    /// Whether the dialect carries a W3C trace context (`traceparent`, `tracestate`, `baggage`) in a request's
    /// `params._meta` (MCP, SEP-414; ACP). With the `opentelemetry` feature, the cancel layer makes an incoming
    /// request's span a child of the context it carries, and a [`Peer`](crate::Peer) writes the current span's
    /// context into the requests it sends. `false` by default (LSP has no `_meta`).
    fn carries_trace_context(&self) -> bool {
        false
    }
}

/// The -32800 reply of LSP and ACP.
pub(crate) fn request_cancelled(message: &str) -> CancelledReply {
    CancelledReply::Error(ErrorObject::new(
        crate::message::code::REQUEST_CANCELLED,
        message,
    ))
}

/// Recognize a cancel notification whose method is `method` and whose params read as `P`.
pub(crate) fn recognize_cancel<P: serde::de::DeserializeOwned>(
    notification: &WireRequest,
    method: &str,
    notice: impl FnOnce(P) -> CancelNotice,
) -> Recognized {
    if notification.method() != method {
        return Recognized::NotACancel;
    }
    match cancel_params::<P>(notification) {
        Some(params) => Recognized::Cancel(notice(params)),
        None => Recognized::Malformed,
    }
}

/// The object at `params` (made one if it is `null`), or `None` if the params are something else.
pub(crate) fn params_object(params: &mut Value) -> Option<&mut serde_json::Map<String, Value>> {
    if params.is_null() {
        *params = Value::Object(Default::default());
    }
    params.as_object_mut()
}

/// Read `params` of a cancel notification into `T`, or `None` if they have the wrong shape.
fn cancel_params<T: serde::de::DeserializeOwned>(notification: &WireRequest) -> Option<T> {
    // Every dialect's cancel params are an object. serde's derived `Deserialize` for a struct also accepts a JSON
    // array (by position), so without this check `[7]` would cancel request 7: a shape no protocol allows, which
    // must be ignored like any other malformed cancel.
    let raw = notification.params()?.get();
    if !raw.trim_start().starts_with('{') {
        return None;
    }
    notification.params_as().ok()
}
