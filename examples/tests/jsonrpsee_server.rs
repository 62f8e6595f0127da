//! The `jsonrpsee_server` example (built in-process by `examples::jsonrpsee_server::start`) driven over real
//! sockets by jsonrpsee's own clients, and by a raw WebSocket where the exact reply on the wire is checked.

use std::{future::Future, time::Duration};

use examples::jsonrpsee_server::{start, start_alone, Running};
use futures_util::{SinkExt, StreamExt};
use jsonrpsee::{
    core::{client::ClientT, params::ObjectParams},
    rpc_params,
};
use jsonrpsee_http_client::HttpClientBuilder;
use jsonrpsee_ws_client::WsClientBuilder;
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_tungstenite::{tungstenite::Message, MaybeTlsStream, WebSocketStream};

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// A hang guard, never the thing tested: what is awaited comes as soon as the server does it.
const GUARD: Duration = Duration::from_secs(20);

/// A sleep no test waits for: only a cancel ends it.
const LONG_MS: u64 = 600_000;

async fn server() -> Running {
    start("127.0.0.1:0", None).await.expect("bound")
}

async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let waited = tokio::time::timeout(GUARD, async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await;
    assert!(waited.is_ok(), "never happened: {what}");
}

async fn guarded<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(GUARD, future)
        .await
        .unwrap_or_else(|_| panic!("never happened: {what}"))
}

async fn raw_ws(running: &Running) -> Ws {
    let (ws, _) = tokio_tungstenite::connect_async(format!("ws://{}", running.addr))
        .await
        .expect("connected");
    ws
}

async fn send(ws: &mut Ws, message: Value) {
    ws.send(Message::text(message.to_string()))
        .await
        .expect("sent");
}

/// The next text frame, as JSON.
async fn next(ws: &mut Ws) -> Value {
    loop {
        let frame = guarded("a reply", ws.next())
            .await
            .expect("open")
            .expect("read");
        if let Message::Text(text) = frame {
            return serde_json::from_str(&text).expect("JSON");
        }
    }
}

/// `{"ms": ms}`, for jsonrpsee's clients.
fn by_name(ms: u64) -> ObjectParams {
    let mut params = ObjectParams::new();
    params.insert("ms", ms).expect("a number");
    params
}

fn sleep_call(id: Value, ms: u64) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "method": "demo/sleep", "params": { "ms": ms } })
}

fn cancel(id: Value) -> Value {
    json!({ "jsonrpc": "2.0", "method": "$/cancelRequest", "params": { "id": id } })
}

fn cancelled_reply(id: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "error": { "code": -32800, "message": "Request cancelled" } })
}

fn in_flight(running: &Running) -> usize {
    running
        .layer
        .as_ref()
        .expect("under the adapter")
        .in_flight()
}

/// `demo/stats` over HTTP, and the adapter's own count: nothing left running.
async fn assert_nothing_in_flight(running: &Running) {
    wait_until("no call in flight", || in_flight(running) == 0).await;
    let client = HttpClientBuilder::default()
        .build(format!("http://{}", running.addr))
        .expect("client");
    let stats: Value = guarded("stats", client.request("demo/stats", rpc_params![]))
        .await
        .expect("stats");
    assert_eq!(stats["inFlight"], 0, "{stats}");
}

/// Once the one handler has started, drops `call` (the task holding the client) and waits for the handler to be
/// counted stopped, not completed.
async fn abort_once_started(running: &Running, call: tokio::task::JoinHandle<()>) {
    wait_until("the handler started", || {
        running.stats.snapshot().started == 1
    })
    .await;
    call.abort();
    wait_until("the handler stopped", || {
        running.stats.snapshot().cancelled == 1
    })
    .await;
    assert_eq!(running.stats.snapshot().completed, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_websocket_closes_is_stopped() {
    let running = server().await;
    let client = WsClientBuilder::default()
        .build(format!("ws://{}", running.addr))
        .await
        .expect("connected");
    let call = tokio::spawn(async move {
        let _: Result<Value, _> = client.request("demo/sleep", by_name(LONG_MS)).await;
    });
    // The client and its connection go: the task holding them is dropped.
    abort_once_started(&running, call).await;
    let layer = running.layer.as_ref().unwrap();
    wait_until("the connection's link closed", || layer.stats().open == 0).await;
    assert_nothing_in_flight(&running).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_http_request_is_aborted_is_stopped() {
    let running = server().await;
    let client = HttpClientBuilder::default()
        .build(format!("http://{}", running.addr))
        .expect("client");
    let call = tokio::spawn(async move {
        let _: Result<Value, _> = client.request("demo/sleep", by_name(LONG_MS)).await;
    });
    abort_once_started(&running, call).await;
    assert_nothing_in_flight(&running).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_request_on_the_same_websocket_is_answered_32800() {
    let running = server().await;
    let mut ws = raw_ws(&running).await;
    send(&mut ws, sleep_call(json!(1), LONG_MS)).await;
    wait_until("the handler started", || {
        running.stats.snapshot().started == 1
    })
    .await;
    send(&mut ws, cancel(json!(1))).await;
    assert_eq!(next(&mut ws).await, cancelled_reply(json!(1)));
    wait_until("the handler stopped", || {
        running.stats.snapshot().cancelled == 1
    })
    .await;
    // A string id is another id: `"1"` names nothing here.
    send(&mut ws, sleep_call(json!("a"), LONG_MS)).await;
    wait_until("the second handler started", || {
        running.stats.snapshot().started == 2
    })
    .await;
    send(&mut ws, cancel(json!("a"))).await;
    assert_eq!(next(&mut ws).await, cancelled_reply(json!("a")));
    assert_nothing_in_flight(&running).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_early_cancel_makes_its_call_answered_32800_without_running() {
    let running = server().await;
    let mut ws = raw_ws(&running).await;
    send(&mut ws, cancel(json!(2))).await;
    // jsonrpsee runs each message on a task of its own: the call goes once the cancel was taken.
    let layer = running.layer.as_ref().unwrap();
    wait_until("the cancel taken", || layer.stats().requests == 1).await;
    send(&mut ws, sleep_call(json!(2), LONG_MS)).await;
    assert_eq!(next(&mut ws).await, cancelled_reply(json!(2)));
    assert_eq!(
        running.stats.snapshot().started,
        0,
        "the cancelled call never ran"
    );
    assert_nothing_in_flight(&running).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_past_its_timeout_is_stopped_and_answered_32800() {
    let running = start("127.0.0.1:0", Some(Duration::from_millis(50)))
        .await
        .expect("bound");
    let mut ws = raw_ws(&running).await;
    send(&mut ws, sleep_call(json!(3), LONG_MS)).await;
    assert_eq!(next(&mut ws).await, cancelled_reply(json!(3)));
    wait_until("the handler stopped", || {
        running.stats.snapshot().cancelled == 1
    })
    .await;
    // Over HTTP the same.
    let client = HttpClientBuilder::default()
        .build(format!("http://{}", running.addr))
        .expect("client");
    let error = client
        .request::<Value, _>("demo/sleep", by_name(LONG_MS))
        .await
        .expect_err("timed out");
    assert!(
        error.to_string().contains("-32800") || error.to_string().contains("Request cancelled"),
        "{error}"
    );
    wait_until("the handler stopped", || {
        running.stats.snapshot().cancelled == 2
    })
    .await;
    assert_nothing_in_flight(&running).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_with_one_element_cancelled_answers_the_others() {
    let running = server().await;
    let mut ws = raw_ws(&running).await;
    send(
        &mut ws,
        json!([sleep_call(json!(10), LONG_MS), sleep_call(json!(11), 20)]),
    )
    .await;
    wait_until("both handlers started", || {
        running.stats.snapshot().started == 2
    })
    .await;
    send(&mut ws, cancel(json!(10))).await;
    assert_eq!(
        next(&mut ws).await,
        json!([
            cancelled_reply(json!(10)),
            { "jsonrpc": "2.0", "id": 11, "result": { "slept": 20 } },
        ])
    );
    let stats = running.stats.snapshot();
    assert_eq!((stats.completed, stats.cancelled), (1, 1));
    assert_nothing_in_flight(&running).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_and_malformed_cancels_never_break_the_connection() {
    let running = server().await;
    let mut ws = raw_ws(&running).await;
    send(&mut ws, sleep_call(json!(1), LONG_MS)).await;
    wait_until("the handler started", || {
        running.stats.snapshot().started == 1
    })
    .await;
    ws.send(Message::text("{not json")).await.expect("sent");
    assert_eq!(next(&mut ws).await["error"]["code"], -32700);
    for malformed in [
        json!({ "jsonrpc": "2.0", "method": "$/cancelRequest" }),
        json!({ "jsonrpc": "2.0", "method": "$/cancelRequest", "params": { "id": true } }),
        json!({ "jsonrpc": "2.0", "method": "$/cancelRequest", "params": { "id": [1] } }),
        json!({ "jsonrpc": "2.0", "method": "$/cancelRequest", "params": [1] }),
        json!({ "jsonrpc": "2.0", "method": "$/cancelRequest", "params": { "id": "1" } }),
        json!({ "jsonrpc": "2.0", "method": "$/cancelRequest", "params": { "id": 99 } }),
        json!({ "jsonrpc": "2.0", "method": "$/cancelRequest", "params": { "id": -1 } }),
        json!({ "jsonrpc": "2.0", "method": "$/cancelRequest", "params": { "id": 1.5 } }),
        json!({ "jsonrpc": "2.0", "method": "$/cancelRequest", "params": { "id": 1e300 } }),
    ] {
        send(&mut ws, malformed).await;
    }
    // A cancel sent as a call is not one: jsonrpsee answers it as an unknown method.
    send(
        &mut ws,
        json!({ "jsonrpc": "2.0", "id": 5, "method": "$/cancelRequest", "params": { "id": 1 } }),
    )
    .await;
    assert_eq!(next(&mut ws).await["error"]["code"], -32601);
    // Through all that, call 1 ran on (its id as a string, an unknown id: other calls), and the connection serves.
    send(&mut ws, sleep_call(json!(2), 0)).await;
    assert_eq!(next(&mut ws).await["result"], json!({ "slept": 0 }));
    assert_eq!(running.stats.snapshot().cancelled, 0);
    send(&mut ws, cancel(json!(1))).await;
    assert_eq!(next(&mut ws).await, cancelled_reply(json!(1)));
    assert_nothing_in_flight(&running).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_calls_one_in_ten_cancelled_leave_every_table_empty() {
    const CALLS: u64 = 10_000;
    let running = server().await;
    let (mut to_server, mut from_server) = raw_ws(&running).await.split();
    let replies = tokio::spawn(async move {
        let mut replies = Vec::with_capacity(CALLS as usize);
        while replies.len() < CALLS as usize {
            match from_server.next().await {
                Some(Ok(Message::Text(text))) => {
                    replies.push(serde_json::from_str::<Value>(&text).expect("JSON"))
                }
                Some(Ok(_)) => {}
                other => panic!("the connection ended: {other:?}"),
            }
        }
        replies
    });
    for id in 0..CALLS {
        let cancelled = id % 10 == 0;
        let call = sleep_call(json!(id), if cancelled { LONG_MS } else { 1 });
        to_server
            .send(Message::text(call.to_string()))
            .await
            .expect("sent");
        if cancelled {
            // Right behind its call, or before it (jsonrpsee runs each message on a task of its own): either way
            // the call is answered -32800.
            to_server
                .send(Message::text(cancel(json!(id)).to_string()))
                .await
                .expect("sent");
        }
    }
    let replies = guarded("every reply", replies).await.expect("read");
    let mut answered = vec![false; CALLS as usize];
    for reply in replies {
        let id = reply["id"].as_u64().expect("an id");
        assert!(
            !std::mem::replace(&mut answered[id as usize], true),
            "one reply per call: {id}"
        );
        if id % 10 == 0 {
            assert_eq!(reply, cancelled_reply(json!(id)));
        } else {
            assert_eq!(reply["result"], json!({ "slept": 1 }), "{reply}");
        }
    }
    let stats = running.stats.snapshot();
    assert_eq!(stats.completed, CALLS - CALLS / 10);
    assert_eq!(
        stats.started - stats.completed,
        stats.cancelled,
        "every cancelled handler that ran stopped"
    );
    assert_nothing_in_flight(&running).await;
    let layer = running.layer.as_ref().unwrap();
    drop(to_server);
    wait_until("every link closed", || layer.stats().open == 0).await;
    assert_eq!(layer.stats().in_flight, 0);
}

/// What jsonrpsee does alone, without the adapter: a `$/cancelRequest` is a notification it has no method for,
/// so the call runs to its end and answers its result. The gap the adapter fills.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jsonrpsee_alone_runs_a_cancelled_call_to_its_end() {
    let running = start_alone("127.0.0.1:0").await.expect("bound");
    let mut ws = raw_ws(&running).await;
    send(&mut ws, sleep_call(json!(1), 300)).await;
    wait_until("the handler started", || {
        running.stats.snapshot().started == 1
    })
    .await;
    send(&mut ws, cancel(json!(1))).await;
    assert_eq!(
        next(&mut ws).await,
        json!({ "jsonrpc": "2.0", "id": 1, "result": { "slept": 300 } })
    );
    let stats = running.stats.snapshot();
    assert_eq!((stats.completed, stats.cancelled), (1, 0));
}

/// What jsonrpsee 0.26.1 does alone when a call's WebSocket closes: it drops the call's future (each message's
/// task races the call against its connection's sink closing), so an async handler stops, unlike what jsonrpsee
/// did before (its PR #1646 is about blocking methods, which nothing can stop). It stops without a word to the
/// handler: no token, no reason, no count; the adapter adds those, not the stop itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jsonrpsee_alone_drops_a_call_whose_websocket_closes() {
    let running = start_alone("127.0.0.1:0").await.expect("bound");
    let ws = {
        let mut ws = raw_ws(&running).await;
        send(&mut ws, sleep_call(json!(1), LONG_MS)).await;
        ws
    };
    wait_until("the handler started", || {
        running.stats.snapshot().started == 1
    })
    .await;
    drop(ws);
    wait_until("the handler dropped", || {
        running.stats.snapshot().cancelled == 1
    })
    .await;
}
