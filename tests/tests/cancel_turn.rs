//! A cancel the connection reads is answered in the same turn of the connection's task. Reading it wakes the request
//! it cancels, which that task polls: a wake of the task from inside its own poll, which tokio would treat as a
//! yield (the task requeued behind the others, another worker woken first). The driver takes it as one more poll of
//! its read loop instead, so the task is never woken by itself.

use std::{
    future::Future,
    pin::Pin,
    sync::{
        atomic::{AtomicBool, AtomicUsize, Ordering},
        Arc, Mutex,
    },
    task::{Context, Poll, Wake, Waker},
};

use serde_json::json;
use tests::{frame, read_frame};
use tokio::io::{AsyncWriteExt, BufReader};
use tower::service_fn;
use tower_cancel::{BoxError, CancelStack, Request};
use tower_cancel_io::{Framing, Server};

/// How a task was woken: during its own poll, or between polls.
#[derive(Default)]
struct Wakes {
    polling: AtomicBool,
    during_poll: AtomicUsize,
    between_polls: AtomicUsize,
    task: Mutex<Option<Waker>>,
}

impl Wake for Wakes {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let count = if self.polling.load(Ordering::SeqCst) {
            &self.during_poll
        } else {
            &self.between_polls
        };
        count.fetch_add(1, Ordering::SeqCst);
        if let Some(task) = &*self.task.lock().unwrap() {
            task.wake_by_ref();
        }
    }
}

/// A task's future, its wakes counted.
struct Watched<F> {
    future: Pin<Box<F>>,
    wakes: Arc<Wakes>,
    waker: Waker,
}

impl<F: Future> Future for Watched<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        *self.wakes.task.lock().unwrap() = Some(cx.waker().clone());
        let waker = self.waker.clone();
        self.wakes.polling.store(true, Ordering::SeqCst);
        let poll = self.future.as_mut().poll(&mut Context::from_waker(&waker));
        self.wakes.polling.store(false, Ordering::SeqCst);
        poll
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_cancel_read_is_answered_without_the_connection_task_waking_itself() {
    let (started, mut has_started) = tokio::sync::mpsc::unbounded_channel();
    let service = service_fn(move |req: Request| {
        let started = started.clone();
        async move {
            if req.method() == "hold" {
                started.send(()).unwrap();
                std::future::pending::<()>().await;
            }
            Ok::<_, BoxError>(json!("done"))
        }
    });
    let server = Server::with_stack(CancelStack::lsp(), service);
    let (mut client_out, server_in) = tokio::io::duplex(64 * 1024);
    let (server_out, client_in) = tokio::io::duplex(64 * 1024);
    let mut replies = BufReader::new(client_in);
    let wakes = Arc::new(Wakes::default());
    tokio::spawn(Watched {
        future: Box::pin(server.serve(server_in, server_out, Framing::ContentLength)),
        waker: Waker::from(wakes.clone()),
        wakes: wakes.clone(),
    });

    let send = |message: &str| frame(message, Framing::ContentLength);
    let hold = send(r#"{"jsonrpc":"2.0","id":1,"method":"hold"}"#);
    client_out.write_all(hold.as_bytes()).await.unwrap();
    has_started.recv().await.unwrap();
    let cancel = send(r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":1}}"#);
    client_out.write_all(cancel.as_bytes()).await.unwrap();
    assert_eq!(
        read_frame(&mut replies, Framing::ContentLength).await,
        Some(
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32800,"message":"Request cancelled"}}"#
                .into()
        )
    );
    // And the connection goes on: an ordinary request after it is answered.
    let ask = send(r#"{"jsonrpc":"2.0","id":2,"method":"ask"}"#);
    client_out.write_all(ask.as_bytes()).await.unwrap();
    assert_eq!(
        read_frame(&mut replies, Framing::ContentLength).await,
        Some(r#"{"jsonrpc":"2.0","id":2,"result":"done"}"#.into())
    );

    assert!(
        wakes.between_polls.load(Ordering::SeqCst) > 0,
        "the client's frames woke the connection's task"
    );
    assert_eq!(
        wakes.during_poll.load(Ordering::SeqCst),
        0,
        "the connection's task was woken during its own poll"
    );
}
