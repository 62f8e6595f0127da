//! The bridge between async-lsp's `MainLoop` and tower-cancel's connection: the main loop keeps serving what the
//! server sends the client (its handlers' requests and notifications through their `ClientSocket`, its events),
//! over an in-memory pipe; the bridge reads what it writes and sends it through the connection's [`Peer`], and
//! writes the client's replies back into it.
//!
//! Each request the main loop writes follows the mark of the handler that made it (see [`crate::hub`]): it is
//! sent through that handler's child peer, so it is cancelled on the wire (`$/cancelRequest`) when the handler's
//! request is cancelled, or when the handler's future is dropped while the request still waits. A request made
//! outside any handler's poll goes through the connection's peer as it is.

use std::{
    future::Future,
    sync::{atomic::Ordering, Arc},
};

use async_lsp::{
    lsp_types::notification::Notification, ErrorCode, LspService, MainLoop, ResponseError,
};
use futures::{stream::FuturesUnordered, StreamExt};
use serde::Deserialize;
use serde_json::{value::RawValue, Value};
use tokio::sync::mpsc;
use tower_cancel::{Peer, PeerCall, PeerError};

use crate::{
    hub::{Hub, Mark},
    pipe::{encode, Input, Output},
    shim::Shim,
};

/// A request of the main loop sent to the client: the main loop's id for it, and the call.
type Forwarded = (Value, PeerCall);

/// Runs the main loop and forwards its output until the main loop ends (it ends only on an error of its own:
/// the bridge never closes its input). Dropping the future ends both.
///
/// The handlers' marks start at once, not when the future is first polled: a handler polled before that (the
/// connection's first request) has its requests read after its marks all the same.
pub(crate) fn run<S>(
    main_loop: MainLoop<Shim<S>>,
    hub: Arc<Hub>,
    peer: Option<Peer>,
) -> impl Future<Output = ()>
where
    S: LspService,
{
    hub.set_running(true);
    let running = Running(hub.clone());
    async move {
        let _running = running;
        let (replies, replies_rx) = mpsc::unbounded_channel();
        let (calls, mut calls_rx) = mpsc::unbounded_channel();
        let mut forward = Forward {
            hub: hub.clone(),
            peer,
            current: 0,
            calls,
            replies: replies.clone(),
        };
        let output = Output::new(move |message: &[u8]| forward.message(message));
        let input = Input::new(replies_rx);
        let main_loop = main_loop.run_buffered(input, output);
        tokio::pin!(main_loop);
        let mut waiting = FuturesUnordered::new();
        loop {
            tokio::select! {
                ended = &mut main_loop => {
                    tracing::warn!(?ended, "async-lsp's main loop ended: handlers can no longer reach the client");
                    return;
                }
                Some((id, call)) = calls_rx.recv() => {
                    waiting.push(async move { (id, call.await) });
                }
                Some((id, result)) = waiting.next(), if !waiting.is_empty() => {
                    let _ = replies.send(reply(&id, result));
                    hub.waiting.fetch_sub(1, Ordering::SeqCst);
                }
            }
        }
    }
}

/// Marks the bridge stopped when its future ends or is dropped: handlers stop sending marks.
struct Running(Arc<Hub>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.set_running(false);
        self.0.waiting.store(0, Ordering::SeqCst);
    }
}

/// One message the main loop writes: a request (id and method), a notification (method), or a reply (neither:
/// never written here, as the main loop is sent no requests).
#[derive(Deserialize)]
struct Written {
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    params: Option<Box<RawValue>>,
}

/// What the bridge does with each message of the main loop.
struct Forward {
    hub: Arc<Hub>,
    /// The connection's peer; `None` when the connection has none (then requests fail and notifications drop).
    peer: Option<Peer>,
    /// The handler of the last mark read, 0 for none.
    current: u64,
    calls: mpsc::UnboundedSender<Forwarded>,
    replies: mpsc::UnboundedSender<Vec<u8>>,
}

impl Forward {
    fn message(&mut self, body: &[u8]) {
        // Marks come two per poll of a handler: read as async-lsp writes them without a JSON parse.
        if let Some(key) = mark_key(body) {
            self.current = key;
            return;
        }
        let written = match serde_json::from_slice::<Written>(body) {
            Ok(written) => written,
            Err(error) => {
                tracing::warn!(%error, "unreadable message from async-lsp's main loop, dropped");
                return;
            }
        };
        match written {
            Written {
                method: Some(method),
                id: None,
                params,
            } if method == Mark::METHOD => {
                debug_assert!(
                    false,
                    "a mark the fast path missed: {}",
                    String::from_utf8_lossy(body)
                );
                let key = params.and_then(|raw| serde_json::from_str(raw.get()).ok());
                self.current = key.unwrap_or(0);
            }
            Written {
                method: Some(method),
                id: None,
                params,
            } => match &self.peer {
                Some(peer) => {
                    let _ = peer.notify(method, params);
                }
                None => tracing::debug!(method, "no peer on the connection: notification dropped"),
            },
            Written {
                method: Some(method),
                id: Some(id),
                params,
            } => self.request(id, method, params),
            Written { .. } => tracing::debug!("a reply from async-lsp's main loop, dropped"),
        }
    }

    fn request(&mut self, id: Value, method: String, params: Option<Box<RawValue>>) {
        let call = if self.current == 0 {
            self.peer
                .as_ref()
                .map(|peer| peer.request(method, params))
                .ok_or_else(|| failed("no connection to the client"))
        } else {
            match self.hub.handler(self.current) {
                Some((peer, done)) => Ok(peer
                    .request(method, params)
                    .cancel_on(done)
                    // The handler stopped waiting: its reply slot in the main loop is freed at once.
                    .wait_after_cancel(false)),
                // Its handler is gone already: nobody would read the answer, so the client is not asked.
                None => Err(cancelled()),
            }
        };
        match call {
            Ok(call) => {
                self.hub.waiting.fetch_add(1, Ordering::SeqCst);
                let _ = self.calls.send((id, call));
            }
            Err(error) => {
                let _ = self.replies.send(encode(&id, Err(error)));
            }
        }
    }
}

/// The key of a mark as async-lsp 0.2 serializes one (`{"jsonrpc":"2.0","method":<Mark::METHOD>,"params":<key>}`),
/// or `None` for anything else (a mark written another way is still read, by the parse in [`Forward::message`]).
fn mark_key(body: &[u8]) -> Option<u64> {
    const PREFIX: &[u8] = br#"{"jsonrpc":"2.0","method":"$/tower-cancel-async-lsp/mark","params":"#;
    let digits = body.strip_prefix(PREFIX)?.strip_suffix(b"}")?;
    std::str::from_utf8(digits).ok()?.parse().ok()
}

fn cancelled() -> ResponseError {
    ResponseError::new(ErrorCode::REQUEST_CANCELLED, "Request cancelled")
}

fn failed(message: &str) -> ResponseError {
    ResponseError::new(ErrorCode::INTERNAL_ERROR, message)
}

/// The main loop's reply for the outcome of a call to the client.
fn reply(id: &Value, result: Result<Value, PeerError>) -> Vec<u8> {
    let result = result.map_err(|error| match error {
        // async-lsp's error codes are `i32`: a code outside it would make the main loop fail to read the reply.
        PeerError::Rejected(error) => match i32::try_from(error.code) {
            Ok(code) => {
                let mut converted = ResponseError::new(ErrorCode(code), error.message);
                converted.data = error.data;
                converted
            }
            Err(_) => ResponseError::new(ErrorCode::INTERNAL_ERROR, error.message),
        },
        PeerError::Cancelled => cancelled(),
        PeerError::TimedOut => {
            ResponseError::new(ErrorCode::REQUEST_CANCELLED, "request timed out")
        }
        PeerError::Closed => failed("connection closed"),
        other => failed(&other.to_string()),
    });
    encode(id, result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_are_read_as_async_lsp_writes_them() {
        // What the main loop writes for `ClientSocket::notify::<Mark>(42)` (the tests over a connection check it:
        // the slow path asserts, in debug builds, that no mark reaches it).
        let written = br#"{"jsonrpc":"2.0","method":"$/tower-cancel-async-lsp/mark","params":42}"#;
        assert_eq!(mark_key(written), Some(42));
        assert_eq!(
            mark_key(br#"{"jsonrpc":"2.0","method":"other","params":42}"#),
            None
        );
        assert_eq!(
            mark_key(br#"{"jsonrpc":"2.0","method":"$/tower-cancel-async-lsp/mark","params":"x"}"#),
            None
        );
    }

    #[test]
    fn replies_keep_the_main_loops_id_and_fit_its_error_codes() {
        let framed = reply(
            &Value::from(3),
            Err(PeerError::Rejected(tower_cancel::ErrorObject::new(
                1 << 40,
                "big",
            ))),
        );
        let text = String::from_utf8(framed).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert_eq!(head, format!("Content-Length: {}", body.len()));
        let body: Value = serde_json::from_str(body).unwrap();
        assert_eq!(body["id"], 3);
        assert_eq!(body["error"]["code"], -32603);
    }
}
