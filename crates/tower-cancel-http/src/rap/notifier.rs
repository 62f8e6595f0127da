//! The runtime's side of RAP's cancellation: [`Notifier`] tells every tool server that a tool call was cancelled,
//! or that a thread closed. How it delivers is documented on the type, the page users see.

use std::{
    fmt,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use bytes::Bytes;
use http::{header, HeaderValue, StatusCode};
use serde::Serialize;
use tokio::task::JoinHandle;

use super::wire::{CancelToolCall, CloseThread};

/// How long a notification's POST may take by default, from its start to the response's headers.
pub const DEFAULT_NOTIFY_TIMEOUT: Duration = Duration::from_secs(2);

/// The hook of [`Notifier::authorize`].
type AuthorizeHook = dyn Fn(reqwest::RequestBuilder) -> reqwest::RequestBuilder + Send + Sync;

/// Tells every tool server of a cancelled tool call or a closed thread: one POST each, concurrently, never retried.
///
/// A notifier holds the base URLs of the runtime's tool servers. [`cancel_tool_call`](Self::cancel_tool_call) POSTs
/// `{"thread_id": ..., "tool_call_id": ...}` to `{base}/cancel_tool_call` of every one of them;
/// [`close_thread`](Self::close_thread) POSTs `{"thread_id": ...}` to `{base}/close_thread`. Both return at once with a
/// [`Fanout`], which the caller may await for each server's [`Delivery`], or drop.
///
/// Cheap to clone; clones share their counters.
///
/// ```no_run
/// use std::time::Duration;
/// use tower_cancel_http::rap::Notifier;
///
/// # async fn run() {
/// let notifier = Notifier::new(["http://10.0.0.7:8080", "http://10.0.0.8:8080/rap/"])
///     .bearer("s3cret")
///     .timeout(Duration::from_secs(2));
///
/// // The user pressed stop: the runtime has put its own "interrupted" result in the conversation, and tells the
/// // tool servers. Nothing to wait for...
/// notifier.cancel_tool_call("thread-42", "toolu_01A09q90qw90lq917835lq9");
///
/// // ...unless the caller wants to know what became of each POST.
/// for delivery in notifier.close_thread("thread-42").outcomes().await {
///     match delivery.outcome {
///         Ok(status) => println!("{} answered {status}", delivery.server),
///         Err(error) => println!("{}: {error}", delivery.server),
///     }
/// }
/// # }
/// ```
///
/// # Delivery
///
/// - **Every server, concurrently.** The runtime does not know which server runs a call, so every one is told.
///   Each POST runs on a tokio task of its own: a server that hangs delays no other, and the caller is never
///   blocked.
/// - **Once.** No POST is ever retried, not after a timeout, a connection error or a 5xx: the spec says so. A
///   cancel is best effort (the runtime has already recorded the call as interrupted and waits for no one), and a
///   retry would only add load to a server that is failing.
/// - **Within the timeout.** Each POST has [`DEFAULT_NOTIFY_TIMEOUT`] (or [`timeout`](Self::timeout)) from its
///   start to the response's headers; then it is abandoned and its connection closed. The response body is never
///   read.
/// - **Authenticated like an invocation.** [`bearer`](Self::bearer) sends `Authorization: Bearer TOKEN`;
///   [`authorize`](Self::authorize) runs a hook of yours on each request for any other scheme.
/// - **Ids as given.** The thread and tool-call ids are the runtime's own; they are not checked here, and are
///   JSON-encoded, never pasted into text.
///
/// Each outcome is logged with `tracing`: a 2xx at `debug`, anything else at `warn`, with the server, the status
/// or error, and the milliseconds taken. [`stats`](Self::stats) counts them.
///
/// # TLS
///
/// This crate's reqwest has no TLS stack. For `https` servers, build a `reqwest::Client` with the TLS features you
/// choose and give it with [`client`](Self::client).
#[derive(Clone)]
pub struct Notifier {
    config: Arc<Config>,
    stats: Arc<Counters>,
}

#[derive(Clone)]
struct Config {
    /// The base URLs, without trailing slashes.
    servers: Arc<[String]>,
    timeout: Duration,
    client: reqwest::Client,
    bearer: Option<HeaderValue>,
    authorize: Option<Arc<AuthorizeHook>>,
}

#[derive(Debug, Default)]
struct Counters {
    sent: AtomicU64,
    acknowledged: AtomicU64,
    rejected: AtomicU64,
    failed: AtomicU64,
    timed_out: AtomicU64,
}

/// A snapshot of a [`Notifier`]'s counters, one POST per server and notification.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct NotifierStats {
    /// POSTs started.
    pub sent: u64,
    /// POSTs answered with a 2xx.
    pub acknowledged: u64,
    /// POSTs answered with another status.
    pub rejected: u64,
    /// POSTs that got no answer for another reason than the timeout: the server could not be reached, the
    /// connection broke, the URL was not usable, the task was stopped (a runtime shut down).
    pub failed: u64,
    /// POSTs abandoned at their timeout.
    pub timed_out: u64,
    /// POSTs under way now.
    pub in_flight: u64,
}

impl Notifier {
    /// A notifier for the tool servers at these base URLs (`http://host:port`, or with a path:
    /// `http://host/rap`). A trailing `/` is ignored.
    ///
    /// No URL is checked here: one that cannot be used fails its own POSTs ([`NotifyError::Other`]) and no
    /// other server's.
    pub fn new<I, U>(servers: I) -> Self
    where
        I: IntoIterator<Item = U>,
        U: Into<String>,
    {
        let servers = servers
            .into_iter()
            .map(|server| {
                let mut server = server.into();
                server.truncate(server.trim_end_matches('/').len());
                server
            })
            .collect();
        Self {
            config: Arc::new(Config {
                servers,
                timeout: DEFAULT_NOTIFY_TIMEOUT,
                client: default_client(),
                bearer: None,
                authorize: None,
            }),
            stats: Arc::default(),
        }
    }

    /// How long each POST may take, from its start to the response's headers (default
    /// [`DEFAULT_NOTIFY_TIMEOUT`]). A POST that takes longer is abandoned, not retried.
    pub fn timeout(mut self, per_server: Duration) -> Self {
        Arc::make_mut(&mut self.config).timeout = per_server;
        self
    }

    /// POST with this client (for TLS, proxies, connection settings). The default is reqwest's, but following no
    /// redirect: a 3xx is the server's answer, counted as rejected, and one POST per server means one.
    ///
    /// A timeout of the client's own applies too: whichever comes first ends the POST, as
    /// [`NotifyError::TimedOut`].
    pub fn client(mut self, client: reqwest::Client) -> Self {
        Arc::make_mut(&mut self.config).client = client;
        self
    }

    /// Send `Authorization: Bearer TOKEN` with every POST, the token of the runtime's invocations.
    ///
    /// # Panics
    ///
    /// If `Bearer TOKEN` is not a valid header value (a control character, a newline): a configuration error,
    /// better seen at startup than as every cancel failing.
    pub fn bearer(mut self, token: impl AsRef<str>) -> Self {
        let mut value = HeaderValue::try_from(format!("Bearer {}", token.as_ref()))
            .expect("a bearer token is a valid header value");
        // Kept out of `Debug` output and marked for HTTP/2's header compression.
        value.set_sensitive(true);
        Arc::make_mut(&mut self.config).bearer = Some(value);
        self
    }

    /// Run `hook` on every POST before it is sent, for authentication schemes other than a bearer token.
    ///
    /// The hook gets the complete request: URL, `Content-Type`, body, and the bearer header if
    /// [`bearer`](Self::bearer) set one. It runs on the POST's own task, so it never holds up the caller or another
    /// server's POST, but before the timeout starts: it must not block. A hook that panics fails that POST alone
    /// ([`NotifyError::Other`]). A scheme that signs the body can read it from a copy of the request (the body is in
    /// memory, so the copy is cheap):
    ///
    /// ```
    /// use tower_cancel_http::rap::Notifier;
    ///
    /// fn sign(body: &[u8]) -> String {
    ///     // Your HMAC here.
    ///     format!("{}", body.len())
    /// }
    ///
    /// let notifier = Notifier::new(["http://127.0.0.1:8080"]).authorize(|builder| {
    ///     // A copy of the request, to read the body from.
    ///     let request = builder.try_clone().and_then(|copy| copy.build().ok());
    ///     let Some(body) = request.as_ref().and_then(|r| r.body()?.as_bytes()) else {
    ///         // An unusable URL: the POST fails with its own error.
    ///         return builder;
    ///     };
    ///     let signature = sign(body);
    ///     builder.header("x-signature", signature)
    /// });
    /// # let _ = notifier;
    /// ```
    pub fn authorize<F>(mut self, hook: F) -> Self
    where
        F: Fn(reqwest::RequestBuilder) -> reqwest::RequestBuilder + Send + Sync + 'static,
    {
        Arc::make_mut(&mut self.config).authorize = Some(Arc::new(hook));
        self
    }

    /// The tool servers' base URLs, in the order given, without trailing slashes.
    pub fn servers(&self) -> &[String] {
        &self.config.servers
    }

    /// Tell every tool server that the call `tool_call_id` of thread `thread_id` was cancelled: POST
    /// `{"thread_id": ..., "tool_call_id": ...}` to `{base}/cancel_tool_call`.
    ///
    /// Returns at once, the POSTs under way; dropping the [`Fanout`] does not stop them.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime: each POST is a task of its own.
    pub fn cancel_tool_call(&self, thread_id: &str, tool_call_id: &str) -> Fanout {
        let body = CancelToolCall {
            thread_id: thread_id.to_owned(),
            tool_call_id: tool_call_id.to_owned(),
        };
        self.notify(Notice {
            endpoint: "cancel_tool_call",
            thread_id: body.thread_id.clone(),
            tool_call_id: Some(body.tool_call_id.clone()),
            body: json_body(&body),
        })
    }

    /// Tell every tool server that the thread `thread_id` is over: POST `{"thread_id": ...}` to
    /// `{base}/close_thread`.
    ///
    /// Returns at once, the POSTs under way; dropping the [`Fanout`] does not stop them.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime: each POST is a task of its own.
    pub fn close_thread(&self, thread_id: &str) -> Fanout {
        let body = CloseThread {
            thread_id: thread_id.to_owned(),
        };
        self.notify(Notice {
            endpoint: "close_thread",
            thread_id: body.thread_id.clone(),
            tool_call_id: None,
            body: json_body(&body),
        })
    }

    /// The counters now.
    pub fn stats(&self) -> NotifierStats {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        let acknowledged = load(&self.stats.acknowledged);
        let rejected = load(&self.stats.rejected);
        let failed = load(&self.stats.failed);
        let timed_out = load(&self.stats.timed_out);
        // Read after the outcomes: a POST is counted as sent before it can end, so this is never less than their
        // sum but for a POST sent meanwhile (and the subtraction saturates).
        let sent = load(&self.stats.sent);
        NotifierStats {
            sent,
            acknowledged,
            rejected,
            failed,
            timed_out,
            in_flight: sent.saturating_sub(acknowledged + rejected + failed + timed_out),
        }
    }

    fn notify(&self, notice: Notice) -> Fanout {
        let notice = Arc::new(notice);
        let started = Instant::now();
        let sends = (0..self.config.servers.len())
            .map(|server| {
                self.stats.sent.fetch_add(1, Ordering::Relaxed);
                let post = post(
                    self.config.clone(),
                    Tally::new(self.stats.clone()),
                    notice.clone(),
                    server,
                );
                (self.config.servers[server].clone(), tokio::spawn(post))
            })
            .collect();
        Fanout { sends, started }
    }
}

impl fmt::Debug for Notifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the token, whose value is marked sensitive and shown as such.
        f.debug_struct("Notifier")
            .field("servers", &self.config.servers)
            .field("timeout", &self.config.timeout)
            .field("bearer", &self.config.bearer)
            .field("authorize", &self.config.authorize.as_ref().map(|_| ".."))
            .finish_non_exhaustive()
    }
}

fn default_client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        // What `reqwest::Client::new()` would panic on: a TLS backend that cannot start.
        .expect("reqwest's client builds")
}

/// One notification, shared by its POSTs.
struct Notice {
    endpoint: &'static str,
    thread_id: String,
    tool_call_id: Option<String>,
    body: Bytes,
}

fn json_body(body: &impl Serialize) -> Bytes {
    // Structs of strings: serializing them cannot fail.
    serde_json::to_vec(body)
        .expect("a RAP notification serializes")
        .into()
}

/// Counts a POST's outcome, or, if its task is dropped before it has one (a runtime shutting down) or panics (in an
/// `authorize` hook), counts it failed: every POST sent is counted once as ended.
struct Tally {
    stats: Arc<Counters>,
    ended: bool,
}

impl Tally {
    fn new(stats: Arc<Counters>) -> Self {
        Self {
            stats,
            ended: false,
        }
    }

    fn end(mut self, outcome: &Result<StatusCode, NotifyError>) {
        self.ended = true;
        let counter = match outcome {
            Ok(status) if status.is_success() => &self.stats.acknowledged,
            Ok(_) => &self.stats.rejected,
            Err(NotifyError::TimedOut) => &self.stats.timed_out,
            Err(_) => &self.stats.failed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for Tally {
    fn drop(&mut self) {
        if !self.ended {
            self.stats.failed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The POST of `notice` to one server, start to end: the body of its task.
async fn post(config: Arc<Config>, tally: Tally, notice: Arc<Notice>, server: usize) -> Delivery {
    let base = &config.servers[server];
    let started = Instant::now();
    let mut request = config
        .client
        .post(format!("{base}/{}", notice.endpoint))
        .header(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )
        // A clone of `Bytes` shares the one serialization.
        .body(notice.body.clone());
    if let Some(token) = &config.bearer {
        request = request.header(header::AUTHORIZATION, token.clone());
    }
    if let Some(hook) = &config.authorize {
        request = hook(request);
    }
    // Dropping `send`'s future at the timeout abandons the POST and closes its connection; the response, when there
    // is one, is dropped unread.
    let outcome = match tokio::time::timeout(config.timeout, request.send()).await {
        Ok(Ok(response)) => Ok(response.status()),
        Ok(Err(error)) => Err(NotifyError::from_reqwest(error)),
        Err(_elapsed) => Err(NotifyError::TimedOut),
    };
    let elapsed = started.elapsed();
    log(&notice, base, &outcome, elapsed, config.timeout);
    tally.end(&outcome);
    Delivery {
        server: base.clone(),
        outcome,
        elapsed,
    }
}

fn log(
    notice: &Notice,
    server: &str,
    outcome: &Result<StatusCode, NotifyError>,
    elapsed: Duration,
    timeout: Duration,
) {
    let endpoint = notice.endpoint;
    let thread = notice.thread_id.as_str();
    let call = notice.tool_call_id.as_deref();
    let elapsed_ms = millis(elapsed);
    match outcome {
        Ok(status) if status.is_success() => {
            tracing::debug!(
                server,
                endpoint,
                thread,
                call,
                status = status.as_u16(),
                elapsed_ms,
                "RAP notification acknowledged"
            );
        }
        Ok(status) => {
            tracing::warn!(
                server,
                endpoint,
                thread,
                call,
                status = status.as_u16(),
                elapsed_ms,
                "a tool server refused a RAP notification (not retried)"
            );
        }
        Err(NotifyError::TimedOut) => {
            let timeout_ms = millis(timeout);
            tracing::warn!(
                server,
                endpoint,
                thread,
                call,
                timeout_ms,
                elapsed_ms,
                "a RAP notification timed out (not retried)"
            );
        }
        Err(error) => {
            tracing::warn!(
                server,
                endpoint,
                thread,
                call,
                %error,
                elapsed_ms,
                "a RAP notification failed (not retried)"
            );
        }
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// The POSTs of one notification, one per server, under way.
///
/// Dropping it does not stop them: they run to their outcome (or their timeout) on their own tasks.
#[must_use = "the POSTs are under way without it; await `outcomes` to know what became of them"]
pub struct Fanout {
    sends: Vec<(String, JoinHandle<Delivery>)>,
    started: Instant,
}

impl Fanout {
    /// Wait for every POST's outcome (an answer, an error, or the timeout), and give them in the order of
    /// [`Notifier::servers`].
    pub async fn outcomes(self) -> Vec<Delivery> {
        let mut deliveries = Vec::with_capacity(self.sends.len());
        // Awaited in order, but run concurrently: each is a task of its own, already started.
        for (server, send) in self.sends {
            let delivery = match send.await {
                Ok(delivery) => delivery,
                Err(error) => Delivery {
                    server,
                    outcome: Err(NotifyError::Other(if error.is_panic() {
                        "the notification's task panicked".into()
                    } else {
                        "the notification's task was stopped".into()
                    })),
                    elapsed: self.started.elapsed(),
                },
            };
            deliveries.push(delivery);
        }
        deliveries
    }
}

impl fmt::Debug for Fanout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fanout")
            .field(
                "servers",
                &self
                    .sends
                    .iter()
                    .map(|(server, _)| server)
                    .collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

/// What became of a notification's POST to one server.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Delivery {
    /// The server's base URL, as in [`Notifier::servers`].
    pub server: String,
    /// The status it answered (its body unread), or why there was none.
    pub outcome: Result<StatusCode, NotifyError>,
    /// From the start of the POST to its outcome.
    pub elapsed: Duration,
}

impl Delivery {
    /// Whether the server answered with a 2xx.
    pub fn is_acknowledged(&self) -> bool {
        matches!(self.outcome, Ok(status) if status.is_success())
    }
}

/// Why a notification's POST got no answer. It is not retried.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NotifyError {
    /// No answer within the timeout: the POST was abandoned and its connection closed.
    TimedOut,
    /// The server could not be reached (connection refused, no such host, a TLS handshake that failed), with the
    /// error's deepest cause (`Connection refused (os error 111)`).
    Connect(String),
    /// Any other failure (a URL that cannot be used, a connection that broke), with the error's text and its
    /// causes'.
    Other(String),
}

impl NotifyError {
    fn from_reqwest(error: reqwest::Error) -> Self {
        // The client's own timeout, if it has one, is a timeout too.
        if error.is_timeout() {
            return NotifyError::TimedOut;
        }
        // The delivery names the server already.
        let error = error.without_url();
        let causes = std::iter::successors(Some(&error as &dyn std::error::Error), |e| e.source())
            .map(ToString::to_string);
        if error.is_connect() {
            // The layers above it are reqwest's and hyper's ("error sending request: client error (Connect)"); the
            // deepest cause says what happened ("Connection refused (os error 111)").
            return NotifyError::Connect(causes.last().unwrap_or_default());
        }
        NotifyError::Other(causes.collect::<Vec<_>>().join(": "))
    }
}

impl fmt::Display for NotifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotifyError::TimedOut => f.write_str("timed out"),
            NotifyError::Connect(error) => write!(f, "could not connect: {error}"),
            NotifyError::Other(error) => f.write_str(error),
        }
    }
}

impl std::error::Error for NotifyError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trailing_slashes_are_trimmed() {
        let notifier = Notifier::new(["http://a:1/", "http://b:2/rap//", "http://c:3"]);
        assert_eq!(
            notifier.servers(),
            ["http://a:1", "http://b:2/rap", "http://c:3"]
        );
    }

    #[test]
    fn the_token_is_not_in_debug_output() {
        let notifier = Notifier::new(["http://a:1"]).bearer("s3cret");
        let debug = format!("{notifier:?}");
        assert!(!debug.contains("s3cret"), "{debug}");
        assert!(debug.contains("Sensitive"), "{debug}");
    }

    #[test]
    #[should_panic(expected = "a bearer token is a valid header value")]
    fn a_token_with_a_newline_is_refused() {
        let _ = Notifier::new(["http://a:1"]).bearer("s3cret\r\nX-Evil: 1");
    }

    #[test]
    fn configuring_a_clone_leaves_the_original() {
        let original = Notifier::new(["http://a:1"]);
        let other = original.clone().timeout(Duration::from_millis(5));
        assert_eq!(original.config.timeout, DEFAULT_NOTIFY_TIMEOUT);
        assert_eq!(other.config.timeout, Duration::from_millis(5));
    }

    #[tokio::test]
    async fn a_panicking_hook_fails_its_post_alone() {
        let notifier =
            Notifier::new(["http://127.0.0.1:9"]).authorize(|_| panic!("the hook's bug"));
        let deliveries = notifier.close_thread("t").outcomes().await;
        assert_eq!(
            deliveries[0].outcome,
            Err(NotifyError::Other(
                "the notification's task panicked".into()
            ))
        );
        let stats = notifier.stats();
        assert_eq!((stats.sent, stats.failed, stats.in_flight), (1, 1, 0));
    }

    #[tokio::test]
    async fn no_servers_no_deliveries() {
        let notifier = Notifier::new(Vec::<String>::new());
        assert!(notifier
            .cancel_tool_call("t", "c")
            .outcomes()
            .await
            .is_empty());
        assert_eq!(notifier.stats(), NotifierStats::default());
    }
}
