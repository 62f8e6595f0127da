//! The hand-written server that polls every request in its read loop: no spawn, the requests in a
//! `FuturesUnordered` beside the next frame, the map of tokens the loop's own (no lock: nothing else touches it).

use std::future::Future;

use futures_util::{stream::FuturesUnordered, StreamExt};
use tokio::sync::mpsc;
use tokio_util::{codec::FramedRead, sync::CancellationToken};

use super::{
    run,
    transport::{write_loop, LspCodec},
    wire::{self, Answer, Id},
    Action, Tokens,
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
        let mut tokens = Tokens::default();
        let mut running = FuturesUnordered::new();
        let mut frames = FramedRead::new(reader, LspCodec);
        loop {
            let frame = tokio::select! {
                // Finished requests first: they free their entries and reach the client sooner.
                biased;
                Some((id, answer)) = running.next(), if !running.is_empty() => {
                    tokens.remove(&id);
                    wire::send(&out, &id, answer);
                    continue;
                }
                frame = frames.next() => frame,
            };
            let Some(Ok(frame)) = frame else {
                break;
            };
            match wire::read(&frame) {
                Action::Reply(id, answer) => wire::send(&out, &id, answer),
                Action::Work(id, params) => running.push(start(id, params, &mut tokens)),
                Action::Cancel(id) => {
                    if let Some(token) = tokens.get(&id) {
                        token.cancel();
                    }
                }
                Action::Nothing => {}
            }
        }
        // The client is gone: stop whatever is still running, and let each answer (its -32800 goes nowhere).
        for (_, token) in tokens.drain() {
            token.cancel();
        }
        while let Some((id, answer)) = running.next().await {
            wire::send(&out, &id, answer);
        }
        drop(out);
        let _ = writer.await;
    })
}

/// Register the request's token; the future, polled by the loop, answers with the request's id.
fn start(
    id: Id,
    params: WorkParams,
    tokens: &mut Tokens,
) -> impl Future<Output = (Id, Answer)> + Send + 'static {
    let token = CancellationToken::new();
    tokens.insert(id.clone(), token.clone());
    async move { (id, run(params, token).await) }
}
