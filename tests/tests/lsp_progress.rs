//! LSP server-initiated progress over a real connection: a handler creates a progress token on the client
//! (`window/workDoneProgress/create`, through `Request::create_progress` or its own `req.peer()`), and the
//! client's `window/workDoneProgress/cancel` of that token cancels the handler's request (-32800, the progress
//! ended before the reply). The cancel reaches only its own connection, cancels nothing for an unknown token, and
//! is passed on to the service in every case.
//!
//! The handler's methods:
//! - `work {"steps", "every"}`: `create_progress`, then `begin` (titled "work"), a report every `every` ms for each
//!   step, and `{"steps": steps}`; `{"refused": <error>}` when the client refuses the token.
//! - `own_create {"token"}`: sends `window/workDoneProgress/create {token}` through `req.peer()` itself, waits for
//!   the answer, then never ends.

use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use tests::{ms, Conn, Counts};
use tower::service_fn;
use tower_cancel::{progress::ProgressUpdate, BoxError, CancelStack, Request, Scope};
use tower_cancel_io::{Framing, Server};

/// The notifications the service was given, in order.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<(String, Value)>>>);

impl Seen {
    fn notifications(&self) -> Vec<(String, Value)> {
        self.0.lock().unwrap().clone()
    }
}

async fn handle(seen: Seen, req: Request) -> Result<Value, BoxError> {
    let params: Value = req.params_as().unwrap_or(Value::Null);
    if req.is_notification() {
        seen.0
            .lock()
            .unwrap()
            .push((req.method().to_owned(), params));
        return Ok(Value::Null);
    }
    match req.method() {
        "work" => {
            let steps = params["steps"].as_u64().expect("work: steps");
            let total = f64::from(u32::try_from(steps).expect("work: steps fit a u32"));
            let every = params["every"].as_u64().expect("work: every");
            let progress = match req.create_progress().await {
                Ok(progress) => progress,
                Err(error) => return Ok(json!({ "refused": error.to_string() })),
            };
            progress.report(ProgressUpdate::new(0.0).total(total).message("work"));
            for step in 1..=steps {
                tokio::time::sleep(ms(every)).await;
                let done = f64::from(u32::try_from(step).expect("a step fits a u32"));
                progress.report(ProgressUpdate::new(done).total(total));
            }
            Ok(json!({ "steps": steps }))
        }
        "own_create" => {
            let peer = req.peer().expect("a stack with a peer");
            let token = params["token"].clone();
            peer.request("window/workDoneProgress/create", json!({ "token": token }))
                .await?;
            std::future::pending().await
        }
        other => Err(format!("unknown method {other}").into()),
    }
}

/// The LSP stack over `handle`, as a connection of `scope`.
fn serve(scope: &Scope, seen: &Seen) -> Conn {
    let seen = seen.clone();
    let service = service_fn(move |req| handle(seen.clone(), req));
    let server = Server::with_stack(CancelStack::lsp(), service).in_scope(scope.clone());
    Conn::start(server, Framing::ContentLength)
}

fn lsp(seen: &Seen) -> Conn {
    serve(&CancelStack::lsp().scope(), seen)
}

/// End the connection: no more replies, the registry's counters as `expected`, nothing left in flight and no
/// token left bound.
async fn finish(conn: Conn, expected: Counts) {
    let registry = conn.registry().clone();
    conn.finish_counting(expected).await;
    assert_eq!(registry.stats().groups, 0, "tokens left bound");
}

/// Read the server's `window/workDoneProgress/create`, check its shape and give its id and token.
async fn read_create(conn: &mut Conn) -> (Value, Value) {
    let create = conn.recv_json().await;
    assert_eq!(
        create["method"], "window/workDoneProgress/create",
        "{create}"
    );
    let params = create["params"].as_object().expect("create params");
    assert_eq!(params.len(), 1, "{create}");
    (create["id"].clone(), create["params"]["token"].clone())
}

/// `read_create` for a token `Request::create_progress` made: a string of its own.
async fn read_created_token(conn: &mut Conn) -> (Value, Value) {
    let (id, token) = read_create(conn).await;
    let text = token.as_str().expect("a string token");
    assert!(text.starts_with("tower-cancel-progress-"), "{token}");
    (id, token)
}

fn answer(id: &Value) -> String {
    json!({ "jsonrpc": "2.0", "id": id, "result": null }).to_string()
}

fn cancel_token(token: &Value) -> String {
    json!({ "jsonrpc": "2.0", "method": "window/workDoneProgress/cancel", "params": { "token": token } })
        .to_string()
}

fn progress(token: &Value, value: Value) -> String {
    json!({ "jsonrpc": "2.0", "method": "$/progress", "params": { "token": token, "value": value } })
        .to_string()
}

fn begin(token: &Value) -> String {
    let value = json!({ "kind": "begin", "title": "work", "cancellable": true, "percentage": 0 });
    progress(token, value)
}

fn report(token: &Value, step: u64, steps: u64) -> String {
    progress(
        token,
        json!({ "kind": "report", "percentage": step * 100 / steps }),
    )
}

fn end(token: &Value) -> String {
    progress(token, json!({ "kind": "end" }))
}

const CANCELLED_7: &str =
    r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32800,"message":"Request cancelled"}}"#;

const WORK_7: &str =
    r#"{"jsonrpc":"2.0","id":7,"method":"work","params":{"steps":10000,"every":50}}"#;

#[tokio::test(start_paused = true)]
async fn a_cancel_of_the_created_token_cancels_the_request_after_ending_its_progress() {
    let seen = Seen::default();
    let mut conn = lsp(&seen);
    conn.send(WORK_7).await;
    let (id, token) = read_created_token(&mut conn).await;
    conn.send(&answer(&id)).await;
    conn.expect(&begin(&token)).await;
    conn.expect(&report(&token, 1, 10_000)).await;
    conn.send(&cancel_token(&token)).await;
    // The progress ends, then the request's cancelled reply.
    conn.expect(&end(&token)).await;
    conn.expect(CANCELLED_7).await;
    // Acted on, and passed on to the service all the same.
    assert_eq!(
        seen.notifications(),
        [(
            "window/workDoneProgress/cancel".to_owned(),
            json!({ "token": token })
        )]
    );
    assert!(conn.registry().is_empty());
    finish(conn, Counts::new(1, 0, 1)).await;
}

#[tokio::test(start_paused = true)]
async fn a_cancel_sent_with_the_create_answer_still_cancels() {
    let seen = Seen::default();
    let mut conn = lsp(&seen);
    conn.send(WORK_7).await;
    let (id, token) = read_created_token(&mut conn).await;
    // The answer and the cancel in one write: the server reads them back to back.
    conn.send_together(&[&answer(&id), &cancel_token(&token)])
        .await;
    let mut progress_frames = Vec::new();
    loop {
        let frame = conn.recv().await;
        if frame.contains(r#""$/progress""#) {
            progress_frames.push(frame);
            continue;
        }
        tests::assert_same_json(&frame, CANCELLED_7);
        break;
    }
    // Whether the handler got to `begin` before its cancel is the scheduler's: if it did, it also ended it.
    if !progress_frames.is_empty() {
        assert_eq!(progress_frames.len(), 2, "{progress_frames:#?}");
        tests::assert_same_json(&progress_frames[0], &begin(&token));
        tests::assert_same_json(&progress_frames[1], &end(&token));
    }
    finish(conn, Counts::new(1, 0, 1)).await;
}

#[tokio::test(start_paused = true)]
async fn a_token_created_through_the_handlers_own_peer_is_bound_too() {
    for token in [json!("mine"), json!(42)] {
        let seen = Seen::default();
        let mut conn = lsp(&seen);
        conn.send(&format!(
            r#"{{"jsonrpc":"2.0","id":7,"method":"own_create","params":{{"token":{token}}}}}"#
        ))
        .await;
        let (id, created) = read_create(&mut conn).await;
        assert_eq!(created, token);
        conn.send(&answer(&id)).await;
        conn.send(&cancel_token(&token)).await;
        conn.expect(CANCELLED_7).await;
        finish(conn, Counts::new(1, 0, 1)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn unknown_and_malformed_token_cancels_cancel_nothing_and_are_passed_on() {
    let seen = Seen::default();
    let mut conn = lsp(&seen);
    conn.send(r#"{"jsonrpc":"2.0","id":7,"method":"work","params":{"steps":2,"every":50}}"#)
        .await;
    let (id, token) = read_created_token(&mut conn).await;
    conn.send(&answer(&id)).await;
    conn.expect(&begin(&token)).await;
    let others = [
        cancel_token(&json!("nope")),
        cancel_token(&json!(7)),
        r#"{"jsonrpc":"2.0","method":"window/workDoneProgress/cancel","params":{"token":[1]}}"#
            .to_owned(),
        r#"{"jsonrpc":"2.0","method":"window/workDoneProgress/cancel"}"#.to_owned(),
    ];
    for other in &others {
        conn.send(other).await;
    }
    conn.expect(&report(&token, 1, 2)).await;
    conn.expect(&report(&token, 2, 2)).await;
    conn.expect(&end(&token)).await;
    conn.expect(r#"{"jsonrpc":"2.0","id":7,"result":{"steps":2}}"#)
        .await;
    let passed_on: Vec<String> = seen.notifications().into_iter().map(|(m, _)| m).collect();
    assert_eq!(passed_on, vec!["window/workDoneProgress/cancel"; 4]);
    finish(conn, Counts::new(1, 1, 0)).await;
}

#[tokio::test(start_paused = true)]
async fn a_token_cancel_from_another_connection_of_the_scope_does_nothing() {
    let scope = CancelStack::lsp().scope();
    let seen = Seen::default();
    let mut working = serve(&scope, &seen).sharing_scope();
    let mut other = serve(&scope, &seen).sharing_scope();
    working
        .send(r#"{"jsonrpc":"2.0","id":7,"method":"work","params":{"steps":2,"every":50}}"#)
        .await;
    let (id, token) = read_created_token(&mut working).await;
    working.send(&answer(&id)).await;
    working.expect(&begin(&token)).await;
    // The same token, cancelled on the other connection: its own requests only.
    other.send(&cancel_token(&token)).await;
    working.expect(&report(&token, 1, 2)).await;
    working.expect(&report(&token, 2, 2)).await;
    working.expect(&end(&token)).await;
    working
        .expect(r#"{"jsonrpc":"2.0","id":7,"result":{"steps":2}}"#)
        .await;
    assert_eq!(seen.notifications().len(), 1);
    other.finish_quiet().await;
    working.finish_quiet().await;
    assert!(scope.registry().is_empty());
    assert_eq!(scope.registry().stats().groups, 0);
}

#[tokio::test(start_paused = true)]
async fn a_refused_token_gets_no_progress_and_the_work_goes_on() {
    let seen = Seen::default();
    let mut conn = lsp(&seen);
    conn.send(r#"{"jsonrpc":"2.0","id":7,"method":"work","params":{"steps":2,"every":50}}"#)
        .await;
    let (id, token) = read_created_token(&mut conn).await;
    conn.send(
        &json!({ "jsonrpc": "2.0", "id": id, "error": { "code": -32603, "message": "no progress here" } })
            .to_string(),
    )
    .await;
    // No `$/progress` under the refused token: the answer is the next frame.
    conn.expect(r#"{"jsonrpc":"2.0","id":7,"result":{"refused":"the peer answered with an error: no progress here (-32603)"}}"#)
        .await;
    assert!(token.is_string());
    finish(conn, Counts::new(1, 1, 0)).await;
}
