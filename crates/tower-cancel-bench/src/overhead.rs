//! In-process cost of the layers: one call of a trivial service, bare and wrapped, without any connection.
//!
//! Three shapes of handler and request, each with its own bare service to be compared with:
//! - the plain one: a numeric id, small params, a handler ready on its first poll. It flatters a stack: a handler
//!   that is ready at once never has the stack register its waker nor arm its timer;
//! - a handler that awaits once (`tokio::task::yield_now`) before answering, as real handlers do, with and without a
//!   timeout: the stack registers the waker, the timeout arms its timer;
//! - a string id (a UUID's 36 characters, as MCP clients send them) and 4 KiB params.
//!
//! Then the connection path: the same plain and awaiting shapes with requests as the `tower-cancel-io` driver makes
//! them, each read by a [`Connection`] (`Connection::receive` of the parsed message, which ties the request to
//! its connection), of a scope speaking the stack's dialect as `Server::with_stack` makes it, so the connection
//! has a [`Peer`](tower_cancel::Peer): the stack registers the request in the connection's scope, counts it in
//! the connection, and its cascade layer gives the handler a child of that peer. Its own bare service is the same
//! service over the same requests. A last row has the handler take its child peer (`Request::peer`), as one that
//! calls the client back does.
//!
//! Beside the stack, the hand-written baseline ([`peers::baseline::Service`]): what a user without this library
//! wraps a service in (a token in a map per request, the inner future raced against it, the entry removed at the
//! end).

use std::{
    future::Future,
    pin::pin,
    sync::Arc,
    task::{Context, Poll, Wake, Waker},
    time::Duration,
};

use futures_util::future;
use serde_json::{value::RawValue, Value};
use tower::{service_fn, Layer, Service};
use tower_cancel::{
    bus::{LocalBus, Replica},
    dialect::{Lsp, Mcp},
    BoxError, CancelLayer, CancelStack, CascadeLayer, Connection, ErrorMapLayer, Id, Incoming,
    Message, Outbox, Request, Response, Scope, TimeoutLayer,
};

use crate::peers;

/// One way of serving a request: called with the request's id, it makes the request, calls the service and polls
/// the answer to the end.
pub type Call = Box<dyn FnMut(i64)>;

/// A variant measured.
pub struct Variant {
    /// The name in the tables.
    pub name: &'static str,
    /// The index of the variant it adds to (its bare service), if it is not one itself.
    pub baseline: Option<usize>,
    /// One call.
    pub call: Call,
}

impl std::fmt::Debug for Variant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Variant")
            .field("name", &self.name)
            .field("baseline", &self.baseline)
            .finish_non_exhaustive()
    }
}

/// The index of the plain bare service among [`variants`].
pub const BARE: usize = 1;
/// The index of the full default stack over the plain handler.
pub const STACK: usize = 6;
/// The index of the hand-written baseline (a map of tokens, `tokio::select!`) over the plain bare service.
pub const HAND_WRITTEN: usize = 7;
/// The index of the bare service over a handler that awaits once.
pub const BARE_YIELDING: usize = 9;
/// The index of the full default stack over a handler that awaits once.
pub const STACK_YIELDING: usize = 10;
/// The index of the MCP stack over requests of a session's exchange.
pub const STACK_EXCHANGE: usize = 12;
/// The index of the same with the session's scope attached to a replica.
pub const STACK_EXCHANGE_REPLICA: usize = 13;
/// The index of the bare service over requests with a string id and 4 KiB params.
pub const BARE_STRING_ID: usize = 14;
/// The index of the ACP stack over `session/prompt` requests, not grouped.
pub const STACK_ACP_PROMPT: usize = 16;
/// The index of the same, grouped by `sessionId` at admission.
pub const STACK_ACP_PROMPT_GROUPED: usize = 17;
/// The index of the bare service over requests read by a connection (the connection path).
pub const BARE_CONNECTION: usize = 18;
/// The index of the full default stack over requests read by a connection, handler ready at once.
pub const STACK_CONNECTION: usize = 19;
/// The index of the bare service over requests read by a connection, handler that awaits once.
pub const BARE_CONNECTION_YIELDING: usize = 20;
/// The index of the full default stack over requests read by a connection, handler that awaits once.
pub const STACK_CONNECTION_YIELDING: usize = 21;
/// The index of the full default stack over requests read by a connection, the handler taking its child peer.
pub const STACK_CONNECTION_CHILD_PEER: usize = 22;

/// The variants measured: the request alone, then for each shape its bare service followed by the layers or stacks
/// over it.
pub fn variants() -> Vec<Variant> {
    let timeout = || TimeoutLayer::new(Duration::from_secs(30));
    let with = |name, baseline, call| Variant {
        name,
        baseline,
        call,
    };
    vec![
        with(
            "making the request only",
            None,
            Box::new(|id| drop(request(id))),
        ),
        with("bare service", None, call(service_fn(bare), request)),
        with(
            "CancelLayer alone",
            Some(BARE),
            call(CancelLayer::new(Lsp).layer(service_fn(trivial)), request),
        ),
        with(
            "TimeoutLayer (30 s) alone",
            Some(BARE),
            call(timeout().layer(service_fn(trivial)), request),
        ),
        with(
            "CascadeLayer alone",
            Some(BARE),
            call(CascadeLayer::new().layer(service_fn(trivial)), request),
        ),
        with(
            "ErrorMapLayer alone",
            Some(BARE),
            call(ErrorMapLayer::new(Lsp).layer(service_fn(trivial)), request),
        ),
        with(
            "CancelStack::lsp() (full default stack)",
            Some(BARE),
            call(CancelStack::lsp().layer(service_fn(trivial)), request),
        ),
        with(
            "hand-written: map of tokens, the handler raced against its token (what users would otherwise write)",
            Some(BARE),
            call(peers::baseline::Service::new(service_fn(bare)), request),
        ),
        with(
            "CancelStack::lsp().timeout(30 s)",
            Some(BARE),
            call(
                CancelStack::lsp()
                    .timeout(Duration::from_secs(30))
                    .layer(service_fn(trivial)),
                request,
            ),
        ),
        with(
            "bare service, handler awaits once",
            None,
            call(service_fn(bare_yielding), request),
        ),
        with(
            "CancelStack::lsp(), handler awaits once",
            Some(BARE_YIELDING),
            call(CancelStack::lsp().layer(service_fn(yielding)), request),
        ),
        with(
            "CancelStack::lsp().timeout(30 s), handler awaits once",
            Some(BARE_YIELDING),
            call(
                CancelStack::lsp()
                    .timeout(Duration::from_secs(30))
                    .layer(service_fn(yielding)),
                request,
            ),
        ),
        with(
            "CancelStack::mcp(), requests on an HTTP session's exchange",
            Some(BARE),
            call(
                CancelStack::mcp().layer(service_fn(trivial)),
                on_exchange(None),
            ),
        ),
        with(
            "the same, the session's scope attached to a replica (cross-replica bus)",
            Some(BARE),
            call(
                CancelStack::mcp().layer(service_fn(trivial)),
                on_exchange(Some(LocalBus::new().replica("bench"))),
            ),
        ),
        with(
            "bare service, string id and 4 KiB params",
            None,
            call(service_fn(bare), request_string_id_4k),
        ),
        with(
            "CancelStack::lsp(), string id and 4 KiB params",
            Some(BARE_STRING_ID),
            call(
                CancelStack::lsp().layer(service_fn(trivial)),
                request_string_id_4k,
            ),
        ),
        with(
            "CancelStack::acp(), session/prompt requests",
            Some(BARE),
            call(CancelStack::acp().layer(service_fn(trivial)), acp_prompt),
        ),
        with(
            "CancelStack::acp().group_by_param(\"sessionId\"), session/prompt requests",
            Some(BARE),
            call(
                CancelStack::acp()
                    .group_by_param("sessionId")
                    .layer(service_fn(trivial)),
                acp_prompt,
            ),
        ),
        with(
            "bare service, requests read by a connection (connection path)",
            None,
            call(service_fn(bare), on_connection()),
        ),
        with(
            "CancelStack::lsp(), requests read by a connection (connection path)",
            Some(BARE_CONNECTION),
            call(CancelStack::lsp().layer(service_fn(trivial)), on_connection()),
        ),
        with(
            "bare service, handler awaits once, requests read by a connection (connection path)",
            None,
            call(service_fn(bare_yielding), on_connection()),
        ),
        with(
            "CancelStack::lsp(), handler awaits once, requests read by a connection (connection path)",
            Some(BARE_CONNECTION_YIELDING),
            call(CancelStack::lsp().layer(service_fn(yielding)), on_connection()),
        ),
        with(
            "CancelStack::lsp(), requests read by a connection, the handler takes its child peer (cascade)",
            Some(BARE_CONNECTION),
            call(
                CancelStack::lsp().layer(service_fn(taking_child_peer)),
                on_connection(),
            ),
        ),
    ]
}

/// Requests as the `tower-cancel-io` driver makes them: the parsed message received by a connection of a scope
/// that speaks LSP, as `Server::with_stack(CancelStack::lsp(), ..)` makes it (so it has a peer for the cascade
/// layer's child). The outbox's receiving end lives as long as the requests are made, as the driver's writer does.
fn on_connection() -> impl FnMut(i64) -> Request {
    let (outbox, receiver) = Outbox::new();
    let connection: Connection = CancelStack::lsp().scope().connect(outbox);
    move |id| {
        let _ = &receiver;
        match connection.receive(Message::Request(request(id))) {
            Incoming::Request(request) => request,
            other => panic!("a request is handed back to the stack, not {other:?}"),
        }
    }
}

/// An ACP `session/prompt` as the SDK sends it: its session id after a short prompt, so that grouping reads past
/// the prompt to find it.
pub fn acp_prompt(id: i64) -> Request {
    let params = RawValue::from_string(
        r#"{"prompt":[{"type":"text","text":"Summarize the open file in three sentences."}],"sessionId":"sess-1"}"#
            .to_owned(),
    )
    .expect("valid JSON");
    Request::from_parts(
        Some(Id::Number(id)),
        "session/prompt".to_owned(),
        Some(params),
    )
}

/// A request as the driver makes it from a frame: `bench/work` with small params.
pub fn request(id: i64) -> Request {
    let params = RawValue::from_string(r#"{"ms":0,"tag":1}"#.to_owned()).expect("valid JSON");
    Request::from_parts(Some(Id::Number(id)), "bench/work".to_owned(), Some(params))
}

/// Requests as an HTTP front end makes them: prepared on an exchange of a session's scope, attached to `replica`
/// when one is given. A request that is never cancelled should not pay for the attachment: only a cancel that
/// misses locally looks at it.
fn on_exchange(replica: Option<Replica>) -> impl FnMut(i64) -> Request {
    let scope = Scope::with_dialect(Mcp);
    let scope = match &replica {
        Some(replica) => replica.scope("mcp:session:bench", scope),
        None => scope,
    };
    let exchange = scope.connect_exchange(Outbox::closed());
    move |id| {
        // The replica lives as long as the requests are made.
        let _ = &replica;
        let mut request = self::request(id);
        exchange.prepare(&mut request);
        request
    }
}

/// A request with a string id of a UUID's form and 4 KiB of params, as an MCP client's `tools/call` with a document
/// in its arguments.
pub fn request_string_id_4k(id: i64) -> Request {
    let pad = "x".repeat(4096);
    let params =
        RawValue::from_string(format!(r#"{{"ms":0,"tag":1,"pad":"{pad}"}}"#)).expect("valid JSON");
    let id = Id::String(format!("6f1c2d3e-0b7a-4c1d-9e2f-{id:012}"));
    Request::from_parts(Some(id), "bench/work".to_owned(), Some(params))
}

fn trivial(_req: Request) -> future::Ready<Result<Value, BoxError>> {
    future::ready(Ok(Value::Bool(true)))
}

fn bare(req: Request) -> future::Ready<Result<Option<Response>, BoxError>> {
    future::ready(Ok(req
        .id()
        .cloned()
        .map(|id| Response::ok(id, Value::Bool(true)))))
}

/// A handler that takes its child peer (as one that calls the client back does) and answers at once.
fn taking_child_peer(req: Request) -> future::Ready<Result<Value, BoxError>> {
    let peer = req.peer();
    assert!(
        peer.is_some(),
        "a request read by a connection with a peer gets a child of it"
    );
    future::ready(Ok(Value::Bool(true)))
}

async fn yielding(req: Request) -> Result<Value, BoxError> {
    drop(req);
    tokio::task::yield_now().await;
    Ok(Value::Bool(true))
}

async fn bare_yielding(req: Request) -> Result<Option<Response>, BoxError> {
    let id = req.id().cloned();
    drop(req);
    tokio::task::yield_now().await;
    Ok(id.map(|id| Response::ok(id, Value::Bool(true))))
}

/// A waker that does nothing but is a real one (an `Arc`), so that registering it costs what a task's waker does.
struct Nudge;

impl Wake for Nudge {
    fn wake(self: Arc<Self>) {}
}

fn call<S>(mut service: S, mut make: impl FnMut(i64) -> Request + 'static) -> Call
where
    S: Service<Request> + 'static,
    S::Future: Future<Output = Result<S::Response, S::Error>>,
    S::Error: std::fmt::Debug,
{
    let waker = Waker::from(Arc::new(Nudge));
    Box::new(move |id| {
        let mut answer = pin!(service.call(make(id)));
        let mut cx = Context::from_waker(&waker);
        // `yield_now` outside a runtime's scheduler wakes at once and is ready on its next poll, so this polls a
        // yielding handler twice and a trivial one once.
        let answer = loop {
            if let Poll::Ready(answer) = answer.as_mut().poll(&mut cx) {
                break answer;
            }
        };
        std::hint::black_box(answer.expect("the trivial service succeeds"));
    })
}
