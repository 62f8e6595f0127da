//! Many requests held at once, in process: the bytes each costs, and what one cancel costs among them.
//!
//! The times ([`measure`]) are taken in the harness, whose allocator does not count; the bytes
//! ([`bytes_per_request`]) in the `heap_bytes` binary, whose allocator does ([`crate::bytes`]).

use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
    time::{Duration, Instant},
};

use futures_util::{future, task::noop_waker, FutureExt};
use serde_json::{json, Value};
use tower::{service_fn, Layer, Service};
use tower_cancel::{BoxError, CancelReason, CancelStack, Registry, Request, Response};

use crate::{memory, overhead::request};

/// What holding `held` requests cost.
#[derive(Clone, Debug)]
pub struct Scale {
    /// Requests held.
    pub held: usize,
    /// Time to call and first poll all of them through the stack.
    pub hold_time: Duration,
    /// Cancels of single requests (cancel notification called, then the cancelled reply taken).
    pub cancel_one: Vec<Duration>,
    /// Time to cancel all that were left, and take their replies.
    pub cancel_all: Duration,
    /// Registry entries left at the end (0 when nothing leaked).
    pub left_in_registry: usize,
}

/// Hold `held` requests whose handlers never finish, then cancel `samples` of them one by one and the rest at once.
pub fn measure(held: usize, samples: usize) -> Scale {
    let registry = Registry::new();
    let mut stack = CancelStack::lsp()
        .registry(registry.clone())
        .layer(service_fn(held_forever));
    let mut slots = Vec::with_capacity(held);
    let start = Instant::now();
    for id in 0..held {
        let mut call = Box::pin(stack.call(request(id as i64)));
        assert!(poll_once(&mut call).is_none(), "a held request answered");
        slots.push(Some(call));
    }
    let hold_time = start.elapsed();

    let mut cancel_one = Vec::with_capacity(samples);
    for sample in 0..samples.min(held) {
        // Spread over the table, oldest to newest.
        let id = sample * held / samples.min(held);
        let start = Instant::now();
        let notice = Request::notification("$/cancelRequest", json!({ "id": id }));
        let _ = stack.call(notice).now_or_never();
        let mut call = slots[id].take().expect("each request is cancelled once");
        let reply = poll_once(&mut call).expect("a cancelled request answers at once");
        cancel_one.push(start.elapsed());
        assert!(
            matches!(reply, Ok(Some(ref r)) if r.outcome.is_err()),
            "cancelled: {reply:?}"
        );
    }

    let start = Instant::now();
    registry.cancel_all(CancelReason::Disconnect);
    for mut call in slots.drain(..).flatten() {
        assert!(
            poll_once(&mut call).is_some(),
            "a cancelled request answers at once"
        );
    }
    let cancel_all = start.elapsed();
    Scale {
        held,
        hold_time,
        cancel_one,
        cancel_all,
        left_in_registry: registry.len(),
    }
}

/// The handler of the stack: never finishes, keeps its request (as a real handler does, and as the bare one does,
/// so that the difference between the two is the stack's own).
fn held_forever(req: Request) -> impl Future<Output = Result<Value, BoxError>> {
    future::pending::<()>().map(move |()| {
        drop(req);
        Ok(Value::Null)
    })
}

/// The bare service's handler: as [`held_forever`], answering with a response of its own.
fn bare_held_forever(req: Request) -> impl Future<Output = Result<Option<Response>, BoxError>> {
    future::pending::<()>().map(move |()| {
        let id = req.id().cloned();
        Ok(id.map(|id| Response::ok(id, Value::Null)))
    })
}

/// Heap bytes per request held in process, `held` of them, through `CancelStack::lsp()` or (`stack` false) the
/// bare service. It means something only in a process whose allocator counts (the `heap_bytes` binary).
pub fn bytes_per_request(stack: bool, held: usize) -> f64 {
    if stack {
        bytes_held(CancelStack::lsp().layer(service_fn(held_forever)), held)
    } else {
        bytes_held(service_fn(bare_held_forever), held)
    }
}

fn bytes_held<S>(mut service: S, held: usize) -> f64
where
    S: Service<Request>,
{
    let mut slots = Vec::with_capacity(held);
    let before = memory::in_use();
    for id in 0..held {
        let mut call = Box::pin(service.call(request(id as i64)));
        assert!(poll_once(&mut call).is_none(), "a held request answered");
        slots.push(call);
    }
    let bytes = (memory::in_use() - before) as f64 / held as f64;
    drop(slots);
    bytes
}

fn poll_once<F: Future>(call: &mut Pin<Box<F>>) -> Option<F::Output> {
    let waker = noop_waker();
    match call.as_mut().poll(&mut Context::from_waker(&waker)) {
        Poll::Ready(output) => Some(output),
        Poll::Pending => None,
    }
}
