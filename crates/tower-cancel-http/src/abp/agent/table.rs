//! What an agent waits for: calls awaiting their `call-result`, cancels awaiting their `cancel-result`, the
//! progress callbacks of calls, and the answers it still expects but no longer waits for.
//!
//! The reader task delivers into this table; the callers' futures register and, when they go, abandon their
//! entries. One lock, never held across an `.await` nor while user code (a progress callback) runs.

use std::{
    collections::{HashMap, VecDeque},
    panic::{self, AssertUnwindSafe},
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex, MutexGuard,
    },
    time::Duration,
};

use serde_json::Value;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::AgentError;
use crate::abp::wire::{CallResult, CancelResult, ErrorBody, Progress};

/// A call's progress callback.
pub(super) type ProgressFn = Arc<dyn Fn(Progress) + Send + Sync>;
/// A call's answer: its result, or why the `call-result` could not be read.
pub(super) type CallReply = Result<CallResult, String>;
/// A cancel's answer: its acknowledgment, or why the `cancel-result` could not be read.
pub(super) type CancelReply = Result<CancelResult, String>;

/// How many answers nobody waits for are remembered: past it the oldest are forgotten, and an answer that still
/// comes for one of them is taken for an unknown one (ignored, not counted). Bounds what an app that never answers
/// a dropped call can make an agent keep.
const MAX_STRAYS: usize = 1024;

/// The state the agent's handle, its calls and its reader and writer tasks share.
pub(super) struct Shared {
    table: Mutex<Table>,
    late_results: AtomicU64,
    grace_nanos: AtomicU64,
    /// Cancelled once the connection is over and every waiter has failed (the reader has ended).
    pub(super) ended: CancellationToken,
    /// Tells the reader to stop at once (the writer failed, or the app did not close when asked).
    pub(super) stop: CancellationToken,
}

#[derive(Default)]
struct Table {
    closed: bool,
    /// By the envelope id of the `capabilities/call`.
    calls: HashMap<String, CallWaiter>,
    /// By the envelope id of the `capabilities/cancel`.
    cancels: HashMap<String, CancelWaiter>,
    /// By the progress token as JSON text, with the envelope id of the call that registered it.
    progress: HashMap<String, (String, ProgressFn)>,
    strays: Strays,
}

/// Who waits for a call's `call-result`.
struct CallWaiter {
    reply: oneshot::Sender<CallReply>,
    progress_key: Option<String>,
}

/// Who waits for a cancel's `cancel-result`.
struct CancelWaiter {
    call_id: String,
    reply: oneshot::Sender<CancelReply>,
}

impl Shared {
    pub(super) fn new(grace: Duration) -> Self {
        let shared = Self {
            table: Mutex::default(),
            late_results: AtomicU64::new(0),
            grace_nanos: AtomicU64::new(0),
            ended: CancellationToken::new(),
            stop: CancellationToken::new(),
        };
        shared.set_grace(grace);
        shared
    }

    pub(super) fn grace(&self) -> Duration {
        Duration::from_nanos(self.grace_nanos.load(Ordering::Relaxed))
    }

    pub(super) fn set_grace(&self, grace: Duration) {
        let nanos = u64::try_from(grace.as_nanos()).unwrap_or(u64::MAX);
        self.grace_nanos.store(nanos, Ordering::Relaxed);
    }

    pub(super) fn late_results(&self) -> u64 {
        self.late_results.load(Ordering::Relaxed)
    }

    pub(super) fn pending(&self) -> usize {
        let table = self.lock();
        table.calls.len() + table.cancels.len()
    }

    pub(super) fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// Wait for the answer to call envelope `envelope_id`; `progress` routes the call's progress reports.
    pub(super) fn register_call(
        &self,
        envelope_id: &str,
        reply: oneshot::Sender<CallReply>,
        progress: Option<(&Value, ProgressFn)>,
    ) -> Result<(), AgentError> {
        let mut table = self.lock();
        if table.closed {
            return Err(AgentError::Closed);
        }
        let progress_key = progress.map(|(token, callback)| {
            let key = token.to_string();
            // A second call with the same token takes its reports over: the app could not tell them apart either.
            table
                .progress
                .insert(key.clone(), (envelope_id.to_owned(), callback));
            key
        });
        let call = CallWaiter {
            reply,
            progress_key,
        };
        table.calls.insert(envelope_id.to_owned(), call);
        Ok(())
    }

    /// Wait for the answer to cancel envelope `envelope_id`, which cancels `call_id`.
    pub(super) fn register_cancel(
        &self,
        envelope_id: &str,
        call_id: &str,
        reply: oneshot::Sender<CancelReply>,
    ) -> Result<(), AgentError> {
        let mut table = self.lock();
        if table.closed {
            return Err(AgentError::Closed);
        }
        let cancel = CancelWaiter {
            call_id: call_id.to_owned(),
            reply,
        };
        table.cancels.insert(envelope_id.to_owned(), cancel);
        Ok(())
    }

    /// Expect the acknowledgment of cancel envelope `envelope_id` without waiting for it (a drop's cancel).
    pub(super) fn expect_quiet_ack(&self, envelope_id: &str) {
        let mut table = self.lock();
        if !table.closed {
            table.strays.expect(envelope_id.to_owned(), Stray::Ack);
        }
    }

    /// Stop waiting for call envelope `envelope_id`: its result, when it comes, is a late one. Whether it was still
    /// waited for (no result had come).
    pub(super) fn abandon_call(&self, envelope_id: &str) -> bool {
        let mut table = self.lock();
        let Some(call) = table.take_call(envelope_id) else {
            return false;
        };
        table.strays.expect(envelope_id.to_owned(), Stray::Result);
        drop(table);
        drop(call);
        true
    }

    /// Stop waiting for cancel envelope `envelope_id`: its acknowledgment, when it comes, is dropped quietly.
    pub(super) fn abandon_cancel(&self, envelope_id: &str) {
        let mut table = self.lock();
        if table.cancels.remove(envelope_id).is_some() {
            table.strays.expect(envelope_id.to_owned(), Stray::Ack);
        }
    }

    /// A `capabilities/call-result` answering envelope `id`.
    pub(super) fn deliver_call(&self, id: Option<&str>, reply: CallReply) {
        let mut table = self.lock();
        let Some(id) = id else {
            tracing::debug!("a call-result without an id: ignored");
            return;
        };
        if let Some(call) = table.take_call(id) {
            drop(table);
            if call.reply.send(reply).is_err() {
                // Its caller went between the result's arrival and this send.
                self.count_late(id);
            }
            return;
        }
        match table.strays.take(id) {
            Some(Stray::Result) => {
                drop(table);
                self.count_late(id);
            }
            _ => tracing::debug!(id, "a call-result for no call of this agent: ignored"),
        }
    }

    /// A `capabilities/cancel-result` answering envelope `id`.
    pub(super) fn deliver_cancel(&self, id: Option<&str>, reply: CancelReply) {
        let mut table = self.lock();
        let Some(id) = id else {
            tracing::debug!("a cancel-result without an id: ignored");
            return;
        };
        if let Some(cancel) = table.cancels.remove(id) {
            drop(table);
            // A caller that went meanwhile left nothing to tell.
            let _ = cancel.reply.send(reply);
            return;
        }
        match table.strays.take(id) {
            Some(Stray::Ack) => {
                tracing::debug!(id, ?reply, "the acknowledgment of a dropped call's cancel")
            }
            _ => tracing::debug!(id, "a cancel-result for no cancel of this agent: ignored"),
        }
    }

    /// An `error` envelope answering envelope `id`: the app could not take it as what it claimed to be. A call
    /// refused so fails as a `call-result` refusing it would; a cancel as a `cancel-result` with an `error`.
    pub(super) fn deliver_error(&self, id: Option<&str>, error: ErrorBody) {
        let Some(id) = id else {
            tracing::debug!(code = %error.code, message = %error.message, "an error envelope without an id");
            return;
        };
        let cancel_of = self
            .lock()
            .cancels
            .get(id)
            .map(|cancel| cancel.call_id.clone());
        match cancel_of {
            Some(call_id) => {
                let refused = CancelResult {
                    call_id,
                    cancelled: false,
                    reason: None,
                    error: Some(error),
                };
                self.deliver_cancel(Some(id), Ok(refused));
            }
            None => self.deliver_call(Some(id), Ok(CallResult::failed(error))),
        }
    }

    /// A `progress` report: to the callback of the call whose progress token is its `operationId`.
    pub(super) fn deliver_progress(&self, progress: Progress) {
        let key = progress.operation_id.to_string();
        let callback = self
            .lock()
            .progress
            .get(&key)
            .map(|(_, callback)| callback.clone());
        let Some(callback) = callback else {
            tracing::debug!(operation = %key, "progress for no call of this agent: ignored");
            return;
        };
        // The callback runs on the reader task: a panic there must not end the connection for every call.
        if panic::catch_unwind(AssertUnwindSafe(|| callback(progress))).is_err() {
            tracing::warn!(operation = %key, "a progress callback panicked");
        }
    }

    /// The connection is over: every call and cancel waiting fails (its sender dropped: `Closed`), and nothing new
    /// is taken.
    pub(super) fn close(&self) {
        let mut table = self.lock();
        let taken = std::mem::take(&mut *table);
        table.closed = true;
        drop(table);
        // The waiters wake once the lock is released.
        drop(taken);
    }

    fn count_late(&self, id: &str) {
        self.late_results.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(id, "a result for a call nobody waits for any more: dropped");
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        // Nothing panics while the lock is held (callbacks run outside it): a poisoned table is whole.
        self.table
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Table {
    fn take_call(&mut self, envelope_id: &str) -> Option<CallWaiter> {
        let call = self.calls.remove(envelope_id)?;
        if let Some(key) = &call.progress_key {
            // Only its own registration: a later call with the same token may have taken it over.
            if self
                .progress
                .get(key)
                .is_some_and(|(owner, _)| owner == envelope_id)
            {
                self.progress.remove(key);
            }
        }
        Some(call)
    }
}

/// What an answer nobody waits for is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stray {
    /// The `call-result` of a call whose caller went: counted as late.
    Result,
    /// The `cancel-result` of a cancel whose caller went (or that nobody waited for): dropped quietly.
    Ack,
}

/// Envelope ids whose answers are expected but no longer waited for, the oldest forgotten past [`MAX_STRAYS`].
#[derive(Default)]
struct Strays {
    kinds: HashMap<String, Stray>,
    order: VecDeque<String>,
}

impl Strays {
    fn expect(&mut self, id: String, kind: Stray) {
        while self.order.len() >= MAX_STRAYS {
            if let Some(oldest) = self.order.pop_front() {
                self.kinds.remove(&oldest);
            }
        }
        self.order.push_back(id.clone());
        self.kinds.insert(id, kind);
    }

    fn take(&mut self, id: &str) -> Option<Stray> {
        // Its id stays in `order` until it is pushed out: ids are never reused, so it matches nothing meanwhile.
        self.kinds.remove(id)
    }
}
