//! A peer that stops reading its replies: the server's queue of replies is bounded in bytes, the server stops
//! reading that connection until the peer catches up (or closes it when nothing is written for the stall timeout),
//! and a graceful shutdown still ends, its last writes cut at the close grace.

use std::time::Duration;

use tests::{ms, Probe};
use tokio::{
    io::{AsyncWriteExt, DuplexStream},
    task::JoinHandle,
};
use tower::ServiceBuilder;
use tower_cancel::{outbox::DEFAULT_MAX_QUEUED_BYTES, CancelStack, Outbox};
use tower_cancel_io::{Framing, Server, DEFAULT_STALL_TIMEOUT};

const PIPE: usize = 64 * 1024;

/// The ACP stack over `probe`'s handler, configured by `configure` and served over pipes whose reading end the
/// client keeps open and never reads: the client's two ends, the outbox, and `serve`'s task.
fn served_to_a_peer_that_never_reads(
    probe: &Probe,
    configure: impl FnOnce(Server<Served>) -> Server<Served>,
) -> (Client, Outbox, JoinHandle<std::io::Result<()>>) {
    let service = ServiceBuilder::new()
        .layer(CancelStack::acp())
        .service(probe.service());
    let (client_out, server_in) = tokio::io::duplex(PIPE);
    let (server_out, client_in) = tokio::io::duplex(PIPE);
    let server = configure(Server::new(service));
    let outbox = server.connection().outbox().clone();
    let serving = tokio::spawn(server.serve(server_in, server_out, Framing::Ndjson));
    ((client_out, client_in), outbox, serving)
}

/// The client's writing end, and its reading end, kept open and never read.
type Client = (DuplexStream, DuplexStream);

type Served = <CancelStack<tower_cancel::dialect::Acp> as tower::Layer<tests::Handler>>::Service;

/// An `echo` request of about 32 KiB, as one NDJSON line.
fn echo(id: u32, payload: &str) -> String {
    format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"echo\",\"params\":\"{payload}\"}}\n")
}

#[tokio::test(start_paused = true)]
async fn a_peer_that_never_reads_cannot_make_the_server_buffer_without_bound() {
    let probe = Probe::new();
    let ((mut client_out, _never_read), outbox, serving) =
        served_to_a_peer_that_never_reads(&probe, |server| server);

    // 64 MiB of requests, each answered by a 32 KiB echo, while the client reads nothing.
    let payload = "x".repeat(32 * 1024);
    let mut written = 0;
    let write_all = async {
        for id in 0..2048 {
            client_out
                .write_all(echo(id, &payload).as_bytes())
                .await
                .unwrap();
            written += 1;
        }
    };
    // Less than the stall timeout: the server is still there, not reading.
    let blocked = tokio::time::timeout(Duration::from_secs(20), write_all)
        .await
        .is_err();
    assert!(
        blocked,
        "the server read all 64 MiB while the peer read nothing"
    );
    let queued = outbox.queued_bytes();
    println!("{written} requests written before the server stopped reading; {queued} bytes queued");
    assert!(
        queued <= DEFAULT_MAX_QUEUED_BYTES + 64 * 1024,
        "{queued} bytes of replies queued, past the bound"
    );
    assert!(
        written < 2048 / 4,
        "{written} requests read: the server should stop near the 8 MiB bound"
    );
    // The reading stays stopped for the stall timeout: the connection is closed, and everything let go of.
    tokio::time::timeout(DEFAULT_STALL_TIMEOUT, serving)
        .await
        .expect("serve returned after the stall timeout")
        .unwrap()
        .unwrap();
    assert_eq!(probe.running(), 0);
}

#[tokio::test(start_paused = true)]
async fn graceful_shutdown_ends_even_if_the_peer_stopped_reading() {
    let probe = Probe::new();
    let mut shutdown = None;
    let ((mut client_out, _never_read), _, serving) =
        served_to_a_peer_that_never_reads(&probe, |server| {
            shutdown = Some(server.shutdown_handle());
            server.drain_timeout(ms(1000)).close_grace(ms(500))
        });
    let shutdown = shutdown.expect("taken");
    let payload = "x".repeat(32 * 1024);
    for id in 0..4 {
        client_out
            .write_all(echo(id, &payload).as_bytes())
            .await
            .unwrap();
    }
    client_out
        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":99,\"method\":\"hang\"}\n")
        .await
        .unwrap();
    probe.wait_started(99).await;
    let started = tokio::time::Instant::now();
    shutdown.shutdown();
    tokio::time::timeout(Duration::from_secs(3600), serving)
        .await
        .expect("serve returned")
        .unwrap()
        .unwrap();
    // The drain, then the close grace for the writes the peer never takes.
    let took = started.elapsed();
    assert!(
        took >= ms(1000) && took <= ms(1600),
        "serve returned {took:?} after the shutdown"
    );
    assert_eq!(
        probe.running(),
        0,
        "request 99 was cancelled at the end of the drain"
    );
}

/// Two of these servers back to back, each sending the other its requests: `n` calls each way of 2 KB, every
/// side's outbox bounded at `bound`. Returns how many calls were answered, and how many failed.
async fn two_servers_exchanging(n: usize, bound: usize) -> (usize, usize) {
    let (a_out, b_in) = tokio::io::duplex(4096);
    let (b_out, a_in) = tokio::io::duplex(4096);
    let echo = || {
        tower::service_fn(|req: tower_cancel::Request| async move {
            Ok::<_, tower_cancel::BoxError>(req.params_as::<serde_json::Value>()?)
        })
    };
    let a = Server::with_stack(CancelStack::lsp(), echo()).max_queued_bytes(bound);
    let b = Server::with_stack(CancelStack::lsp(), echo()).max_queued_bytes(bound);
    let (to_b, to_a) = (a.peer().expect("a peer"), b.peer().expect("a peer"));
    let serving_a = tokio::spawn(a.serve(a_in, a_out, Framing::ContentLength));
    let serving_b = tokio::spawn(b.serve(b_in, b_out, Framing::ContentLength));
    let payload = serde_json::json!({ "s": "x".repeat(2000) });
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..n {
        calls.spawn(to_b.request("echo", payload.clone()));
        calls.spawn(to_a.request("echo", payload.clone()));
    }
    let ended = tokio::time::timeout(Duration::from_secs(3600), async {
        let (mut answered, mut failed) = (0, 0);
        while let Some(call) = calls.join_next().await {
            match call.unwrap() {
                Ok(echoed) => {
                    assert_eq!(echoed, payload);
                    answered += 1;
                }
                Err(error) => {
                    assert_eq!(error, tower_cancel::PeerError::Closed);
                    failed += 1;
                }
            }
        }
        (answered, failed)
    })
    .await
    .expect("every call ended");
    drop((to_a, to_b));
    serving_a.abort();
    serving_b.abort();
    ended
}

/// A side's own requests never stop it from reading: two servers flooding each other under the default bound
/// both finish.
#[tokio::test(start_paused = true)]
async fn two_servers_sending_each_other_requests_both_finish() {
    assert_eq!(
        two_servers_exchanging(500, DEFAULT_MAX_QUEUED_BYTES).await,
        (1000, 0)
    );
}

/// Each flooding the other with replies past a small bound, both stop reading and wait for each other: the stall
/// timeout ends the connections, and the calls fail `Closed` rather than wait forever.
#[tokio::test(start_paused = true)]
async fn two_servers_flooding_each_other_past_the_bound_end_at_the_stall_timeout() {
    let started = tokio::time::Instant::now();
    let (answered, failed) = two_servers_exchanging(50, 16 * 1024).await;
    assert_eq!(answered + failed, 100);
    // The stall timeout after the reading stopped, plus the close grace.
    assert!(
        started.elapsed() <= DEFAULT_STALL_TIMEOUT + Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}
