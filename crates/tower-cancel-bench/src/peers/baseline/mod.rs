//! The hand-written baseline: what a careful user without this library writes to serve the LSP workload with
//! cancellation, in the two shapes such servers take.
//!
//! Both variants share everything but where a request runs:
//! - a read loop over `Content-Length` frames (a small `tokio-util` [`Decoder`], `LspCodec`), each frame read
//!   into a typed message that borrows its method and params from the frame (no copy of either);
//! - a `CancellationToken` per request in a `HashMap<Id, CancellationToken>` hashed with foldhash (the fast
//!   hasher tower-cancel's own tables use), removed when the request ends;
//! - the handler raced against `token.cancelled()` with `tokio::select!`, answering `-32800 RequestCancelled` when
//!   the token wins; `$/cancelRequest` looks the id up and cancels its token;
//! - replies serialized from typed structs (no intermediate `serde_json::Value`) and framed in one buffer, sent to
//!   one writer task through an unbounded channel, which writes what is queued and flushes once the queue is empty
//!   (batching under load, as a hand-written writer that is not deliberately slow does).
//!
//! The two variants:
//! - [`spawned`], "map of tokens, select!, spawned": each request on a task of its own (`tokio::spawn`), so the
//!   map is shared with the tasks behind a `std::sync::Mutex`. Handlers use every worker of the runtime.
//! - [`inline`], "map of tokens, select!, inline": no spawn; every request is polled by the read loop itself, in a
//!   `FuturesUnordered` that the loop `select!`s on beside the next frame, finished requests first. The map is
//!   the loop's own (no lock). A connection's requests run on one worker at a time, as tower-cancel's default
//!   runs them (the writer is a task of its own in both variants; tower-cancel's driver joins its writer to the
//!   read loop's task instead).
//!
//! No concurrency limit in either, like ours; the workload's need is ignored. At EOF the read loop stops and
//! cancels every token still in the map (the requests in flight then end and their entries go), then waits for
//! the writer.
//!
//! [`Service`] is the same pattern as a tower wrapper around a service, for the in-process figure (figure 1): the
//! same map behind a mutex (a service's clones share it), its future a named one (no box) that polls the inner
//! future and, while that is pending, the token, the entry removed when the future ends or is dropped.
//!
//! [`Decoder`]: tokio_util::codec::Decoder

pub mod inline;
mod service;
pub mod spawned;
mod transport;
mod wire;

pub use service::Service;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use wire::Id;

use crate::probe::WorkParams;

/// The requests in flight, by id: what `$/cancelRequest` looks up.
type Tokens = foldhash::HashMap<Id, CancellationToken>;

/// Where replies go: the writer task's queue of framed replies.
type Outgoing = mpsc::UnboundedSender<Vec<u8>>;

/// What a frame asks of the server, once read.
enum Action {
    /// Answer at once.
    Reply(Id, wire::Answer),
    /// Start the work of request `Id` (`bench/work`).
    Work(Id, WorkParams),
    /// Cancel request `Id`.
    Cancel(Id),
    /// Nothing (notifications other than a cancel, replies, frames that are no JSON-RPC).
    Nothing,
}

/// The handler's work, raced against its token: the answer, `-32800` if the token won.
async fn run(params: WorkParams, token: CancellationToken) -> wire::Answer {
    tokio::select! {
        () = crate::probe::work(params) => wire::Answer::Done,
        () = token.cancelled() => wire::Answer::cancelled(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    // Each peer's test has its own tag: the probe's records are global to the test process.

    #[tokio::test]
    async fn spawned_serves_work_cancel_and_eof() {
        let error = json!({"code": -32800, "message": "RequestCancelled"});
        super::super::lsp_check::serves_work_cancel_and_eof(super::spawned::serve, 11, error).await;
    }

    #[tokio::test]
    async fn inline_serves_work_cancel_and_eof() {
        let error = json!({"code": -32800, "message": "RequestCancelled"});
        super::super::lsp_check::serves_work_cancel_and_eof(super::inline::serve, 31, error).await;
    }
}
