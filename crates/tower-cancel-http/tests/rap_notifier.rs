//! The RAP runtime side's notifier over real loopback sockets: one POST per server and notification, concurrently,
//! never retried, the caller never blocked, a hanging server delaying no other.

use std::{
    future::Future,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{
    body::Bytes,
    extract::State,
    response::{IntoResponse, Response},
    Router,
};
use http::{header, HeaderMap, Method, StatusCode, Uri};
use serde_json::{json, Value};
use tokio::{
    net::TcpListener,
    sync::{mpsc, Notify},
};
use tower_cancel_http::rap::{Notifier, NotifyError};

/// The timeout of the hanging server's POST. The other servers answer within milliseconds on loopback; this is
/// how long they have for the tests to see them answered while the hanging one is still open.
const TIMEOUT: Duration = Duration::from_millis(1000);

/// The bound of any wait for something that must happen: only reached when it never does.
const PATIENCE: Duration = Duration::from_secs(10);

/// How a test server answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Answer {
    /// 200, once its gate (if any) is opened.
    Ok,
    /// 500 at once.
    Fail,
    /// Never: the POST stays open until the client goes.
    Hang,
    /// 307 to `/moved`, which would have the POST made again there.
    Redirect,
}

/// What a test server reports, in the order it happens.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Event {
    Received(&'static str),
    Answered(&'static str),
    /// The client closed a POST that was never answered.
    Abandoned(&'static str),
}

/// A POST as a test server saw it.
#[derive(Clone, Debug)]
struct Seen {
    method: Method,
    path: String,
    headers: HeaderMap,
    body: Value,
    /// The body's bytes as they came.
    raw: Bytes,
}

impl Seen {
    fn header(&self, name: impl header::AsHeaderName) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }
}

#[derive(Clone)]
struct Server {
    name: &'static str,
    answer: Answer,
    gate: Option<Arc<Notify>>,
    seen: Arc<Mutex<Vec<Seen>>>,
    events: mpsc::UnboundedSender<Event>,
    addr: SocketAddr,
}

impl Server {
    /// A server on a free loopback port, recording every request whatever its path.
    async fn start(
        name: &'static str,
        answer: Answer,
        gate: Option<Arc<Notify>>,
        events: &mpsc::UnboundedSender<Event>,
    ) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let server = Server {
            name,
            answer,
            gate,
            seen: Arc::default(),
            events: events.clone(),
            addr: listener.local_addr().unwrap(),
        };
        let app = Router::new().fallback(record).with_state(server.clone());
        tokio::spawn(async move { tower_cancel_http::serve(listener, app).await.unwrap() });
        server
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

async fn record(
    State(server): State<Server>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    server.seen.lock().unwrap().push(Seen {
        method,
        path: uri.path().to_owned(),
        headers,
        body: serde_json::from_slice(&body)
            .unwrap_or_else(|_| json!({ "not json": body.to_vec() })),
        raw: body,
    });
    let _ = server.events.send(Event::Received(server.name));
    match server.answer {
        Answer::Ok => {
            if let Some(gate) = &server.gate {
                gate.notified().await;
            }
            let _ = server.events.send(Event::Answered(server.name));
            StatusCode::OK.into_response()
        }
        Answer::Fail => {
            let _ = server.events.send(Event::Answered(server.name));
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
        Answer::Redirect => {
            let _ = server.events.send(Event::Answered(server.name));
            (
                StatusCode::TEMPORARY_REDIRECT,
                [(header::LOCATION, "/moved")],
            )
                .into_response()
        }
        Answer::Hang => {
            // hyper drops this future when the client closes the connection.
            let _abandoned = OnDrop(Some(move || {
                let _ = server.events.send(Event::Abandoned(server.name));
            }));
            std::future::pending().await
        }
    }
}

struct OnDrop<F: FnOnce()>(Option<F>);

impl<F: FnOnce()> Drop for OnDrop<F> {
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            f();
        }
    }
}

/// An address nothing listens on: bound, then let go.
async fn refusing_addr() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap()
}

/// Wait (within [`PATIENCE`]) until `done` holds.
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    tokio::time::timeout(PATIENCE, async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("never: {what}"));
}

/// The next event (within [`PATIENCE`]).
async fn next(events: &mut mpsc::UnboundedReceiver<Event>) -> Event {
    within(events.recv())
        .await
        .expect("the servers are running")
}

async fn within<F: Future>(future: F) -> F::Output {
    tokio::time::timeout(PATIENCE, future)
        .await
        .expect("in time")
}

/// Give a retry, if there were one, the time to arrive.
async fn no_retry_window() {
    tokio::time::sleep(TIMEOUT / 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_goes_once_to_every_server_and_a_hanging_one_delays_none() {
    let (tx, mut events) = mpsc::unbounded_channel();
    let gate = Arc::new(Notify::new());
    let ok = Server::start("ok", Answer::Ok, Some(gate.clone()), &tx).await;
    let failing = Server::start("500", Answer::Fail, None, &tx).await;
    let hanging = Server::start("hang", Answer::Hang, None, &tx).await;
    let refusing = format!("http://{}", refusing_addr().await);
    let notifier = Notifier::new([ok.url(), failing.url(), hanging.url(), refusing.clone()])
        .bearer("s3cret")
        .timeout(TIMEOUT);

    let fanout = notifier.cancel_tool_call("thread-1", "toolu_01A09q90qw90lq917835lq9");
    // The call has returned, and the 200 server cannot have answered: it waits for the gate, opened only now.
    assert_eq!(notifier.stats().sent, 4);
    assert_eq!(notifier.stats().acknowledged, 0);
    gate.notify_one();

    // The three others end while the hanging server's POST is still open: none waits for it.
    until("the fast servers' outcomes", || {
        let stats = notifier.stats();
        stats.acknowledged == 1 && stats.rejected == 1 && stats.failed == 1
    })
    .await;
    let stats = notifier.stats();
    assert_eq!((stats.timed_out, stats.in_flight), (0, 1), "{stats:?}");
    // The servers' side of it: the 200 went out before the hanging POST was abandoned.
    let mut seen_events = Vec::new();
    while !seen_events.contains(&Event::Answered("ok")) {
        seen_events.push(next(&mut events).await);
    }
    assert!(
        !seen_events.contains(&Event::Abandoned("hang")),
        "{seen_events:?}"
    );

    let deliveries = within(fanout.outcomes()).await;
    let servers: Vec<_> = deliveries.iter().map(|d| d.server.clone()).collect();
    assert_eq!(servers, [ok.url(), failing.url(), hanging.url(), refusing]);
    assert_eq!(deliveries[0].outcome, Ok(StatusCode::OK));
    assert!(deliveries[0].is_acknowledged());
    assert_eq!(deliveries[1].outcome, Ok(StatusCode::INTERNAL_SERVER_ERROR));
    assert!(!deliveries[1].is_acknowledged());
    assert_eq!(deliveries[2].outcome, Err(NotifyError::TimedOut));
    assert!(deliveries[2].elapsed >= TIMEOUT, "{:?}", deliveries[2]);
    assert!(deliveries[0].elapsed < deliveries[2].elapsed);
    assert!(
        matches!(&deliveries[3].outcome, Err(NotifyError::Connect(_))),
        "{:?}",
        deliveries[3]
    );

    // At its timeout the hanging POST was abandoned: its connection closed.
    while next(&mut events).await != Event::Abandoned("hang") {}

    no_retry_window().await;
    for server in [&ok, &failing, &hanging] {
        let seen = server.seen();
        assert_eq!(seen.len(), 1, "{}: {seen:?}", server.name);
        let post = &seen[0];
        assert_eq!(post.method, Method::POST);
        assert_eq!(post.path, "/cancel_tool_call");
        assert_eq!(post.header(header::CONTENT_TYPE), Some("application/json"));
        assert_eq!(post.header(header::AUTHORIZATION), Some("Bearer s3cret"));
        assert_eq!(
            post.body,
            json!({ "thread_id": "thread-1", "tool_call_id": "toolu_01A09q90qw90lq917835lq9" })
        );
    }
    let stats = notifier.stats();
    assert_eq!(
        (
            stats.sent,
            stats.acknowledged,
            stats.rejected,
            stats.failed,
            stats.timed_out,
            stats.in_flight
        ),
        (4, 1, 1, 1, 1, 0),
        "{stats:?}"
    );
}

#[tokio::test]
async fn close_thread_posts_the_thread_under_each_base_trailing_slash_or_not() {
    let (tx, _events) = mpsc::unbounded_channel();
    let server = Server::start("ok", Answer::Ok, None, &tx).await;
    let notifier = Notifier::new([
        format!("{}/", server.url()),
        format!("{}/tools//", server.url()),
    ]);
    assert_eq!(
        notifier.servers(),
        [server.url(), format!("{}/tools", server.url())]
    );

    let deliveries = within(notifier.close_thread("thread-9").outcomes()).await;
    assert!(
        deliveries.iter().all(|d| d.outcome == Ok(StatusCode::OK)),
        "{deliveries:?}"
    );

    no_retry_window().await;
    let mut seen = server.seen();
    seen.sort_by(|a, b| a.path.cmp(&b.path));
    let paths: Vec<_> = seen.iter().map(|post| post.path.as_str()).collect();
    assert_eq!(paths, ["/close_thread", "/tools/close_thread"]);
    for post in &seen {
        assert_eq!(post.method, Method::POST);
        assert_eq!(post.header(header::CONTENT_TYPE), Some("application/json"));
        // No token was configured: none is sent.
        assert_eq!(post.header(header::AUTHORIZATION), None);
        assert_eq!(post.body, json!({ "thread_id": "thread-9" }));
    }
    assert_eq!(notifier.stats().acknowledged, 2);
}

#[tokio::test]
async fn a_dropped_fanout_still_delivers_the_ids_as_given() {
    let (tx, mut events) = mpsc::unbounded_channel();
    let server = Server::start("ok", Answer::Ok, None, &tx).await;
    let notifier = Notifier::new([server.url()]);
    let stats = notifier.clone();

    // Ids are the runtime's own, not checked here; quotes and non-ASCII are escaped by the JSON encoder.
    drop(notifier.cancel_tool_call("thread \"7\"", "call/é\n"));
    drop(notifier);

    assert_eq!(next(&mut events).await, Event::Received("ok"));
    assert_eq!(next(&mut events).await, Event::Answered("ok"));
    let seen = server.seen();
    assert_eq!(
        seen[0].body,
        json!({ "thread_id": "thread \"7\"", "tool_call_id": "call/é\n" })
    );
    until("the outcome counted", || stats.stats().acknowledged == 1).await;
}

#[tokio::test]
async fn a_redirect_is_the_answer_not_followed() {
    let (tx, _events) = mpsc::unbounded_channel();
    let server = Server::start("moved", Answer::Redirect, None, &tx).await;
    let notifier = Notifier::new([server.url()]);

    let deliveries = within(notifier.cancel_tool_call("t", "c").outcomes()).await;
    assert_eq!(deliveries[0].outcome, Ok(StatusCode::TEMPORARY_REDIRECT));
    assert_eq!(notifier.stats().rejected, 1);

    no_retry_window().await;
    let paths: Vec<_> = server.seen().into_iter().map(|post| post.path).collect();
    assert_eq!(paths, ["/cancel_tool_call"]);
}

/// A toy signature over the token and the body, standing for an HMAC.
fn signature(authorization: &[u8], body: &[u8]) -> String {
    let sum = authorization.iter().chain(body).fold(17u64, |sum, &b| {
        sum.wrapping_mul(31).wrapping_add(u64::from(b))
    });
    format!("{sum:016x}")
}

#[tokio::test]
async fn the_authorize_hook_sees_the_whole_request() {
    let (tx, _events) = mpsc::unbounded_channel();
    let server = Server::start("ok", Answer::Ok, None, &tx).await;
    let notifier = Notifier::new([server.url()])
        .bearer("s3cret")
        .authorize(|builder| {
            let copy = builder.try_clone().unwrap().build().unwrap();
            let authorization = copy.headers()[header::AUTHORIZATION].as_bytes();
            let body = copy.body().unwrap().as_bytes().unwrap();
            builder.header("x-signature", signature(authorization, body))
        });

    let deliveries = within(notifier.cancel_tool_call("t", "c").outcomes()).await;
    assert_eq!(deliveries[0].outcome, Ok(StatusCode::OK));

    let seen = server.seen();
    let post = &seen[0];
    assert_eq!(post.header(header::AUTHORIZATION), Some("Bearer s3cret"));
    assert_eq!(
        post.header("x-signature"),
        Some(signature(b"Bearer s3cret", &post.raw).as_str())
    );
}

#[tokio::test]
async fn an_unusable_url_fails_alone() {
    let (tx, _events) = mpsc::unbounded_channel();
    let server = Server::start("ok", Answer::Ok, None, &tx).await;
    let refusing = format!("http://{}", refusing_addr().await);
    let notifier = Notifier::new(["not a url".to_owned(), refusing, server.url()]);

    let deliveries = within(notifier.close_thread("t").outcomes()).await;
    assert!(
        matches!(&deliveries[0].outcome, Err(NotifyError::Other(_))),
        "{deliveries:?}"
    );
    let Err(refused @ NotifyError::Connect(_)) = &deliveries[1].outcome else {
        panic!("{deliveries:?}");
    };
    let refused = refused.to_string();
    assert!(refused.starts_with("could not connect: "), "{refused}");
    assert!(refused.to_lowercase().contains("refused"), "{refused}");
    assert_eq!(deliveries[2].outcome, Ok(StatusCode::OK));
    let stats = notifier.stats();
    assert_eq!((stats.sent, stats.failed, stats.acknowledged), (3, 2, 1));
}
