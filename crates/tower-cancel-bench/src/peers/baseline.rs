//! The hand-written baseline: what a user without this library writes to serve the LSP workload with cancellation.
//!
//! Plain and fair, as tower-lsp-style servers do it by hand, with nothing of tower-cancel:
//! - a read loop over `Content-Length` frames (a small `tokio-util` [`Decoder`], `LspCodec`);
//! - a `HashMap<Id, CancellationToken>` behind a `std::sync::Mutex`;
//! - each request on a task of its own (`tokio::spawn`), racing its handler against `token.cancelled()` with
//!   `tokio::select!`, answering `-32800 RequestCancelled` when the token wins, and removing its entry when done;
//! - `$/cancelRequest` looks the id up and cancels its token;
//! - replies go to one writer task through an unbounded channel, which writes what is queued and flushes once the
//!   queue is empty (batching under load, as a hand-written writer that is not deliberately slow does).
//!
//! No concurrency limit, like ours; the workload's need is ignored. At EOF the read loop stops and cancels every
//! token still in the map (the requests in flight then end and their entries go), then waits for the writer.
//!
//! [`Service`] is the same pattern as a tower wrapper around a service, for the in-process figure (figure 1).

use std::{
    collections::HashMap,
    future::Future,
    io,
    pin::Pin,
    sync::{Arc, Mutex},
    task::{Context, Poll},
};

use bytes::{Buf, BytesMut};
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::{json, value::RawValue, Value};
use tokio::{
    io::{AsyncWriteExt, BufWriter},
    sync::mpsc,
};
use tokio_util::{
    codec::{Decoder, FramedRead},
    sync::CancellationToken,
};

use crate::{
    probe::{work, WorkParams},
    target::{BoxRead, BoxWrite, ServeFuture},
};

/// A request id as the user's own code types it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
enum Id {
    Number(i64),
    String(String),
}

/// One incoming message: a request, a notification, or (ignored here) a reply.
#[derive(Deserialize)]
struct Message {
    id: Option<Id>,
    method: Option<String>,
    params: Option<Box<RawValue>>,
}

#[derive(Deserialize)]
struct CancelParams {
    id: Id,
}

/// The requests in flight, by id: what `$/cancelRequest` looks up.
type InFlight = Arc<Mutex<HashMap<Id, CancellationToken>>>;

/// Serves one connection until the client closes its side.
pub fn serve(reader: BoxRead, writer: BoxWrite, _need: usize) -> ServeFuture {
    Box::pin(async move {
        let (out, queue) = mpsc::unbounded_channel();
        let writer = tokio::spawn(write_loop(writer, queue));
        let in_flight: InFlight = Arc::default();
        let mut frames = FramedRead::new(reader, LspCodec);
        while let Some(Ok(frame)) = frames.next().await {
            let Ok(message) = serde_json::from_slice::<Message>(&frame) else {
                continue;
            };
            handle(message, &in_flight, &out);
        }
        // The client is gone: stop whatever is still running.
        for (_, token) in in_flight.lock().unwrap().drain() {
            token.cancel();
        }
        drop(out);
        let _ = writer.await;
    })
}

fn handle(message: Message, in_flight: &InFlight, out: &mpsc::UnboundedSender<Vec<u8>>) {
    let Some(method) = message.method else {
        return;
    };
    let params = message.params.as_deref().map_or("null", RawValue::get);
    match (message.id, method.as_str()) {
        (Some(id), "initialize") => reply(out, &id, Ok(json!({ "capabilities": {} }))),
        (Some(id), "bench/work") => {
            let params: WorkParams = match serde_json::from_str(params) {
                Ok(params) => params,
                Err(e) => return reply(out, &id, Err((-32602, e.to_string()))),
            };
            let token = CancellationToken::new();
            in_flight.lock().unwrap().insert(id.clone(), token.clone());
            let (in_flight, out) = (in_flight.clone(), out.clone());
            tokio::spawn(async move {
                let answer = tokio::select! {
                    () = work(params) => Ok(json!("done")),
                    () = token.cancelled() => Err((-32800, "RequestCancelled".to_owned())),
                };
                in_flight.lock().unwrap().remove(&id);
                reply(&out, &id, answer);
            });
        }
        (Some(id), other) => reply(out, &id, Err((-32601, format!("no method {other}")))),
        (None, "$/cancelRequest") => {
            if let Ok(CancelParams { id }) = serde_json::from_str(params) {
                if let Some(token) = in_flight.lock().unwrap().get(&id) {
                    token.cancel();
                }
            }
        }
        // `initialized` and the rest: nothing to do.
        (None, _) => {}
    }
}

/// Serialize a reply, framed, and queue it for the writer.
fn reply(out: &mpsc::UnboundedSender<Vec<u8>>, id: &Id, answer: Result<Value, (i64, String)>) {
    let message = match answer {
        Ok(result) => json!({ "jsonrpc": "2.0", "id": id, "result": result }),
        Err((code, message)) => {
            json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } })
        }
    };
    let body = serde_json::to_vec(&message).expect("a JSON value serializes");
    let mut frame = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    frame.extend_from_slice(&body);
    // The writer is gone only when the connection is.
    let _ = out.send(frame);
}

/// Write every queued frame, flushing when the queue runs dry.
async fn write_loop(writer: BoxWrite, mut queue: mpsc::UnboundedReceiver<Vec<u8>>) {
    let mut writer = BufWriter::new(writer);
    while let Some(frame) = queue.recv().await {
        if writer.write_all(&frame).await.is_err() {
            return;
        }
        while let Ok(frame) = queue.try_recv() {
            if writer.write_all(&frame).await.is_err() {
                return;
            }
        }
        if writer.flush().await.is_err() {
            return;
        }
    }
}

/// `Content-Length` framing, hand-rolled: headers up to the blank line, then the body.
struct LspCodec;

impl Decoder for LspCodec {
    type Item = BytesMut;
    type Error = io::Error;

    fn decode(&mut self, src: &mut BytesMut) -> io::Result<Option<BytesMut>> {
        let Some(end) = src.windows(4).position(|w| w == b"\r\n\r\n") else {
            return Ok(None);
        };
        let headers = std::str::from_utf8(&src[..end]).map_err(io::Error::other)?;
        let length = headers
            .lines()
            .find_map(|line| line.strip_prefix("Content-Length: "))
            .and_then(|n| n.trim().parse::<usize>().ok())
            .ok_or_else(|| io::Error::other("no Content-Length"))?;
        if src.len() < end + 4 + length {
            src.reserve(end + 4 + length - src.len());
            return Ok(None);
        }
        src.advance(end + 4);
        Ok(Some(src.split_to(length)))
    }
}

/// The same pattern as a tower wrapper around a service, for the in-process figure: each request with an id gets
/// a token in the map, its inner future races `token.cancelled()`, and its entry goes when it ends.
#[derive(Clone, Debug)]
pub struct Service<S> {
    inner: S,
    in_flight: Arc<Mutex<HashMap<tower_cancel::Id, CancellationToken>>>,
}

impl<S> Service<S> {
    /// `inner` with the hand-written cancellation around it.
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            in_flight: Arc::default(),
        }
    }
}

/// The future of [`Service`]: boxed, as a hand-written wrapper's usually is.
type Answer = Pin<
    Box<dyn Future<Output = Result<Option<tower_cancel::Response>, tower_cancel::BoxError>> + Send>,
>;

impl<S> tower::Service<tower_cancel::Request> for Service<S>
where
    S: tower::Service<
        tower_cancel::Request,
        Response = Option<tower_cancel::Response>,
        Error = tower_cancel::BoxError,
    >,
    S::Future: Send + 'static,
{
    type Response = Option<tower_cancel::Response>;
    type Error = tower_cancel::BoxError;
    type Future = Answer;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: tower_cancel::Request) -> Answer {
        let Some(id) = req.id().cloned() else {
            return Box::pin(self.inner.call(req));
        };
        let token = CancellationToken::new();
        self.in_flight
            .lock()
            .unwrap()
            .insert(id.clone(), token.clone());
        let inner = self.inner.call(req);
        let in_flight = self.in_flight.clone();
        Box::pin(async move {
            let answer = tokio::select! {
                answer = inner => answer,
                () = token.cancelled() => Ok(Some(tower_cancel::Response::error(
                    Some(id.clone()),
                    tower_cancel::ErrorObject::new(-32800, "RequestCancelled"),
                ))),
            };
            in_flight.lock().unwrap().remove(&id);
            answer
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[tokio::test]
    async fn serves_work_cancel_and_eof() {
        // Each peer's test has its own tag: the probe's records are global to the test process.
        let error = json!({"code": -32800, "message": "RequestCancelled"});
        super::super::lsp_check::serves_work_cancel_and_eof(super::serve, 11, error).await;
    }
}
