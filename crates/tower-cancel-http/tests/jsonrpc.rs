//! JSON-RPC over HTTP, over real sockets: the replies and status codes a client sees, a hang-up as a cancel,
//! and cancels scoped by POST or by principal.

mod support;

use std::time::Duration;

use axum::{
    routing::{get, post_service},
    Router,
};
use serde_json::{json, Value};
use support::{eventually, handle, raw_post, read_some, serve, Probe};
use tower::{service_fn, ServiceBuilder};
use tower_cancel::CancelStack;
use tower_cancel_http::{JsonRpc, RpcService};

/// The endpoint over the LSP stack (its cancel is `$/cancelRequest`) and the probe's handler.
fn rpc(probe: &Probe) -> JsonRpc<impl RpcService> {
    let probe = probe.clone();
    let stack = ServiceBuilder::new()
        .layer(CancelStack::lsp())
        .service(service_fn(move |req| handle(probe.clone(), req)));
    JsonRpc::new(stack)
}

async fn mount(rpc: JsonRpc<impl RpcService>) -> String {
    let app = Router::new()
        .route("/rpc", post_service(rpc))
        .route("/health", get(|| async { "ok" }));
    format!("http://{}/rpc", serve(app).await)
}

async fn post(url: &str, body: &str) -> (u16, String) {
    post_as(url, body, None).await
}

async fn post_as(url: &str, body: &str, token: Option<&str>) -> (u16, String) {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_string());
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text:?}"))
}

#[tokio::test]
async fn a_request_gets_its_reply_in_the_body() {
    let probe = Probe::default();
    let rpc = rpc(&probe);
    let url = mount(rpc.clone()).await;
    let (status, body) = post(
        &url,
        r#"{"jsonrpc":"2.0","id":1,"method":"demo/sleep","params":{"ms":1}}"#,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        json(&body),
        json!({"jsonrpc":"2.0","id":1,"result":{"slept":1}})
    );
    // The router's other routes are untouched.
    let health = reqwest::get(url.replace("/rpc", "/health")).await.unwrap();
    assert_eq!(health.text().await.unwrap(), "ok");
    assert_eq!(
        probe.ends(),
        vec![("1".to_string(), "completed".to_string())]
    );
    assert_eq!(rpc.in_flight(), 0);
}

#[tokio::test]
async fn a_batch_gets_the_replies_its_requests_have() {
    let probe = Probe::default();
    let url = mount(rpc(&probe)).await;
    let batch = r#"[
        {"jsonrpc":"2.0","id":"a","method":"demo/sleep","params":{"ms":20}},
        {"jsonrpc":"2.0","method":"note"},
        {"jsonrpc":"2.0","id":"b","method":"other"},
        {"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":"zzz"}},
        {"foo":1},
        [1]
    ]"#;
    let (status, body) = post(&url, batch).await;
    assert_eq!(status, 200);
    assert_eq!(
        json(&body),
        json!([
            {"jsonrpc":"2.0","id":"a","result":{"slept":20}},
            {"jsonrpc":"2.0","id":"b","result":{"method":"other"}},
            {"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request: expected exactly one of method, result or error"}},
            {"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request: a batch inside a batch"}}
        ])
    );
}

#[tokio::test]
async fn what_has_no_reply_gets_204_and_bad_bodies_get_their_error() {
    let probe = Probe::default();
    let url = mount(rpc(&probe)).await;
    assert_eq!(
        post(&url, r#"{"jsonrpc":"2.0","method":"note"}"#).await,
        (204, String::new())
    );
    assert_eq!(
        post(&url, r#"[{"jsonrpc":"2.0","method":"note"}]"#).await,
        (204, String::new())
    );
    let (status, body) = post(&url, "{not json").await;
    assert_eq!(status, 200);
    assert_eq!(json(&body)["error"]["code"], -32700);
    assert_eq!(json(&body)["id"], Value::Null);
    let (status, body) = post(&url, "[]").await;
    assert_eq!(
        (status, json(&body)["error"]["code"].clone()),
        (200, json!(-32600))
    );
    let (status, body) = post(&url, r#"{"jsonrpc":"2.0","id":true,"method":"x"}"#).await;
    assert_eq!(
        (status, json(&body)["error"]["code"].clone()),
        (200, json!(-32600))
    );

    let client = reqwest::Client::new();
    let wrong_type = client
        .post(&url)
        .header("content-type", "text/plain")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong_type.status(), 415);
    let get = client.get(&url).send().await.unwrap();
    assert_eq!(get.status(), 405);
}

#[tokio::test]
async fn a_body_over_the_limit_gets_413() {
    let probe = Probe::default();
    let url = mount(rpc(&probe).max_body_bytes(1024)).await;
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"x","params":"{}"}}"#,
        "a".repeat(2000)
    );
    assert_eq!(post(&url, &big).await.0, 413);
    let (status, _) = post(&url, r#"{"jsonrpc":"2.0","id":1,"method":"x"}"#).await;
    assert_eq!(status, 200, "the next request is served");
}

#[tokio::test]
async fn a_client_that_hangs_up_cancels_its_request_with_reason_disconnect() {
    let probe = Probe::default();
    let rpc = rpc(&probe);
    let addr = mount(rpc.clone()).await;
    let addr = addr
        .trim_start_matches("http://")
        .trim_end_matches("/rpc")
        .parse()
        .unwrap();
    let body = r#"{"jsonrpc":"2.0","id":7,"method":"demo/sleep","params":{"ms":60000}}"#;
    let stream = raw_post(addr, "/rpc", &[("Content-Type", "application/json")], body).await;
    probe.started(1).await;
    drop(stream);
    assert_eq!(
        probe.ended(1).await,
        vec![("7".to_string(), "disconnect".to_string())]
    );
    eventually("nothing in flight", || rpc.in_flight() == 0).await;
}

#[tokio::test]
async fn with_cancel_on_disconnect_off_the_request_runs_to_its_end() {
    let probe = Probe::default();
    let rpc = rpc(&probe).cancel_on_disconnect(false);
    let addr = mount(rpc.clone()).await;
    let addr = addr
        .trim_start_matches("http://")
        .trim_end_matches("/rpc")
        .parse()
        .unwrap();
    let body = r#"{"jsonrpc":"2.0","id":7,"method":"demo/sleep","params":{"ms":300}}"#;
    let stream = raw_post(addr, "/rpc", &[("Content-Type", "application/json")], body).await;
    probe.started(1).await;
    drop(stream);
    assert_eq!(
        probe.ended(1).await,
        vec![("7".to_string(), "completed".to_string())]
    );
    eventually("nothing in flight", || rpc.in_flight() == 0).await;
}

#[tokio::test]
async fn the_reply_is_whole_when_the_client_stays() {
    // The contrast of the hang-up: the same raw client, reading its reply.
    let probe = Probe::default();
    let url = mount(rpc(&probe)).await;
    let addr = url
        .trim_start_matches("http://")
        .trim_end_matches("/rpc")
        .parse()
        .unwrap();
    let body = r#"{"jsonrpc":"2.0","id":7,"method":"demo/sleep","params":{"ms":10}}"#;
    let mut stream = raw_post(
        addr,
        "/rpc",
        &[
            ("Content-Type", "application/json"),
            ("Connection", "close"),
        ],
        body,
    )
    .await;
    let text = read_some(&mut stream, Duration::from_secs(5)).await;
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(
        text.ends_with(r#"{"jsonrpc":"2.0","id":7,"result":{"slept":10}}"#),
        "{text}"
    );
}

#[tokio::test]
async fn by_default_a_cancel_posted_separately_reaches_nothing() {
    let probe = Probe::default();
    let rpc = rpc(&probe);
    let url = mount(rpc.clone()).await;
    let slow = tokio::spawn({
        let url = url.clone();
        async move {
            post(
                &url,
                r#"{"jsonrpc":"2.0","id":1,"method":"demo/sleep","params":{"ms":200}}"#,
            )
            .await
        }
    });
    probe.started(1).await;
    let cancel = post(
        &url,
        r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":1}}"#,
    )
    .await;
    assert_eq!(cancel, (204, String::new()));
    let (status, body) = slow.await.unwrap();
    assert_eq!(
        (status, json(&body)),
        (200, json!({"jsonrpc":"2.0","id":1,"result":{"slept":200}}))
    );
}

/// What an auth layer gives the endpoint: the caller's identity, in the request's extensions.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Principal(String);

/// tower-http's auth layer, with bearer tokens standing for principals ("alice", "bob").
#[derive(Clone)]
struct Bearer;

impl<B: Send + 'static> tower_http::auth::AsyncAuthorizeRequest<B> for Bearer {
    type RequestBody = B;
    type ResponseBody = axum::body::Body;
    type Future = std::future::Ready<Result<http::Request<B>, http::Response<axum::body::Body>>>;

    fn authorize(&mut self, mut request: http::Request<B>) -> Self::Future {
        let token = request
            .headers()
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::to_owned);
        std::future::ready(match token {
            Some(name) => {
                request.extensions_mut().insert(Principal(name));
                Ok(request)
            }
            None => Err(http::Response::builder()
                .status(401)
                .body(axum::body::Body::empty())
                .unwrap()),
        })
    }
}

async fn mount_with_auth(rpc: JsonRpc<impl RpcService>) -> String {
    let app = Router::new().route("/rpc", post_service(rpc)).layer(
        tower_http::auth::AsyncRequireAuthorizationLayer::new(Bearer),
    );
    format!("http://{}/rpc", serve(app).await)
}

#[tokio::test]
async fn a_principal_cancels_its_own_request_and_never_another_principals() {
    let probe = Probe::default();
    let rpc = rpc(&probe).scope_by_principal::<Principal>();
    let url = mount_with_auth(rpc.clone()).await;
    let sleep = |id: u32| {
        format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"demo/sleep","params":{{"ms":400}}}}"#)
    };
    let alices = tokio::spawn({
        let (url, body) = (url.clone(), sleep(1));
        async move { post_as(&url, &body, Some("alice")).await }
    });
    let bobs = tokio::spawn({
        let (url, body) = (url.clone(), sleep(1));
        async move { post_as(&url, &body, Some("bob")).await }
    });
    probe.started(2).await;

    // Bob cancels "his" request 1: only his own stops, Alice's same id runs on.
    let cancel = r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":1}}"#;
    assert_eq!(
        post_as(&url, cancel, Some("bob")).await,
        (204, String::new())
    );
    let (status, body) = bobs.await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(json(&body)["error"]["code"], -32800);
    let (status, body) = alices.await.unwrap();
    assert_eq!(
        (status, json(&body)),
        (200, json!({"jsonrpc":"2.0","id":1,"result":{"slept":400}}))
    );

    // Without a token, the auth layer refuses; the endpoint never sees it.
    assert_eq!(post_as(&url, cancel, None).await.0, 401);
    assert_eq!(rpc.in_flight(), 0);
}

#[tokio::test]
async fn a_principals_cancel_posted_before_its_request_cancels_it_on_arrival() {
    let probe = Probe::default();
    let rpc = rpc(&probe).scope_by_principal::<Principal>();
    let url = mount_with_auth(rpc.clone()).await;
    let cancel = r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":"late"}}"#;
    assert_eq!(post_as(&url, cancel, Some("alice")).await.0, 204);
    let (status, body) = post_as(
        &url,
        r#"{"jsonrpc":"2.0","id":"late","method":"demo/sleep","params":{"ms":60000}}"#,
        Some("alice"),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(json(&body)["error"]["code"], -32800);
    assert!(probe.ends().is_empty(), "the handler never ran");
    assert_eq!(rpc.in_flight(), 0);
}
