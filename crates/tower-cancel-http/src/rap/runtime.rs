//! The runtime's side of a tool call: invoke a tool server, wait for the result at the runtime's callback, and
//! cancel the call (notifying every tool server) when the caller gives up.
//!
//! The waiting is the core's [`Outgoing`] race (the invocation and its result against the caller's token, the
//! timeout and the future's drop), the same as a `Peer`'s calls and the ABP agent's; this file says only what RAP
//! does on each way it ends: take the call out of the table and, unless no tool server took it, POST
//! `cancel_tool_call` to every one without waiting.

use std::{
    collections::HashMap,
    fmt,
    future::{Future, IntoFuture},
    pin::{pin, Pin},
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex, MutexGuard,
    },
    time::Duration,
};

use axum::{body::Bytes, extract::State, response::IntoResponse, routing::post, Router};
use http::StatusCode;
use serde_json::Value;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use tower_cancel::outgoing::{Event, Outgoing, Owner, Stage};

use super::{
    notifier::Notifier,
    wire::{Invocation, ToolResult},
};

type Key = (Arc<str>, Arc<str>);

/// How long a tool server may take to acknowledge an invocation (it must answer at once, before any work).
pub const ACKNOWLEDGE_TIMEOUT: Duration = Duration::from_secs(30);
type Authorize = Arc<dyn Fn(reqwest::RequestBuilder) -> reqwest::RequestBuilder + Send + Sync>;

/// A runtime's tool calls: each [`call`](Self::call) POSTs an invocation and waits for its `tool_result` at the
/// runtime's callback ([`callback_router`](Self::callback_router); put your authentication on it with
/// `Router::route_layer`, since anyone who reaches it could complete a call); a call whose future is dropped, whose token
/// is cancelled or whose timeout passes sends `cancel_tool_call` to every tool server through the
/// [`Notifier`] (without waiting for them), and a result that arrives for it later is dropped.
///
/// ```no_run
/// use std::{future::IntoFuture, time::Duration};
/// use serde_json::json;
/// use tower_cancel_http::rap::{Notifier, Runtime};
///
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let notifier = Notifier::new(["http://127.0.0.1:4000"]).bearer("s3cret");
/// let runtime = Runtime::new("http://127.0.0.1:5000/callback", notifier).bearer("s3cret");
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:5000").await?;
/// tokio::spawn(tower_cancel_http::serve(listener, runtime.callback_router("/callback")).into_future());
///
/// let result = runtime
///     .call("http://127.0.0.1:4000/invoke", "thread-1", "call-1", "sleep", json!({"ms": 100}))
///     .timeout(Duration::from_secs(30))
///     .await?;
/// println!("{}", result.text.unwrap_or_default());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<Inner>,
}

struct Inner {
    callback_url: String,
    notifier: Notifier,
    client: reqwest::Client,
    authorize: Option<Authorize>,
    pending: Mutex<HashMap<Key, oneshot::Sender<ToolResult>>>,
    results: AtomicU64,
    discarded: AtomicU64,
}

impl Runtime {
    /// Calls whose results come to `callback_url` (where [`callback_router`](Self::callback_router) is served),
    /// cancelled through `notifier`.
    pub fn new(callback_url: impl Into<String>, notifier: Notifier) -> Self {
        Self {
            inner: Arc::new(Inner {
                callback_url: callback_url.into(),
                notifier,
                client: reqwest::Client::new(),
                authorize: None,
                pending: Mutex::default(),
                results: AtomicU64::new(0),
                discarded: AtomicU64::new(0),
            }),
        }
    }

    /// The HTTP client invocations are POSTed with.
    pub fn client(mut self, client: reqwest::Client) -> Self {
        self.inner_mut().client = client;
        self
    }

    /// Send `Authorization: Bearer token` with each invocation.
    pub fn bearer(self, token: impl AsRef<str>) -> Self {
        let value = format!("Bearer {}", token.as_ref());
        self.authorize(move |request| request.header(http::header::AUTHORIZATION, value.as_str()))
    }

    /// Adjust each invocation's request (a signature, headers of your own).
    pub fn authorize<F>(mut self, hook: F) -> Self
    where
        F: Fn(reqwest::RequestBuilder) -> reqwest::RequestBuilder + Send + Sync + 'static,
    {
        self.inner_mut().authorize = Some(Arc::new(hook));
        self
    }

    /// Where tool servers send this runtime's results.
    pub fn callback_url(&self) -> &str {
        &self.inner.callback_url
    }

    /// The notifier cancels go through.
    pub fn notifier(&self) -> &Notifier {
        &self.inner.notifier
    }

    /// Call `operation` of the tool server whose invocation endpoint is `endpoint`, as the call `tool_call_id` of
    /// thread `thread_id`. Nothing is sent until the returned call is awaited.
    pub fn call(
        &self,
        endpoint: impl Into<String>,
        thread_id: impl Into<String>,
        tool_call_id: impl Into<String>,
        operation: impl Into<String>,
        arguments: Value,
    ) -> OutgoingCall {
        OutgoingCall {
            runtime: self.clone(),
            endpoint: endpoint.into(),
            invocation: Invocation {
                operation: operation.into(),
                arguments,
                id: tool_call_id.into(),
                call_id: None,
                callback_url: self.inner.callback_url.clone(),
                group_id: thread_id.into(),
                thread_ancestors: None,
                user_id: None,
            },
            timeout: None,
            token: None,
        }
    }

    /// The runtime's callback endpoint at `path`: a `tool_result` for a call waiting for it completes that call;
    /// one for a call no longer waited for (cancelled, timed out, unknown) is dropped, as the spec says (200
    /// either way: the tool server has nothing to retry). A body that is not a callback message gets 400.
    pub fn callback_router(&self, path: &str) -> Router {
        Router::new()
            .route(path, post(callback))
            .with_state(self.clone())
    }

    /// How many calls wait for their result now.
    pub fn pending(&self) -> usize {
        self.pending_table().len()
    }

    /// Results handed to a waiting call, and results dropped (no call waited for them), since the start.
    pub fn results(&self) -> (u64, u64) {
        (
            self.inner.results.load(Ordering::Relaxed),
            self.inner.discarded.load(Ordering::Relaxed),
        )
    }

    fn pending_table(&self) -> MutexGuard<'_, HashMap<Key, oneshot::Sender<ToolResult>>> {
        // No step panics while the lock is held.
        self.inner
            .pending
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn inner_mut(&mut self) -> &mut Inner {
        Arc::get_mut(&mut self.inner).expect("configured before it is cloned")
    }
}

impl fmt::Debug for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runtime")
            .field("callback_url", &self.inner.callback_url)
            .field("pending", &self.pending())
            .finish_non_exhaustive()
    }
}

async fn callback(State(runtime): State<Runtime>, body: Bytes) -> impl IntoResponse {
    let message: Value = match serde_json::from_slice(&body) {
        Ok(message) => message,
        Err(error) => {
            tracing::warn!(%error, "a callback that is not JSON");
            return StatusCode::BAD_REQUEST;
        }
    };
    if message.get("type").and_then(Value::as_str) != Some("tool_result") {
        // subscription_event, oauth, user_choice, view_update: not a result; this runtime has no use for them.
        tracing::debug!(kind = ?message.get("type"), "a callback other than a tool result: ignored");
        return StatusCode::OK;
    }
    let result: ToolResult = match serde_json::from_value(message) {
        Ok(result) => result,
        Err(error) => {
            tracing::warn!(%error, "a tool result that could not be read");
            return StatusCode::BAD_REQUEST;
        }
    };
    let key: Key = (result.group_id.as_str().into(), result.id.as_str().into());
    let waiting = runtime.pending_table().remove(&key);
    if waiting.is_some_and(|waiting| waiting.send(result).is_ok()) {
        runtime.inner.results.fetch_add(1, Ordering::Relaxed);
    } else {
        // Cancelled, timed out, or never ours: the spec says drop it, never put it in a conversation.
        runtime.inner.discarded.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(thread = %key.0, call = %key.1, "a tool result no call waits for: dropped");
    }
    StatusCode::OK
}

/// One tool call of a [`Runtime`]: await it for the result. Until it is awaited nothing is sent.
#[must_use = "a call does nothing until it is awaited"]
pub struct OutgoingCall {
    runtime: Runtime,
    endpoint: String,
    invocation: Invocation,
    timeout: Option<Duration>,
    token: Option<CancellationToken>,
}

impl OutgoingCall {
    /// Give up after `timeout` (the spec sets none: a tool may take arbitrarily long), cancelling the call.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Give up when `token` is cancelled (the user interrupted the agent), cancelling the call.
    pub fn cancel_on(mut self, token: CancellationToken) -> Self {
        self.token = Some(token);
        self
    }

    /// The provider's second id, echoed in the result.
    pub fn call_id(mut self, call_id: impl Into<String>) -> Self {
        self.invocation.call_id = Some(call_id.into());
        self
    }

    /// The end user.
    pub fn user_id(mut self, user_id: impl Into<String>) -> Self {
        self.invocation.user_id = Some(user_id.into());
        self
    }

    /// The thread's ancestors, root first.
    pub fn thread_ancestors(mut self, ancestors: Vec<String>) -> Self {
        self.invocation.thread_ancestors = Some(ancestors);
        self
    }

    async fn run(self) -> Result<ToolResult, CallError> {
        let key: Key = (
            self.invocation.group_id.as_str().into(),
            self.invocation.id.as_str().into(),
        );
        let (sender, receiver) = oneshot::channel();
        {
            let mut pending = self.runtime.pending_table();
            if pending.contains_key(&key) {
                return Err(CallError::Duplicate);
            }
            pending.insert(key.clone(), sender);
        }
        // From here on, however this future ends before its result (dropped, timed out, interrupted), the call is
        // taken out of the table and the tool servers are told.
        let side = Side {
            runtime: self.runtime.clone(),
            key,
            // The cancel may be sent from a drop outside any runtime: it goes to this one.
            handle: tokio::runtime::Handle::current(),
        };
        let mut post = self
            .runtime
            .inner
            .client
            .post(&self.endpoint)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(serde_json::to_vec(&self.invocation).unwrap_or_default());
        if let Some(authorize) = &self.runtime.inner.authorize {
            post = authorize(post);
        }
        let answer = pin!(answer(post, receiver));
        let mut waiting = Outgoing::new(answer, side);
        if let Some(token) = self.token {
            waiting = waiting.cancel_on(token);
        }
        if let Some(timeout) = self.timeout {
            waiting = waiting.timeout(timeout);
        }
        // A result that is there wins over a timeout or a token firing at the same moment.
        let error = match (&mut waiting).await {
            Event::Answered(Answer::Result(result)) => return result,
            Event::Answered(Answer::NotTaken(error)) => {
                waiting.owner().forget();
                return Err(error);
            }
            Event::Answered(Answer::MaybeTaken(error)) => error,
            // No parent token is set: only the caller's.
            Event::Cancelled | Event::ParentCancelled => CallError::Cancelled,
            Event::TimedOut => CallError::TimedOut,
        };
        waiting.disarm();
        waiting.owner().send_cancel();
        Err(error)
    }
}

/// What the invocation and its callback came to, when they end before the token and the timeout.
enum Answer {
    /// The result came to the callback (or, never while the runtime lives, the callback table went away).
    Result(Result<ToolResult, CallError>),
    /// The tool server did not take the invocation, or it was never sent: no call runs anywhere, nothing to cancel.
    NotTaken(CallError),
    /// The invocation may have arrived (the connection broke, or it was not acknowledged in time): cancel it.
    MaybeTaken(CallError),
}

/// POST the invocation (acknowledged within [`ACKNOWLEDGE_TIMEOUT`]), then wait for its result at the callback.
async fn answer(post: reqwest::RequestBuilder, result: oneshot::Receiver<ToolResult>) -> Answer {
    match tokio::time::timeout(ACKNOWLEDGE_TIMEOUT, post.send()).await {
        Ok(Ok(response)) if response.status().is_success() => {}
        Ok(Ok(response)) => return Answer::NotTaken(CallError::Refused(response.status())),
        // An unusable URL or header.
        Ok(Err(error)) if error.is_builder() => {
            return Answer::NotTaken(CallError::Unreachable(error.to_string()))
        }
        // It may have arrived before the connection broke: tell the servers to be sure.
        Ok(Err(error)) => return Answer::MaybeTaken(CallError::Unreachable(error.to_string())),
        Err(_elapsed) => {
            let error = "the invocation was not acknowledged in time";
            return Answer::MaybeTaken(CallError::Unreachable(error.into()));
        }
    }
    Answer::Result(
        result
            .await
            .map_err(|_| CallError::Unreachable("the runtime's callback table was dropped".into())),
    )
}

impl IntoFuture for OutgoingCall {
    type Output = Result<ToolResult, CallError>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.run())
    }
}

impl fmt::Debug for OutgoingCall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OutgoingCall")
            .field("endpoint", &self.endpoint)
            .field("thread_id", &self.invocation.group_id)
            .field("tool_call_id", &self.invocation.id)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// The runtime's side of one call: its key, and what it does when the call ends without its result.
struct Side {
    runtime: Runtime,
    key: Key,
    handle: tokio::runtime::Handle,
}

impl Side {
    /// The invocation was not taken: out of the table, nothing to cancel.
    fn forget(&self) {
        self.runtime.pending_table().remove(&self.key);
    }

    /// Out of the table, and every tool server told.
    fn send_cancel(&self) {
        self.runtime.pending_table().remove(&self.key);
        let _runtime = self.handle.enter();
        // Fire and forget: the caller never waits for the servers (the Fanout, dropped, still delivers).
        let _fanout = self
            .runtime
            .inner
            .notifier
            .cancel_tool_call(&self.key.0, &self.key.1);
    }
}

impl Owner for Side {
    fn dropped(&mut self, _stage: Stage) {
        // The caller's future went before the call's end (a call that gives up by itself is disarmed first).
        tracing::debug!(thread = %self.key.0, call = %self.key.1, "a tool call given up: cancelling it");
        self.send_cancel();
    }
}

/// Why a tool call has no result.
#[derive(Debug)]
#[non_exhaustive]
pub enum CallError {
    /// The tool server answered the invocation with this status (not 2xx): it did not take the call.
    Refused(StatusCode),
    /// The tool server could not be reached, or did not acknowledge within [`ACKNOWLEDGE_TIMEOUT`] (the call was
    /// cancelled in case it arrived).
    Unreachable(String),
    /// The call's timeout passed (the call was cancelled).
    TimedOut,
    /// The call's token was cancelled (the call was cancelled).
    Cancelled,
    /// A call of this thread with this id is already waiting.
    Duplicate,
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::Refused(status) => {
                write!(f, "the tool server refused the invocation ({status})")
            }
            CallError::Unreachable(error) => {
                write!(f, "the tool server could not be reached: {error}")
            }
            CallError::TimedOut => f.write_str("the tool call timed out"),
            CallError::Cancelled => f.write_str("the tool call was cancelled"),
            CallError::Duplicate => {
                f.write_str("a call of this thread with this id is already waiting")
            }
        }
    }
}

impl std::error::Error for CallError {}
