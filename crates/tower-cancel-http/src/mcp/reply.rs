//! A request's HTTP response: its reply as one JSON body, or an SSE stream that carries its notifications
//! (progress) first and ends with its reply.
//!
//! The response waits for the first thing to send. The reply itself: a JSON body (with the status the revision
//! gives its error). A notification (progress): an SSE stream, which carries everything the request sends and
//! ends with its reply. Nothing for a while: an SSE stream too, with keep-alive comment lines, so that a client
//! that vanished is noticed on the next write. A request cancelled without a reply (the MCP way) ends its stream
//! with nothing more.

use std::{collections::VecDeque, convert::Infallible, time::Duration};

use axum::response::{
    sse::{Event, KeepAlive, Sse},
    IntoResponse, Response as HttpResponse,
};
use futures_util::stream;
use http::{HeaderMap, HeaderValue, StatusCode};
use tokio::task::JoinHandle;
use tower_cancel::{
    outbox::{OutboxReceiver, Outgoing},
    Response,
};

use crate::{body, front::Link};

/// A request whose response is being made: what the response is made from.
pub(crate) struct Responding<H> {
    pub(crate) receiver: OutboxReceiver,
    pub(crate) task: JoinHandle<Option<Response>>,
    /// The request's link: dropped with the response, it is the client's hang-up (a cancel where the revision
    /// says so).
    pub(crate) link: Link,
    /// Kept until the response is over (a lease on the session).
    pub(crate) hold: H,
}

/// How the response is made.
pub(crate) struct Shape {
    /// The client accepts an SSE stream.
    pub(crate) sse: bool,
    pub(crate) keep_alive: Duration,
    /// The status of a JSON reply.
    pub(crate) status: fn(&Response) -> StatusCode,
    /// Headers every response carries (a session id).
    pub(crate) headers: HeaderMap,
}

pub(crate) async fn respond<H: Send + 'static>(
    mut responding: Responding<H>,
    shape: Shape,
) -> HttpResponse {
    if !shape.sse {
        // Nowhere to send progress: the handler's reports are refused rather than queued.
        responding.receiver.close();
    }
    let first = tokio::select! {
        biased;
        reply = &mut responding.task => First::Reply(reply.unwrap_or_default()),
        Some(message) = responding.receiver.recv(), if shape.sse => First::Message(message),
        () = tokio::time::sleep(shape.keep_alive), if shape.sse => First::Quiet,
    };
    let mut queued = VecDeque::new();
    let task = match first {
        First::Reply(reply) => {
            drain(&mut responding.receiver, &mut queued);
            if queued.is_empty() {
                return json(reply, &shape);
            }
            queued.extend(reply.as_ref().map(event));
            None
        }
        First::Message(message) => {
            responding.receiver.written(&message);
            queued.push_back(data(&message));
            Some(responding.task)
        }
        First::Quiet => Some(responding.task),
    };
    let state = Streaming {
        receiver: responding.receiver,
        task,
        queued,
        _link: responding.link,
        _hold: responding.hold,
    };
    let events = stream::unfold(state, |mut state| async move {
        let event = state.next().await?;
        Some((Ok::<_, Infallible>(event), state))
    });
    let mut response = Sse::new(events)
        .keep_alive(KeepAlive::new().interval(shape.keep_alive))
        .into_response();
    // Proxies must not hold the stream back.
    response
        .headers_mut()
        .insert("x-accel-buffering", HeaderValue::from_static("no"));
    response.headers_mut().extend(shape.headers);
    response
}

enum First {
    Reply(Option<Response>),
    Message(Outgoing),
    Quiet,
}

struct Streaming<H> {
    receiver: OutboxReceiver,
    // None once the request settled: what is queued is the end of the stream.
    task: Option<JoinHandle<Option<Response>>>,
    queued: VecDeque<Event>,
    _link: Link,
    _hold: H,
}

impl<H> Streaming<H> {
    async fn next(&mut self) -> Option<Event> {
        if let Some(event) = self.queued.pop_front() {
            return Some(event);
        }
        let task = self.task.as_mut()?;
        tokio::select! {
            // What the request sent before it settled goes out before its reply.
            biased;
            Some(message) = self.receiver.recv() => {
                self.receiver.written(&message);
                Some(data(&message))
            }
            reply = task => {
                self.task = None;
                drain(&mut self.receiver, &mut self.queued);
                self.queued.extend(reply.unwrap_or_default().as_ref().map(event));
                self.queued.pop_front()
            }
        }
    }
}

fn drain(receiver: &mut OutboxReceiver, queued: &mut VecDeque<Event>) {
    while let Some(message) = receiver.try_recv() {
        receiver.written(&message);
        queued.push_back(data(&message));
    }
}

fn data(bytes: &[u8]) -> Event {
    // Compact JSON has no line breaks, so each message is one `data:` line; no `id:` lines, since this server
    // does not resume streams (a client that sees ids would try to).
    Event::default().data(String::from_utf8_lossy(bytes))
}

fn event(reply: &Response) -> Event {
    Event::default().data(serde_json::to_string(reply).unwrap_or_default())
}

fn json(reply: Option<Response>, shape: &Shape) -> HttpResponse {
    let Some(reply) = reply else {
        // Cancelled, and the dialect answers a cancelled request with silence: an empty stream says it best.
        let mut response = Sse::new(stream::empty::<Result<Event, Infallible>>()).into_response();
        response.headers_mut().extend(shape.headers.clone());
        return response;
    };
    let mut response = body::json_response((shape.status)(&reply), &reply);
    response.headers_mut().extend(shape.headers.clone());
    response
}
