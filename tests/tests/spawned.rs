//! `Server::spawn_requests(true)`: each request's future runs on a task of its own. The connection behaves as it
//! does with requests polled by the read loop (answers, cancels, panics, close, shutdown, registry empty), and a
//! handler that computes without awaiting no longer holds up the reading of the connection's next frames.

use std::{
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration, Instant as WallClock},
};

use serde_json::{json, Value};
use tests::{assert_about, frame, ms, read_frame, set_of, Conn, Counts, End, Ended, Probe};
use tokio::{
    io::{AsyncWriteExt, BufReader},
    sync::watch,
    time::Instant,
};
use tower::{layer::layer_fn, service_fn, util::BoxCloneService, Service, ServiceBuilder};
use tower_cancel::{BoxError, CancelReason, CancelStack, Request, Response};
use tower_cancel_io::{Framing, Server};

const CANCELLED_2: &str =
    r#"{"jsonrpc":"2.0","id":2,"error":{"code":-32800,"message":"Request cancelled"}}"#;
const PANICKED_3: &str = r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32603,"message":"Internal error: handler panicked"}}"#;

/// `stack` over `probe`'s handler, each request on a task of its own.
fn spawned<L>(stack: L, probe: &Probe, framing: Framing) -> Conn
where
    L: tower::Layer<tests::Handler>,
    L::Service: tests::Served,
{
    Conn::serve_configured(stack, probe, framing, |server| server.spawn_requests(true))
}

#[tokio::test(start_paused = true)]
async fn requests_are_answered_and_cancels_stop_their_handlers() {
    let probe = Probe::new();
    let mut conn = spawned(CancelStack::lsp(), &probe, Framing::ContentLength);
    conn.send(r#"{"jsonrpc":"2.0","id":1,"method":"echo","params":"hi"}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":1,"result":"hi"}"#)
        .await;

    conn.send(r#"{"jsonrpc":"2.0","id":2,"method":"hang"}"#)
        .await;
    probe.wait_started(2).await;
    assert_eq!(conn.registry().len(), 1);
    conn.send(r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":2}}"#)
        .await;
    conn.expect(CANCELLED_2).await;
    assert_eq!(
        probe.ended_of(2),
        Some(Ended::stopped(2, "hang", Some(CancelReason::peer(None))))
    );
    assert!(conn.registry().is_empty());
    conn.finish_counting(Counts::new(2, 1, 1)).await;
}

#[tokio::test(start_paused = true)]
async fn mcp_a_cancelled_request_gets_no_reply_and_its_handler_stops() {
    let probe = Probe::new();
    let mut conn = spawned(CancelStack::mcp(), &probe, Framing::Ndjson);
    conn.send(r#"{"jsonrpc":"2.0","id":2,"method":"hang"}"#)
        .await;
    probe.wait_started(2).await;
    conn.send(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}"#)
        .await;
    let before = conn
        .replies_until(
            r#"{"jsonrpc":"2.0","id":3,"method":"echo"}"#,
            r#"{"jsonrpc":"2.0","id":3,"result":null}"#,
        )
        .await;
    assert_eq!(before, Vec::<String>::new());
    assert_eq!(probe.ended_of(2).map(|e| e.end), Some(End::Stopped));
    conn.finish_counting(Counts::new(2, 1, 1)).await;
}

/// Lets a test hold a handler in a loop that never awaits (as a CPU-bound handler does: its worker thread is
/// taken for as long as it runs), see it running, and let it go.
#[derive(Clone)]
struct Busy {
    running: watch::Sender<bool>,
    released: Arc<AtomicBool>,
    finished: Arc<AtomicBool>,
}

impl Busy {
    fn new() -> Self {
        Self {
            running: watch::Sender::new(false),
            released: Arc::default(),
            finished: Arc::default(),
        }
    }

    /// The `busy` method, in front of `inner` (the probe's handler) for every other method.
    fn service(&self, inner: tests::Handler) -> tests::Handler {
        let busy = self.clone();
        BoxCloneService::new(service_fn(move |req: Request| {
            let busy = busy.clone();
            let mut inner = inner.clone();
            async move {
                if req.method() != "busy" {
                    return inner.call(req).await;
                }
                busy.running.send_replace(true);
                // Blocks its worker thread, without an await, until released. The bound only keeps a failed test
                // from holding the runtime forever; it is never what ends a passing one.
                let give_up = WallClock::now() + Duration::from_secs(60);
                while !busy.released.load(Ordering::Acquire) && WallClock::now() < give_up {
                    std::thread::sleep(Duration::from_millis(1));
                }
                busy.finished.store(true, Ordering::Release);
                Ok(json!("done"))
            }
        }))
    }

    async fn wait_running(&self) {
        let mut running = self.running.subscribe();
        running
            .wait_for(|running| *running)
            .await
            .expect("the sender is alive");
    }

    fn finished(&self) -> bool {
        self.finished.load(Ordering::Acquire)
    }
}

/// Releases the busy handler however the test ends, so that a failed assertion does not leave a worker blocked.
struct Release(Arc<AtomicBool>);

impl Drop for Release {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_handler_does_not_hold_up_the_reading_of_a_cancel() {
    let probe = Probe::new();
    let busy = Busy::new();
    let release = Release(busy.released.clone());
    let stack = ServiceBuilder::new().layer(CancelStack::lsp()).layer({
        let busy = busy.clone();
        layer_fn(move |inner| busy.service(inner))
    });
    let mut conn = spawned(stack, &probe, Framing::ContentLength);
    conn.send(r#"{"jsonrpc":"2.0","id":1,"method":"busy"}"#)
        .await;
    busy.wait_running().await;

    // One worker is taken by the busy handler: the connection still reads, runs and cancels on the other.
    conn.send(r#"{"jsonrpc":"2.0","id":2,"method":"hang"}"#)
        .await;
    probe.wait_started(2).await;
    conn.send(r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":2}}"#)
        .await;
    conn.expect(CANCELLED_2).await;
    conn.send(r#"{"jsonrpc":"2.0","id":3,"method":"echo","params":"meanwhile"}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":3,"result":"meanwhile"}"#)
        .await;
    assert!(!busy.finished(), "the cancel was answered while 1 was busy");
    assert_eq!(
        probe.ended_of(2),
        Some(Ended::stopped(2, "hang", Some(CancelReason::peer(None))))
    );

    drop(release);
    conn.expect(r#"{"jsonrpc":"2.0","id":1,"result":"done"}"#)
        .await;
    assert!(busy.finished());
    conn.finish_counting(Counts::new(3, 2, 1)).await;
}

#[tokio::test(start_paused = true)]
async fn a_panic_in_a_request_task_is_answered_and_the_connection_goes_on() {
    // No cancel layer, so nothing inside the task catches the panic: the task ends panicking.
    let service = service_fn(|req: Request| async move {
        if req.method() == "panic" {
            panic!("the test handler panics on purpose");
        }
        let result = req.params_as::<Value>().unwrap_or(Value::Null);
        Ok::<_, BoxError>(req.id().cloned().map(|id| Response::ok(id, result)))
    });
    let mut conn = Conn::start(
        Server::new(service).spawn_requests(true),
        Framing::ContentLength,
    );
    conn.send(r#"{"jsonrpc":"2.0","id":3,"method":"panic"}"#)
        .await;
    conn.expect(PANICKED_3).await;
    // A notification that panics has nobody to answer.
    conn.send(r#"{"jsonrpc":"2.0","method":"panic"}"#).await;
    conn.send(r#"{"jsonrpc":"2.0","id":4,"method":"echo","params":"still here"}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":4,"result":"still here"}"#)
        .await;
    conn.finish_quiet().await;
}

#[tokio::test(start_paused = true)]
async fn a_panic_behind_the_stack_is_answered_and_its_entry_removed() {
    let probe = Probe::new();
    let mut conn = spawned(CancelStack::lsp(), &probe, Framing::ContentLength);
    conn.send(r#"{"jsonrpc":"2.0","id":1,"method":"hang"}"#)
        .await;
    probe.wait_started(1).await;
    conn.send(r#"{"jsonrpc":"2.0","id":3,"method":"panic"}"#)
        .await;
    conn.expect(PANICKED_3).await;
    assert!(!conn.registry().contains(&3.into()));
    assert_eq!(conn.registry().len(), 1);
    conn.send(r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":1}}"#)
        .await;
    conn.expect(
        r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32800,"message":"Request cancelled"}}"#,
    )
    .await;
    conn.finish_counting(Counts::new(2, 1, 1)).await;
}

#[tokio::test(start_paused = true)]
async fn closing_cancels_every_task_and_answers_it() {
    let probe = Probe::new();
    let mut conn = spawned(CancelStack::lsp(), &probe, Framing::ContentLength);
    for id in 1..=3 {
        conn.send(&format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"hang"}}"#))
            .await;
        probe.wait_started(id).await;
    }
    let (rest, counts) = conn.finish_counted().await;
    assert_eq!(
        set_of(rest),
        set_of((1..=3).map(|id| format!(
            r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-32800,"message":"Request cancelled"}}}}"#
        )))
    );
    for id in 1..=3 {
        assert_eq!(
            probe.ended_of(id),
            Some(Ended::stopped(id, "hang", Some(CancelReason::Disconnect)))
        );
    }
    assert_eq!(counts, Counts::new(3, 0, 3));
}

#[tokio::test(start_paused = true)]
async fn what_cannot_be_cancelled_is_aborted_after_the_close_grace() {
    // `initialize` is never cancellable: its task gets the close grace, then is aborted, its future dropped
    // before `serve` returns.
    let probe = Probe::new();
    let mut conn = Conn::serve_configured(
        CancelStack::lsp(),
        &probe,
        Framing::ContentLength,
        |server| server.close_grace(ms(500)).spawn_requests(true),
    );
    conn.send(r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"ms":60000}}"#)
        .await;
    probe.wait_started(0).await;
    let closed_at = Instant::now();
    conn.finish_quiet().await;
    assert_about(closed_at.elapsed(), ms(500));
    assert_eq!(probe.ended(), [Ended::stopped(0, "initialize", None)]);
}

#[tokio::test(start_paused = true)]
async fn a_shutdown_drains_the_tasks_then_cancels_the_rest() {
    let probe = Probe::new();
    let mut shutdown = None;
    let mut conn = Conn::serve_configured(
        CancelStack::lsp(),
        &probe,
        Framing::ContentLength,
        |server| {
            let server = server.drain_timeout(ms(1000)).spawn_requests(true);
            shutdown = Some(server.shutdown_handle());
            server
        },
    );
    let shutdown = shutdown.expect("configured");
    conn.send_together(&[
        r#"{"jsonrpc":"2.0","id":1,"method":"sleep","params":{"ms":100}}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"hang"}"#,
    ])
    .await;
    probe.wait_started(2).await;
    let began = Instant::now();
    shutdown.shutdown();
    conn.expect(r#"{"jsonrpc":"2.0","id":1,"result":{"slept":100}}"#)
        .await;
    assert_about(began.elapsed(), ms(100));
    let registry = conn.registry().clone();
    let rest = conn.closed_by_server().await;
    assert_about(began.elapsed(), ms(1000));
    assert_eq!(rest, [CANCELLED_2]);
    assert_eq!(
        probe.ended_of(2),
        Some(Ended::stopped(2, "hang", Some(CancelReason::Shutdown)))
    );
    assert_eq!(Counts::of(&registry), Counts::new(2, 1, 1));
}

/// `server` serving `stream` in a task of its own (generic, so that the future's `Send` is proved for any service).
fn serve_in_task<S: tests::Served>(
    server: Server<S>,
    stream: tokio::io::DuplexStream,
) -> tokio::task::JoinHandle<std::io::Result<()>> {
    let (read, write) = tokio::io::split(stream);
    tokio::spawn(server.serve(read, write, Framing::ContentLength))
}

#[tokio::test(start_paused = true)]
async fn dropping_serve_aborts_its_request_tasks() {
    let probe = Probe::new();
    let service = ServiceBuilder::new()
        .layer(CancelStack::lsp())
        .service(probe.service());
    let server = Server::new(service).spawn_requests(true);
    let registry = server.registry().clone();
    let (mut client, server_end) = tokio::io::duplex(4096);
    let serve = serve_in_task(server, server_end);
    let hang = frame(
        r#"{"jsonrpc":"2.0","id":1,"method":"hang"}"#,
        Framing::ContentLength,
    );
    client.write_all(hang.as_bytes()).await.unwrap();
    probe.wait_started(1).await;

    serve.abort();
    assert!(serve.await.unwrap_err().is_cancelled());
    // The runtime drops an aborted task's future on the task's next turn.
    while probe.running() > 0 {
        tokio::time::sleep(ms(1)).await;
    }
    assert_eq!(probe.ended_of(1).map(|e| e.end), Some(End::Stopped));
    assert!(registry.is_empty());
}

#[tokio::test(start_paused = true)]
async fn the_inline_mode_serves_services_whose_futures_are_not_send() {
    // Only the spawned mode asks for `Send` futures: this one holds an `Rc` across an await.
    let service = service_fn(|req: Request| async move {
        let method = std::rc::Rc::new(req.method().to_owned());
        tokio::task::yield_now().await;
        Ok::<_, BoxError>(req.id().cloned().map(|id| Response::ok(id, json!(*method))))
    });
    let (client, server_end) = tokio::io::duplex(4096);
    let (read, write) = tokio::io::split(server_end);
    let (client_read, mut client_write) = tokio::io::split(client);
    let serve = Server::new(service).serve(read, write, Framing::Ndjson);
    let talk = async {
        let request = frame(
            r#"{"jsonrpc":"2.0","id":1,"method":"local"}"#,
            Framing::Ndjson,
        );
        client_write.write_all(request.as_bytes()).await.unwrap();
        let mut replies = BufReader::new(client_read);
        let reply = read_frame(&mut replies, Framing::Ndjson).await;
        client_write.shutdown().await.unwrap();
        assert_eq!(read_frame(&mut replies, Framing::Ndjson).await, None);
        reply
    };
    let (served, reply) = tokio::join!(serve, talk);
    served.unwrap();
    assert_eq!(
        reply.as_deref(),
        Some(r#"{"jsonrpc":"2.0","id":1,"result":"local"}"#)
    );
}

/// Notifications are not spawned: on a runtime of two workers, a hundred of them still take effect in the order the
/// peer sent them (an editor's edits), while the requests around them run on tasks of their own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_take_effect_in_the_order_they_were_sent() {
    let probe = Probe::new();
    let mut conn = spawned(CancelStack::lsp(), &probe, Framing::ContentLength);
    let frames: Vec<String> = (0..100)
        .map(|n| format!(r#"{{"jsonrpc":"2.0","method":"textDocument/didChange","params":{{"version":{n}}}}}"#))
        .collect();
    let frames: Vec<&str> = frames.iter().map(String::as_str).collect();
    conn.send_together(&frames).await;
    conn.send(r#"{"jsonrpc":"2.0","id":1,"method":"echo","params":"after"}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":1,"result":"after"}"#)
        .await;
    let versions: Vec<i64> = probe
        .notifications()
        .iter()
        .map(|(_, params)| params["version"].as_i64().expect("a version"))
        .collect();
    assert_eq!(versions, (0..100).collect::<Vec<_>>());
    conn.finish_quiet().await;
}
