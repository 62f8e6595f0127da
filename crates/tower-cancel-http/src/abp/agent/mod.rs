//! The agent side of ABP: a client that calls an app's capabilities over one WebSocket session, and cancels a
//! call when its caller gives up.

mod call;
mod io;
mod table;

use std::{
    fmt,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

use futures_util::StreamExt;
use serde::Serialize;
use serde_json::{Map, Value};
use tokio::sync::{mpsc, oneshot};

pub use call::{AgentCall, CallOutcome};

use self::{io::Outgoing, table::Shared};
use super::wire::{types, AgentInfo, Cancel, CancelResult, Envelope, ErrorBody, InitializeResult};

/// How long an agent waits, by default, for what the app owes it promptly: a cancel's acknowledgment (and the
/// cancelled call's result), a call's result past its timeout, the app's close after `shutdown`. Change it with
/// [`Agent::with_grace`].
pub const DEFAULT_GRACE: Duration = Duration::from_secs(1);

/// How long [`Agent::connect`] waits for the app's `initialize-result`.
pub const INITIALIZE_TIMEOUT: Duration = Duration::from_secs(10);

/// An ABP agent: one WebSocket session with an app, whose [`call`](Self::call)s are cancelled when their caller
/// gives up.
///
/// - A call without a `callId` gets a random UUID (sent in `options.callId`).
/// - A call is cancelled (a `capabilities/cancel` is sent) when its future is dropped, when its
///   [`CancellationToken`](tokio_util::sync::CancellationToken) is cancelled, or when its timeout has passed and
///   the app has not answered. When the call itself cancels, it returns the app's acknowledgment with the result
///   ([`CallOutcome`]); the result is reported as it came (a call that completed before the cancel reached the
///   app has its normal result, and the acknowledgment says `cancelled: false`).
/// - [`cancel`](Self::cancel) cancels any call by its `callId` and returns the acknowledgment.
/// - A result that comes for a call nobody waits for any more (its future was dropped) is dropped and counted
///   ([`late_results`](Self::late_results)).
/// - When the connection closes, every call and cancel waiting fails with [`AgentError::Closed`], and so does
///   every new one.
///
/// Frames the agent cannot read, envelopes of types it does not take and answers to nothing it sent are logged
/// (at `debug`) and ignored. The agent is a cheap handle: clones share the session, which is closed when the
/// last clone (and the last call) is dropped, or by [`shutdown`](Self::shutdown).
///
/// ```no_run
/// use std::time::Duration;
/// use serde_json::json;
/// use tokio_util::sync::CancellationToken;
/// use tower_cancel_http::abp::{wire::AgentInfo, Agent};
///
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let info = AgentInfo { name: "my-agent".into(), version: "1.0.0".into() };
/// let (agent, session) = Agent::connect("ws://127.0.0.1:3000/abp", info).await?;
/// println!("connected to {} as session {}", session.app.name, session.session_id);
///
/// let stop = CancellationToken::new();
/// let outcome = agent
///     .call("render", json!({ "url": "https://example.com" }))
///     .timeout(Duration::from_secs(30))
///     .cancel_on(stop.clone())
///     .await?;
/// match outcome.cancel {
///     Some(ack) => println!("cancelled ({}): {:?}", ack.cancelled, outcome.result),
///     None => println!("{:?}", outcome.result.data),
/// }
/// agent.shutdown().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Agent {
    inner: Arc<Inner>,
}

struct Inner {
    shared: Arc<Shared>,
    /// The writer's queue; dropping the last handle closes it, which closes the socket.
    outgoing: mpsc::UnboundedSender<Outgoing>,
    next_id: AtomicU64,
}

impl Agent {
    /// Open a WebSocket to the app at `url` (`ws://`), initialize a session as `info` (protocol `0.1`, asking for
    /// progress reports) and return the agent with the app's `initialize-result`.
    ///
    /// Fails with [`AgentError::Connect`] when the WebSocket cannot be opened, [`AgentError::Refused`] when the
    /// app answers the `initialize` with an `error` envelope, [`AgentError::TimedOut`] when it does not answer
    /// within [`INITIALIZE_TIMEOUT`], and [`AgentError::Closed`] when it closes first.
    pub async fn connect(
        url: &str,
        info: AgentInfo,
    ) -> Result<(Agent, InitializeResult), AgentError> {
        let (socket, session) = io::open(url, info, envelope_id(0)).await?;
        tracing::debug!(
            session = %session.session_id,
            app = %session.app.name,
            version = %session.protocol_version,
            "ABP session initialized"
        );
        let shared = Arc::new(Shared::new(DEFAULT_GRACE));
        let (sink, frames) = socket.split();
        let (outgoing, queue) = mpsc::unbounded_channel();
        tokio::spawn(io::read(frames, shared.clone()));
        tokio::spawn(io::write(sink, queue, shared.clone()));
        let inner = Inner {
            shared,
            outgoing,
            // 0 was the initialize's.
            next_id: AtomicU64::new(1),
        };
        let agent = Agent {
            inner: Arc::new(inner),
        };
        Ok((agent, session))
    }

    /// Wait `grace` instead of [`DEFAULT_GRACE`] for what the app owes promptly; for every clone of this agent.
    pub fn with_grace(self, grace: Duration) -> Self {
        self.inner.shared.set_grace(grace);
        self
    }

    /// Call `capability` with `params` (`null` sends none). Set the call's options on the returned
    /// [`AgentCall`], then await it.
    pub fn call(&self, capability: impl Into<String>, params: Value) -> AgentCall {
        AgentCall::new(self.clone(), capability.into(), params)
    }

    /// Cancel the call `call_id` (any call of this session, whoever waits for it) and return the app's
    /// acknowledgment: `cancelled: true` when the call is (or already was) cancelled, `cancelled: false` with a
    /// `reason` ("Operation not found", "Operation already completed") when not, or with an `error` when the app
    /// could not take the cancel. The call's own result goes to whoever waits for it.
    ///
    /// Fails with [`AgentError::TimedOut`] when no acknowledgment comes within the grace, and
    /// [`AgentError::Closed`] when the connection is (or gets) closed.
    pub async fn cancel(
        &self,
        call_id: &str,
        reason: Option<String>,
    ) -> Result<CancelResult, AgentError> {
        let (ack, acked) = oneshot::channel();
        let envelope_id = self.next_envelope_id();
        self.shared().register_cancel(&envelope_id, call_id, ack)?;
        // However this future ends, the cancel stops being waited for.
        let _waiting = AbandonCancel {
            shared: self.shared(),
            envelope_id: &envelope_id,
        };
        let cancel = Cancel {
            call_id: call_id.to_owned(),
            reason,
        };
        self.send(types::CANCEL, &envelope_id, cancel)?;
        match tokio::time::timeout(self.grace(), acked).await {
            Ok(Ok(Ok(ack))) => Ok(ack),
            Ok(Ok(Err(why))) => Err(AgentError::Protocol(why)),
            Ok(Err(_closed)) => Err(AgentError::Closed),
            Err(_elapsed) => Err(AgentError::TimedOut),
        }
    }

    /// End the session: send `shutdown`, close the socket, and wait (within the grace) for the app to close its
    /// side. Calls still waiting fail with [`AgentError::Closed`]. Fails with [`AgentError::Closed`] when the
    /// connection was closed already.
    pub async fn shutdown(&self) -> Result<(), AgentError> {
        if self.is_closed() {
            return Err(AgentError::Closed);
        }
        let envelope_id = self.next_envelope_id();
        self.send(types::SHUTDOWN, &envelope_id, Map::new())?;
        // Closed already if the send above went through and the writer is gone since: nothing left to close.
        let _ = self.inner.outgoing.send(Outgoing::Close);
        let shared = self.shared();
        if tokio::time::timeout(self.grace(), shared.ended.cancelled())
            .await
            .is_err()
        {
            tracing::debug!("the app did not close the ABP connection: closing it");
            shared.stop.cancel();
            shared.ended.cancelled().await;
        }
        Ok(())
    }

    /// How many calls wait for their result and cancels for their acknowledgment now. A dropped call is not
    /// counted from the moment it is dropped.
    pub fn pending(&self) -> usize {
        self.shared().pending()
    }

    /// How many results came for calls nobody waited for any more (dropped before their result), since the start.
    pub fn late_results(&self) -> u64 {
        self.shared().late_results()
    }

    /// Whether the connection is closed: by [`shutdown`](Self::shutdown), the app, or a network error.
    pub fn is_closed(&self) -> bool {
        self.shared().is_closed()
    }

    fn shared(&self) -> &Shared {
        &self.inner.shared
    }

    fn grace(&self) -> Duration {
        self.shared().grace()
    }

    fn next_envelope_id(&self) -> String {
        envelope_id(self.inner.next_id.fetch_add(1, Ordering::Relaxed))
    }

    /// Queue envelope `envelope_id` of `kind` for the writer.
    fn send(
        &self,
        kind: &str,
        envelope_id: &str,
        payload: impl Serialize,
    ) -> Result<(), AgentError> {
        let envelope = Envelope::new(kind, Some(envelope_id.to_owned()), payload);
        self.inner
            .outgoing
            .send(Outgoing::Text(envelope.to_text()))
            .map_err(|_| AgentError::Closed)
    }

    /// Cancel `call_id` without waiting for the acknowledgment (dropped quietly when it comes). Usable outside an
    /// async context: nothing here awaits.
    fn cancel_quietly(&self, call_id: &str, reason: String) {
        let envelope_id = self.next_envelope_id();
        self.shared().expect_quiet_ack(&envelope_id);
        let cancel = Cancel {
            call_id: call_id.to_owned(),
            reason: Some(reason),
        };
        // A closed connection has nothing left to cancel.
        let _ = self.send(types::CANCEL, &envelope_id, cancel);
    }
}

impl fmt::Debug for Agent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Agent")
            .field("pending", &self.pending())
            .field("late_results", &self.late_results())
            .field("closed", &self.is_closed())
            .finish_non_exhaustive()
    }
}

/// Envelope ids are unique per agent (the app answers each with the id it came with).
fn envelope_id(n: u64) -> String {
    format!("agent-{n}")
}

/// An explicit cancel waiting for its acknowledgment; dropped, it stops being waited for (a no-op once answered).
struct AbandonCancel<'a> {
    shared: &'a Shared,
    envelope_id: &'a str,
}

impl Drop for AbandonCancel<'_> {
    fn drop(&mut self) {
        self.shared.abandon_cancel(self.envelope_id);
    }
}

/// Why an agent has no answer.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum AgentError {
    /// The WebSocket could not be opened (the URL, the network, the HTTP upgrade).
    Connect(String),
    /// The app answered the `initialize` with this error (an `error` envelope).
    Refused(ErrorBody),
    /// The app's answer could not be read as what it claims to be.
    Protocol(String),
    /// The connection is closed, or closed before the answer came.
    Closed,
    /// The answer did not come in time: the `initialize-result` within [`INITIALIZE_TIMEOUT`], a cancel's
    /// acknowledgment (and, for a call cancelling itself, the call's result) within the grace. The cancelled
    /// call's result, if it comes later, is counted in [`Agent::late_results`].
    TimedOut,
}

impl fmt::Display for AgentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AgentError::Connect(why) => write!(f, "the ABP app could not be reached: {why}"),
            AgentError::Refused(error) => write!(
                f,
                "the ABP app refused the session: {} ({})",
                error.message, error.code
            ),
            AgentError::Protocol(why) => write!(f, "the ABP app's answer could not be read: {why}"),
            AgentError::Closed => f.write_str("the ABP connection is closed"),
            AgentError::TimedOut => f.write_str("the ABP app did not answer in time"),
        }
    }
}

impl std::error::Error for AgentError {}
