//! One capability call of an [`Agent`]: the builder, and the future that waits for its result and cancels the call
//! when its caller gives up.
//!
//! The waiting is the core's [`Outgoing`] race (the result against the caller's token, the timeout's backstop and
//! the future's drop), the same as a `Peer`'s calls and the RAP runtime's; this file says only what ABP does on
//! each way it ends: send a `capabilities/cancel` and wait a grace for its acknowledgment and the result, or, on a
//! drop, take the call out of the table and cancel it without waiting.

use std::{
    fmt,
    future::{Future, IntoFuture},
    pin::Pin,
    time::Duration,
};

use serde_json::Value;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use tower_cancel::outgoing::{Event, Outgoing, Owner, Stage};

use super::{
    table::{CallReply, ProgressFn},
    Agent, AgentError,
};
use crate::abp::wire::{types, Call, CallOptions, CallResult, Cancel, CancelResult, Progress};

/// One `capabilities/call` of an [`Agent`], made by [`Agent::call`]: set its options, then `.await` it for its
/// [`CallOutcome`]. Nothing is sent until it is awaited.
///
/// The call is cancelled (a `capabilities/cancel` naming its `callId` is sent) when:
///
/// - its token ([`cancel_on`](Self::cancel_on)) is cancelled: the call then waits for the app's acknowledgment
///   *and* the call's own result, and returns both ([`CallOutcome::cancel`]); the result is whatever the app
///   answered (`cancelled: true`, or the normal result when the call completed first);
/// - no result has come [`grace`](Agent::with_grace) after its [`timeout`](Self::timeout) (the app enforces the
///   timeout itself, answering `cancelled: true` with code `TIMEOUT`; this is the agent's backstop against an app
///   that does not): it waits as for a token;
/// - its future is dropped before the result: the call stops being waited for at once, the cancel is sent
///   without waiting (its acknowledgment is dropped quietly), and a result that still comes is counted in
///   [`Agent::late_results`].
///
/// After a cancel, an acknowledgment and result that do not both come within the grace make the call fail with
/// [`AgentError::TimedOut`].
#[must_use = "a call does nothing until it is awaited"]
pub struct AgentCall {
    agent: Agent,
    capability: String,
    params: Value,
    call_id: Option<String>,
    timeout: Option<Duration>,
    progress_token: Option<Value>,
    on_progress: Option<ProgressFn>,
    token: Option<CancellationToken>,
    reason: Option<String>,
}

/// What a call ended with.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct CallOutcome {
    /// The call's `callId` (the one given, or the one generated).
    pub call_id: String,
    /// The app's `call-result`, as it came: check [`CallResult::is_cancelled`] and `error.code` (`CANCELLED`,
    /// `TIMEOUT`) to tell a cancelled call from one that completed.
    pub result: CallResult,
    /// The app's acknowledgment of the cancel this call sent (its token was cancelled, or its timeout's backstop
    /// passed); `None` when it sent none.
    pub cancel: Option<CancelResult>,
}

/// Why a call stopped waiting for its result by itself.
#[derive(Clone, Copy, Debug)]
enum GaveUp {
    Token,
    Backstop,
}

impl AgentCall {
    pub(super) fn new(agent: Agent, capability: String, params: Value) -> Self {
        Self {
            agent,
            capability,
            params,
            call_id: None,
            timeout: None,
            progress_token: None,
            on_progress: None,
            token: None,
            reason: None,
        }
    }

    /// The call's `callId` (sent in `options.callId`; cancels name it). Without one, a random UUID is generated.
    pub fn call_id(mut self, call_id: impl Into<String>) -> Self {
        self.call_id = Some(call_id.into());
        self
    }

    /// Ask the app to cancel the call after `timeout` (sent as `options.timeout`, in milliseconds). See the type's
    /// docs for the agent's own backstop.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Ask for `progress` envelopes whose `operationId` is `token` (sent as `options.progressToken`).
    pub fn progress_token(mut self, token: Value) -> Self {
        self.progress_token = Some(token);
        self
    }

    /// Hand the call's progress reports to `callback`. Without a [`progress_token`](Self::progress_token) the
    /// `callId` is used as the token. The callback runs on the agent's reader task: keep it short (send to a
    /// channel if there is work to do).
    pub fn on_progress<F>(mut self, callback: F) -> Self
    where
        F: Fn(Progress) + Send + Sync + 'static,
    {
        self.on_progress = Some(std::sync::Arc::new(callback));
        self
    }

    /// Cancel the call when `token` is cancelled (the user interrupted the agent), returning the acknowledgment
    /// with the result.
    pub fn cancel_on(mut self, token: CancellationToken) -> Self {
        self.token = Some(token);
        self
    }

    /// The `reason` of the cancel this call sends, if it sends one.
    pub fn reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }

    async fn run(self) -> Result<CallOutcome, AgentError> {
        let call_id = self
            .call_id
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        // A callback without a token of the caller's: the callId is unique to the call, so it serves as one.
        let progress_token = self.progress_token.or_else(|| {
            self.on_progress
                .as_ref()
                .map(|_| Value::String(call_id.clone()))
        });
        let agent = self.agent;
        let envelope_id = agent.next_envelope_id();
        let (reply, replied) = oneshot::channel();
        let progress = progress_token.as_ref().zip(self.on_progress);
        agent
            .shared()
            .register_call(&envelope_id, reply, progress)?;
        // From here on, however this future ends before its answer, the call stops being waited for.
        let side = Side {
            agent: agent.clone(),
            envelope_id,
            call_id,
            reason: self.reason,
            cancel_id: None,
        };
        let mut waiting = Outgoing::new(replied, side);
        if let Some(token) = self.token {
            waiting = waiting.cancel_on(token);
        }
        // The app enforces the timeout itself: the agent's backstop waits a grace longer.
        if let Some(backstop) = self
            .timeout
            .and_then(|timeout| timeout.checked_add(agent.grace()))
        {
            waiting = waiting.timeout(backstop);
        }
        let side = waiting.owner();
        let options = CallOptions {
            timeout: self.timeout.map(millis),
            progress_token,
            call_id: Some(side.call_id.clone()),
        };
        let call = Call {
            capability: self.capability,
            params: Some(self.params).filter(|params| !params.is_null()),
            options: Some(options),
            call_id: None,
        };
        agent.send(types::CALL, &side.envelope_id, call)?;
        // A result that is there wins over a token or a backstop firing at the same moment.
        let gave_up = match (&mut waiting).await {
            Event::Answered(reply) => {
                return outcome(waiting.owner().call_id.clone(), reply, None);
            }
            // No parent token is set: only the caller's.
            Event::Cancelled | Event::ParentCancelled => GaveUp::Token,
            Event::TimedOut => GaveUp::Backstop,
        };
        cancel_and_wait(waiting, gave_up).await
    }
}

impl IntoFuture for AgentCall {
    type Output = Result<CallOutcome, AgentError>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.run())
    }
}

impl fmt::Debug for AgentCall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentCall")
            .field("capability", &self.capability)
            .field("call_id", &self.call_id)
            .field("timeout", &self.timeout)
            .field("progress_token", &self.progress_token)
            .field("cancel_on", &self.token.is_some())
            .finish_non_exhaustive()
    }
}

/// A call waiting for its result: the [`Outgoing`] race, owned by the agent's side of the call.
type Waiting = Outgoing<oneshot::Receiver<CallReply>, Side>;

/// The agent's side of one call: its ids, and what it does when the call is dropped before its answer.
struct Side {
    agent: Agent,
    envelope_id: String,
    call_id: String,
    reason: Option<String>,
    /// The envelope id of the cancel this call sent, whose acknowledgment stops being waited for when the call
    /// goes (a no-op once it came).
    cancel_id: Option<String>,
}

/// Cancel the call, and wait (within the grace) for both the acknowledgment and the call's result.
async fn cancel_and_wait(mut waiting: Waiting, gave_up: GaveUp) -> Result<CallOutcome, AgentError> {
    let side = waiting.owner();
    let agent = side.agent.clone();
    tracing::debug!(call = %side.call_id, ?gave_up, "cancelling an ABP call");
    let (ack, acked) = oneshot::channel();
    let cancel_id = agent.next_envelope_id();
    agent
        .shared()
        .register_cancel(&cancel_id, &side.call_id, ack)?;
    let cancel = Cancel {
        call_id: side.call_id.clone(),
        reason: Some(side.reason_for(gave_up)),
    };
    waiting.owner_mut().cancel_id = Some(cancel_id.clone());
    agent.send(types::CANCEL, &cancel_id, cancel)?;
    // The app acknowledges before it answers the call; either may be missing only if it misbehaves.
    let late_answer = std::future::poll_fn(|cx| waiting.poll_answer(cx));
    let exchange =
        tokio::time::timeout(agent.grace(), async { tokio::join!(acked, late_answer) }).await;
    let Ok((ack, reply)) = exchange else {
        tracing::debug!(call = %waiting.owner().call_id, "no acknowledgment and result within the grace");
        return Err(AgentError::TimedOut);
    };
    let ack = match ack {
        Ok(Ok(ack)) => ack,
        Ok(Err(why)) => return Err(AgentError::Protocol(why)),
        Err(_closed) => return Err(AgentError::Closed),
    };
    outcome(waiting.owner().call_id.clone(), reply, Some(ack))
}

impl Side {
    fn reason_for(&self, gave_up: GaveUp) -> String {
        self.reason.clone().unwrap_or_else(|| {
            match gave_up {
                GaveUp::Token => "cancelled by the agent",
                GaveUp::Backstop => "the call's timeout passed",
            }
            .to_owned()
        })
    }
}

impl Owner for Side {
    fn dropped(&mut self, stage: Stage) {
        // Its result, when it comes, is a late one.
        let was_waiting = self.agent.shared().abandon_call(&self.envelope_id);
        match stage {
            // Nothing was sent to cancel it yet; unless its result came (or the connection closed) just before the
            // drop.
            Stage::Waiting if was_waiting => {
                tracing::debug!(call = %self.call_id, "an ABP call dropped before its result: cancelling it");
                let reason = self
                    .reason
                    .clone()
                    .unwrap_or_else(|| "the agent stopped waiting".to_owned());
                self.agent.cancel_quietly(&self.call_id, reason);
            }
            // It gave up: its cancel went out (or the connection is closed), and its acknowledgment goes with `Side`.
            Stage::Waiting | Stage::GaveUp => {}
        }
    }
}

impl Drop for Side {
    fn drop(&mut self) {
        if let Some(cancel_id) = &self.cancel_id {
            self.agent.shared().abandon_cancel(cancel_id);
        }
    }
}

/// The outcome of a call from its answer: a result the app sent, or why there is none.
fn outcome(
    call_id: String,
    reply: Result<CallReply, oneshot::error::RecvError>,
    cancel: Option<CancelResult>,
) -> Result<CallOutcome, AgentError> {
    let result = reply
        .map_err(|_closed| AgentError::Closed)?
        .map_err(AgentError::Protocol)?;
    Ok(CallOutcome {
        call_id,
        result,
        cancel,
    })
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
