//! The hand-written pattern as a tower wrapper around a service, for the in-process figure (figure 1): each request
//! with an id gets a token in the map, its inner future races the token, and its entry goes when its future ends
//! or is dropped. The future is a named one (no box), polling the inner future first and the token only while the
//! inner one is pending, as a hand-written `select!` over the two does.

use std::{
    future::Future,
    pin::Pin,
    sync::{Arc, Mutex},
    task::{ready, Context, Poll},
};

use pin_project_lite::pin_project;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
use tower_cancel::{BoxError, ErrorObject, Id, Request, Response};

type Tokens = Arc<Mutex<foldhash::HashMap<Id, CancellationToken>>>;

/// A map of tokens around `S`: what a user without this library wraps a service in.
#[derive(Clone, Debug)]
pub struct Service<S> {
    inner: S,
    tokens: Tokens,
}

impl<S> Service<S> {
    /// `inner` with the hand-written cancellation around it.
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            tokens: Arc::default(),
        }
    }
}

impl<S> tower::Service<Request> for Service<S>
where
    S: tower::Service<Request, Response = Option<Response>, Error = BoxError>,
{
    type Response = Option<Response>;
    type Error = BoxError;
    type Future = Answer<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        let Some(id) = req.id().cloned() else {
            return Answer {
                inner: self.inner.call(req),
                cancelled: None,
                entry: None,
            };
        };
        let token = CancellationToken::new();
        self.tokens
            .lock()
            .unwrap()
            .insert(id.clone(), token.clone());
        Answer {
            inner: self.inner.call(req),
            cancelled: Some(token.cancelled_owned()),
            entry: Some(Entry {
                id,
                tokens: self.tokens.clone(),
            }),
        }
    }
}

pin_project! {
    /// The future of [`Service`]: the inner future raced against the request's token.
    #[derive(Debug)]
    pub struct Answer<F> {
        #[pin]
        inner: F,
        #[pin]
        cancelled: Option<WaitForCancellationFutureOwned>,
        entry: Option<Entry>,
    }
}

impl<F> Future for Answer<F>
where
    F: Future<Output = Result<Option<Response>, BoxError>>,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        if let Poll::Ready(answer) = this.inner.poll(cx) {
            this.entry.take();
            return Poll::Ready(answer);
        }
        let Some(cancelled) = this.cancelled.as_pin_mut() else {
            return Poll::Pending;
        };
        ready!(cancelled.poll(cx));
        let id = this.entry.take().map(|entry| entry.id.clone());
        Poll::Ready(Ok(Some(Response::error(
            id,
            ErrorObject::new(-32800, "RequestCancelled"),
        ))))
    }
}

/// A request's entry in the map, removed when dropped: when its future ends, or is dropped unfinished.
#[derive(Debug)]
struct Entry {
    id: Id,
    tokens: Tokens,
}

impl Drop for Entry {
    fn drop(&mut self) {
        self.tokens.lock().unwrap().remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use std::future::pending;

    use serde_json::{json, Value};
    use tower::{service_fn, Service as _};
    use tower_cancel::{BoxError, Id, Request, Response};

    use super::Service;

    fn in_flight<S>(service: &Service<S>) -> usize {
        service.tokens.lock().unwrap().len()
    }

    #[tokio::test]
    async fn an_answer_passes_through_and_its_entry_goes() {
        let mut service = Service::new(service_fn(|req: Request| async move {
            Ok::<_, BoxError>(Some(Response::ok(req.id().unwrap().clone(), json!("done"))))
        }));
        let answer = service
            .call(Request::new(1, "bench/work", ()))
            .await
            .unwrap();
        assert_eq!(answer.unwrap().outcome, Ok(Value::from("done")));
        assert_eq!(in_flight(&service), 0);
    }

    #[tokio::test]
    async fn a_cancelled_request_is_answered_request_cancelled_and_its_entry_goes() {
        let mut service = Service::new(service_fn(|_req: Request| async {
            pending::<Result<Option<Response>, BoxError>>().await
        }));
        let answer = tokio::spawn(service.call(Request::new(7, "bench/work", ())));
        assert_eq!(in_flight(&service), 1);
        service.tokens.lock().unwrap()[&Id::Number(7)].cancel();
        let reply = answer.await.unwrap().unwrap().unwrap();
        assert_eq!(reply.id, Some(Id::Number(7)));
        assert_eq!(reply.outcome.unwrap_err().code, -32800);
        assert_eq!(in_flight(&service), 0);
    }

    #[tokio::test]
    async fn a_request_dropped_unfinished_leaves_no_entry() {
        let mut service = Service::new(service_fn(|_req: Request| async {
            pending::<Result<Option<Response>, BoxError>>().await
        }));
        let answer = service.call(Request::new(3, "bench/work", ()));
        assert_eq!(in_flight(&service), 1);
        drop(answer);
        assert_eq!(in_flight(&service), 0);
    }
}
