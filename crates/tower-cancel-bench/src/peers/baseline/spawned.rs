//! The hand-written server with each request on a task of its own: the map of tokens shared with the tasks behind
//! a mutex, each task racing its handler against its token.

use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use tokio::sync::mpsc;
use tokio_util::{codec::FramedRead, sync::CancellationToken};

use super::{
    run,
    transport::{write_loop, LspCodec},
    wire::{self, Id},
    Action, Outgoing, Tokens,
};
use crate::{
    probe::WorkParams,
    target::{BoxRead, BoxWrite, ServeFuture},
};

/// Serves one connection until the client closes its side.
pub fn serve(reader: BoxRead, writer: BoxWrite, _need: usize) -> ServeFuture {
    Box::pin(async move {
        let (out, queue) = mpsc::unbounded_channel();
        let writer = tokio::spawn(write_loop(writer, queue));
        let tokens: Arc<Mutex<Tokens>> = Arc::default();
        let mut frames = FramedRead::new(reader, LspCodec);
        while let Some(Ok(frame)) = frames.next().await {
            match wire::read(&frame) {
                Action::Reply(id, answer) => wire::send(&out, &id, answer),
                Action::Work(id, params) => start(id, params, &tokens, &out),
                Action::Cancel(id) => {
                    if let Some(token) = tokens.lock().unwrap().get(&id) {
                        token.cancel();
                    }
                }
                Action::Nothing => {}
            }
        }
        // The client is gone: stop whatever is still running.
        for (_, token) in tokens.lock().unwrap().drain() {
            token.cancel();
        }
        drop(out);
        let _ = writer.await;
    })
}

/// Register the request's token and spawn its handler; the task answers and removes the entry.
fn start(id: Id, params: WorkParams, tokens: &Arc<Mutex<Tokens>>, out: &Outgoing) {
    let token = CancellationToken::new();
    tokens.lock().unwrap().insert(id.clone(), token.clone());
    let (tokens, out) = (tokens.clone(), out.clone());
    tokio::spawn(async move {
        let answer = run(params, token).await;
        tokens.lock().unwrap().remove(&id);
        wire::send(&out, &id, answer);
    });
}
