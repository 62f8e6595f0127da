//! A deadline over JSON-RPC over HTTP, over real sockets, modelled on tonic's timeout tests: the client's
//! `Timeout-Ms` header gives each request of its POST a timeout, the server's `TimeoutLayer` applies the earlier
//! of it and its own limit (the shorter wins, either way), a value that is not an integer of milliseconds is
//! ignored, and a handler can forward what is left of its deadline. Timings are bounded by the instants taken
//! before the POST and after its answer, never by the wall clock's pace.

mod support;

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{routing::post_service, Router};
use http::HeaderName;
use serde_json::{json, Value};
use support::serve;
use tokio::time::Instant;
use tower::{service_fn, ServiceBuilder};
use tower_cancel::{timeout::TimeoutLayer, BoxError, CancelStack, Request};
use tower_cancel_http::{
    jsonrpc::{timeout_header_value, DEFAULT_TIMEOUT_HEADER},
    JsonRpc, RpcService,
};

/// The deadline each handler saw, in the order they started.
type Deadlines = Arc<Mutex<Vec<Option<Instant>>>>;

/// An LSP endpoint whose handler records its deadline, then hangs (`hang`) or answers the value of the timeout
/// header it would forward (`left`, `null` without a deadline).
fn rpc(timeouts: TimeoutLayer, deadlines: &Deadlines) -> JsonRpc<impl RpcService> {
    let deadlines = deadlines.clone();
    let stack = ServiceBuilder::new()
        .layer(CancelStack::lsp().timeouts(timeouts))
        .service(service_fn(move |req: Request| {
            let deadlines = deadlines.clone();
            async move {
                let ctx = req.context().expect("behind a CancelLayer");
                deadlines.lock().unwrap().push(ctx.deadline());
                if req.method() == "hang" {
                    std::future::pending::<()>().await;
                }
                let left = timeout_header_value(ctx).map(|v| v.to_str().unwrap().to_owned());
                Ok::<_, BoxError>(json!({ "left": left }))
            }
        }));
    JsonRpc::new(stack)
}

async fn mount(rpc: JsonRpc<impl RpcService>) -> String {
    let app = Router::new().route("/rpc", post_service(rpc));
    format!("http://{}/rpc", serve(app).await)
}

/// POST `body` with the headers given; the answer as JSON, and the instants before the POST and after its answer.
async fn post(url: &str, headers: &[(&str, &str)], body: &str) -> (Value, Instant, Instant) {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_owned());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let before = Instant::now();
    let answer = tokio::time::timeout(Duration::from_secs(30), async {
        request.send().await.unwrap().text().await.unwrap()
    })
    .await
    .expect("an answer (hang guard)");
    let after = Instant::now();
    (serde_json::from_str(&answer).unwrap(), before, after)
}

const HANG: &str = r#"{"jsonrpc":"2.0","id":1,"method":"hang"}"#;
const LEFT: &str = r#"{"jsonrpc":"2.0","id":1,"method":"left"}"#;

fn timed_out() -> Value {
    json!({ "jsonrpc": "2.0", "id": 1, "error": { "code": -32800, "message": "Request cancelled" } })
}

/// The one deadline recorded, which must lie `timeout` after the request arrived: between the instants taken
/// before the POST and after its answer.
fn assert_deadline(deadlines: &Deadlines, timeout: Duration, before: Instant, after: Instant) {
    let deadlines = deadlines.lock().unwrap();
    assert_eq!(deadlines.len(), 1);
    let deadline = deadlines[0].expect("a deadline");
    assert!(
        before + timeout <= deadline && deadline <= after + timeout,
        "the deadline is {timeout:?} after the request arrived"
    );
}

fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

/// tonic's `cancelation_on_timeout`: the server has no limit of its own, the header's applies.
#[tokio::test]
async fn the_header_gives_the_request_its_timeout() {
    let deadlines = Deadlines::default();
    let url = mount(rpc(TimeoutLayer::none(), &deadlines)).await;
    let (answer, before, after) = post(&url, &[("Timeout-Ms", "200")], HANG).await;
    assert_eq!(answer, timed_out());
    assert_deadline(&deadlines, ms(200), before, after);
}

/// tonic's `picks_client_timeout_if_thats_sorter`.
#[tokio::test]
async fn the_headers_shorter_timeout_wins() {
    let deadlines = Deadlines::default();
    let url = mount(rpc(TimeoutLayer::new(Duration::from_secs(100)), &deadlines)).await;
    let (answer, before, after) = post(&url, &[("timeout-ms", "150")], HANG).await;
    assert_eq!(answer, timed_out());
    assert_deadline(&deadlines, ms(150), before, after);
}

/// tonic's `picks_server_timeout_if_thats_sorter`: ten hours asked, the server's limit applies.
#[tokio::test]
async fn the_servers_shorter_limit_wins() {
    let deadlines = Deadlines::default();
    let url = mount(rpc(TimeoutLayer::new(ms(150)), &deadlines)).await;
    let (answer, before, after) = post(&url, &[("Timeout-Ms", "36000000")], HANG).await;
    assert_eq!(answer, timed_out());
    assert_deadline(&deadlines, ms(150), before, after);
}

#[tokio::test]
async fn a_value_that_is_not_an_integer_of_milliseconds_is_ignored() {
    let deadlines = Deadlines::default();
    let url = mount(rpc(TimeoutLayer::none(), &deadlines)).await;
    for bad in ["5s", "-1", "1.5", "12345678901", ""] {
        let (answer, _, _) = post(&url, &[("Timeout-Ms", bad)], LEFT).await;
        assert_eq!(
            answer,
            json!({ "jsonrpc": "2.0", "id": 1, "result": { "left": null } }),
            "{bad:?}"
        );
    }
    assert_eq!(*deadlines.lock().unwrap(), vec![None; 5]);
}

#[tokio::test]
async fn every_request_of_a_batch_takes_the_header() {
    let deadlines = Deadlines::default();
    let url = mount(rpc(TimeoutLayer::none(), &deadlines)).await;
    let batch =
        r#"[{"jsonrpc":"2.0","id":1,"method":"left"},{"jsonrpc":"2.0","id":2,"method":"left"}]"#;
    let (answer, _, _) = post(&url, &[("Timeout-Ms", "60000")], batch).await;
    assert_eq!(answer.as_array().map(Vec::len), Some(2));
    assert!(deadlines.lock().unwrap().iter().all(Option::is_some));
}

#[tokio::test]
async fn the_header_read_is_configurable() {
    let deadlines = Deadlines::default();
    let budget = HeaderName::from_static("x-budget-ms");
    let url = mount(rpc(TimeoutLayer::none(), &deadlines).timeout_header(Some(budget))).await;
    let (_, _, _) = post(&url, &[("Timeout-Ms", "60000")], LEFT).await;
    let (_, _, _) = post(&url, &[("X-Budget-Ms", "60000")], LEFT).await;
    let off = mount(rpc(TimeoutLayer::none(), &deadlines).timeout_header(None)).await;
    let (_, _, _) = post(&off, &[(DEFAULT_TIMEOUT_HEADER.as_str(), "60000")], LEFT).await;
    let seen: Vec<bool> = deadlines
        .lock()
        .unwrap()
        .iter()
        .map(Option::is_some)
        .collect();
    assert_eq!(seen, [false, true, false]);
}

/// A handler that calls on over HTTP sends what is left of its deadline: never more than it was given.
#[tokio::test]
async fn a_handler_forwards_what_is_left_of_its_deadline() {
    let deadlines = Deadlines::default();
    let url = mount(rpc(TimeoutLayer::new(Duration::from_secs(100)), &deadlines)).await;
    let (answer, before, after) = post(&url, &[("Timeout-Ms", "5000")], LEFT).await;
    let left: u64 = answer["result"]["left"]
        .as_str()
        .expect("a value")
        .parse()
        .unwrap();
    let spent = u64::try_from((after - before).as_millis()).unwrap();
    assert!(
        left <= 5000 && left + spent + 1 >= 5000,
        "{left} ms left after at most {spent} ms"
    );
}
