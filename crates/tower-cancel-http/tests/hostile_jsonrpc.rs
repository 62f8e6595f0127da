//! JSON-RPC over HTTP against a hostile client, over real sockets: a batch of 100 000 tiny requests, many large
//! batches at once, and a batch whose replies are huge. Each is bounded: the client sees the protocol's answer
//! (one -32600, a 503 with `Retry-After`, a -32603 in a reply's place), the server keeps no more than its bound,
//! and a normal request is still answered within a second.

mod support;

use std::{
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::Duration,
};

use axum::{routing::post_service, Router};
use serde_json::{json, Value};
use support::{eventually, serve};
use tower::{service_fn, ServiceBuilder};
use tower_cancel::{BoxError, CancelStack, Request};
use tower_cancel_http::{JsonRpc, RpcService};

/// How many handlers run now, and the most that ever ran at once.
#[derive(Clone, Default)]
struct Load {
    now: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
    started: Arc<AtomicUsize>,
}

impl Load {
    fn enter(&self) -> impl Drop {
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        self.started.fetch_add(1, Ordering::SeqCst);
        struct Leave(Arc<AtomicUsize>);
        impl Drop for Leave {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        Leave(self.now.clone())
    }
}

/// `sleep {ms}` answers after that long; `big {bytes}` answers a string that long; anything else its method.
async fn handle(load: Load, req: Request) -> Result<Value, BoxError> {
    let _running = load.enter();
    let params = req.params_as::<Value>().unwrap_or(Value::Null);
    match req.method() {
        "sleep" => {
            let ms = params["ms"].as_u64().unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok(json!({ "slept": ms }))
        }
        "big" => Ok(json!(
            "x".repeat(params["bytes"].as_u64().unwrap_or(0) as usize)
        )),
        method => Ok(json!({ "method": method })),
    }
}

fn rpc(load: &Load) -> JsonRpc<impl RpcService> {
    let load = load.clone();
    let stack = ServiceBuilder::new()
        .layer(CancelStack::lsp())
        .service(service_fn(move |req| handle(load.clone(), req)));
    JsonRpc::new(stack)
}

async fn mount(rpc: JsonRpc<impl RpcService>) -> String {
    format!(
        "http://{}/rpc",
        serve(Router::new().route("/rpc", post_service(rpc))).await
    )
}

struct Answer {
    status: u16,
    retry_after: Option<String>,
    body: String,
}

async fn post(client: &reqwest::Client, url: &str, body: String) -> Answer {
    let response = client
        .post(url)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    Answer {
        status: response.status().as_u16(),
        retry_after: response
            .headers()
            .get("retry-after")
            .map(|value| value.to_str().unwrap().to_owned()),
        body: response.text().await.unwrap(),
    }
}

/// A normal request is answered (200 with its reply, or the front end's "busy") within one second.
async fn a_normal_request_is_answered_within_a_second(client: &reqwest::Client, url: &str) -> u16 {
    let body = json!({"jsonrpc": "2.0", "id": "probe", "method": "ping"}).to_string();
    let answer = tokio::time::timeout(Duration::from_secs(1), post(client, url, body))
        .await
        .expect("a normal request answered within a second");
    answer.status
}

#[tokio::test]
async fn a_batch_of_100_000_tiny_requests_is_one_invalid_request_and_runs_nothing() {
    let load = Load::default();
    let rpc = rpc(&load);
    let url = mount(rpc.clone()).await;
    // Under the 4 MiB body limit: `jsonrpc` may be left out, and the ids are short.
    let batch: Vec<Value> = (0..100_000)
        .map(|n| json!({"id": n, "method": "a"}))
        .collect();
    let body = serde_json::to_string(&batch).unwrap();
    assert!(body.len() < tower_cancel_http::DEFAULT_MAX_BODY_BYTES);
    let client = reqwest::Client::new();
    let answer = post(&client, &url, body).await;
    assert_eq!(answer.status, 200);
    let reply: Value = serde_json::from_str(&answer.body).unwrap();
    assert_eq!(
        reply["id"],
        Value::Null,
        "one reply, not an array: {}",
        &answer.body[..80.min(answer.body.len())]
    );
    assert_eq!(reply["error"]["code"], -32600);
    let message = reply["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("100000") && message.contains("1000"),
        "{message}"
    );
    assert_eq!(load.started.load(Ordering::SeqCst), 0, "none of it ran");
    assert_eq!(rpc.stats().requests, 0, "none of it was taken");
    // A batch at the bound is served whole.
    let batch: Vec<Value> = (0..tower_cancel_http::jsonrpc::DEFAULT_MAX_BATCH_LEN)
        .map(|n| json!({"jsonrpc": "2.0", "id": n, "method": "a"}))
        .collect();
    let answer = post(&client, &url, serde_json::to_string(&batch).unwrap()).await;
    let replies: Vec<Value> = serde_json::from_str(&answer.body).unwrap();
    assert_eq!(
        replies.len(),
        tower_cancel_http::jsonrpc::DEFAULT_MAX_BATCH_LEN
    );
}

#[tokio::test]
async fn batches_past_the_in_flight_bound_get_503_with_retry_after_and_the_bound_holds() {
    let load = Load::default();
    let rpc = rpc(&load).max_in_flight(100);
    let url = mount(rpc.clone()).await;
    let client = reqwest::Client::new();
    // Eight batches of 40 at once: two fit (80 of 100), a third would not.
    let batch: Vec<Value> = (0..40)
        .map(|n| json!({"jsonrpc": "2.0", "id": n, "method": "sleep", "params": {"ms": 1_500}}))
        .collect();
    let batch = serde_json::to_string(&batch).unwrap();
    let posts: Vec<_> = (0..8)
        .map(|_| {
            let (client, url, batch) = (client.clone(), url.clone(), batch.clone());
            tokio::spawn(async move { post(&client, &url, batch).await })
        })
        .collect();
    eventually("two batches running", || {
        load.now.load(Ordering::SeqCst) == 80
    })
    .await;
    // Full but for 20: a request still fits and is answered; a batch of 40 does not.
    assert_eq!(
        a_normal_request_is_answered_within_a_second(&client, &url).await,
        200
    );
    let mut refused = 0;
    for post in posts {
        let answer = post.await.unwrap();
        match answer.status {
            200 => {
                let replies: Vec<Value> = serde_json::from_str(&answer.body).unwrap();
                assert_eq!(replies.len(), 40);
                assert!(replies
                    .iter()
                    .all(|reply| reply["result"]["slept"] == 1_500));
            }
            503 => {
                assert_eq!(answer.retry_after.as_deref(), Some("1"));
                refused += 1;
            }
            status => panic!("{status}: {}", answer.body),
        }
    }
    assert_eq!(refused, 6, "two batches fit, six did not");
    assert!(load.most.load(Ordering::SeqCst) <= 100, "the bound held");
    assert_eq!(
        load.started.load(Ordering::SeqCst),
        81,
        "the refused ones never ran"
    );
    assert_eq!(rpc.stats().busy, 6 * 40);
    eventually("nothing in flight", || rpc.in_flight() == 0).await;
    assert_eq!(
        a_normal_request_is_answered_within_a_second(&client, &url).await,
        200
    );
}

#[tokio::test]
async fn a_principal_cannot_take_the_whole_endpoint() {
    #[derive(Clone, PartialEq, Eq, Hash)]
    struct Principal(&'static str);
    let load = Load::default();
    let rpc = rpc(&load)
        .scope_by_principal::<Principal>()
        .max_in_flight_per_principal(10);
    let app = Router::new()
        .route("/rpc", post_service(rpc.clone()))
        .layer(axum::middleware::from_fn(
            |mut request: axum::extract::Request, next: axum::middleware::Next| async move {
                let who = match request.headers().get("x-who").map(|v| v.as_bytes()) {
                    Some(b"mallory") => "mallory",
                    _ => "alice",
                };
                request.extensions_mut().insert(Principal(who));
                next.run(request).await
            },
        ));
    let url = format!("http://{}/rpc", serve(app).await);
    let client = reqwest::Client::new();
    let sleeps: Vec<_> = (0..10)
        .map(|n| {
            let (client, url) = (client.clone(), url.clone());
            tokio::spawn(async move {
                let body =
                    json!({"jsonrpc": "2.0", "id": n, "method": "sleep", "params": {"ms": 1_000}});
                client
                    .post(&url)
                    .header("content-type", "application/json")
                    .header("x-who", "mallory")
                    .body(body.to_string())
                    .send()
                    .await
                    .unwrap()
                    .status()
                    .as_u16()
            })
        })
        .collect();
    eventually("mallory's ten running", || {
        load.now.load(Ordering::SeqCst) == 10
    })
    .await;
    let eleventh = client
        .post(&url)
        .header("content-type", "application/json")
        .header("x-who", "mallory")
        .body(json!({"jsonrpc": "2.0", "id": 11, "method": "ping"}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(eleventh.status(), 503);
    // Alice is another principal: her request fits.
    assert_eq!(
        a_normal_request_is_answered_within_a_second(&client, &url).await,
        200
    );
    for sleep in sleeps {
        assert_eq!(sleep.await.unwrap(), 200);
    }
}

#[tokio::test]
async fn a_batchs_replies_are_bounded_in_bytes() {
    let load = Load::default();
    let rpc = rpc(&load);
    let url = mount(rpc.clone()).await;
    const MIB: u64 = 1024 * 1024;
    let batch: Vec<Value> = (0..24)
        .map(|n| json!({"jsonrpc": "2.0", "id": n, "method": "big", "params": {"bytes": MIB}}))
        .collect();
    let client = reqwest::Client::new();
    let answer = post(&client, &url, serde_json::to_string(&batch).unwrap()).await;
    assert_eq!(answer.status, 200);
    let bound = tower_cancel_http::jsonrpc::DEFAULT_MAX_BATCH_REPLY_BYTES;
    assert!(
        answer.body.len() <= bound + 24 * 256,
        "{} bytes, over the bound of {bound}",
        answer.body.len()
    );
    let replies: Vec<Value> = serde_json::from_str(&answer.body).unwrap();
    assert_eq!(replies.len(), 24, "every request has its reply");
    let (results, errors): (Vec<_>, Vec<_>) = replies
        .iter()
        .partition(|reply| reply.get("result").is_some());
    assert_eq!(results.len(), 15, "as many whole results as fit in 16 MiB");
    for error in errors {
        assert_eq!(error["error"]["code"], -32603);
        assert!(error["id"].is_u64(), "the error keeps its request's id");
    }
    let mut ids: Vec<u64> = replies
        .iter()
        .map(|reply| reply["id"].as_u64().unwrap())
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, (0..24).collect::<Vec<_>>());
}
