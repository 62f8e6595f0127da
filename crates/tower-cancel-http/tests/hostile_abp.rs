//! Hostile agents against an ABP app, over real sockets (issue 25): floods from an agent that never reads, more
//! sessions than the app takes, pages of other sites. Each test shows a bound holding; none measures a speed but
//! the issue's own "another agent's call is answered within a second".

#[allow(dead_code)]
#[path = "support/abp.rs"]
mod support;

#[allow(dead_code)]
#[path = "support/raw_ws.rs"]
mod raw_ws;

use std::{
    sync::{
        atomic::{AtomicBool, AtomicUsize, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use serde_json::json;
use support::{initialize_payload, serve, serve_with, App, Wire};
use tower_cancel_http::mcp::Origins;

/// The tests' bound on a session's queued answers: small, so that a flood fills it soon.
const MAX_QUEUED: usize = 64 * 1024;
/// How far past the bound the queue may go: the answer to the last frame read before the reading stopped.
const LAST_ANSWER: usize = 8 * 1024;
const STALL: Duration = Duration::from_millis(1500);
/// A hang guard: never a measure.
const PATIENCE: Duration = Duration::from_secs(30);

#[derive(Clone, Copy, Debug)]
enum Flood {
    /// Envelopes of a type the app does not take: each is answered an `error` envelope.
    Envelopes,
    /// WebSocket pings of 125 bytes: each is answered a pong by the WebSocket library.
    Pings,
    /// Cancels of calls the app never saw: each is answered "Operation not found".
    UnknownCancels,
}

#[tokio::test]
async fn an_envelope_flood_from_an_agent_that_never_reads_is_bounded_then_closed() {
    flood_from_an_agent_that_never_reads(Flood::Envelopes).await;
}

#[tokio::test]
async fn a_ping_flood_from_an_agent_that_never_reads_is_bounded_then_closed() {
    flood_from_an_agent_that_never_reads(Flood::Pings).await;
}

#[tokio::test]
async fn a_flood_of_unknown_cancels_from_an_agent_that_never_reads_is_bounded_then_closed() {
    flood_from_an_agent_that_never_reads(Flood::UnknownCancels).await;
}

/// The flood fills the session's queue to its bound and no further (the app stops reading it), another agent's
/// call is answered meanwhile, the stall timeout closes the flooder's session, and nothing of it is left.
async fn flood_from_an_agent_that_never_reads(flood: Flood) {
    let app = serve_with(None, |app| {
        app.max_queued_bytes(MAX_QUEUED).stall_timeout(STALL)
    })
    .await;
    let mut hostile = raw_ws::upgrade(&app.url, None)
        .await
        .socket
        .expect("upgraded");
    let initialize = envelope("initialize", "i", initialize_payload());
    hostile.text(&initialize).await.unwrap();
    // Writes until the app closes the socket: they block while it reads nothing, and fail once it is gone.
    let flooder = tokio::spawn(async move {
        let unknown_type = envelope(&"x".repeat(1000), "e", json!({}));
        let mut sent = 0u64;
        loop {
            let written = match flood {
                Flood::Envelopes => hostile.text(&unknown_type).await,
                Flood::Pings => hostile.frame(raw_ws::PING, &[7; 125]).await,
                Flood::UnknownCancels => {
                    let cancel = json!({ "callId": format!("nobody-{sent}"), "reason": "flood" });
                    hostile
                        .text(&envelope("capabilities/cancel", "c", cancel))
                        .await
                }
            };
            if written.is_err() {
                return sent;
            }
            sent += 1;
        }
    });
    let most_queued = watch_the_queue(&app);

    wait_for("the app stops reading the flooder", || {
        app.app.stats().reading_stopped == 1
    })
    .await;
    // Meanwhile another agent is served.
    let mut other = Wire::session(&app.url).await;
    let asked = Instant::now();
    let id = other.call("normal", "echo", json!({ "n": 1 })).await;
    let answer = other.reply_to(&id).await;
    assert_eq!(answer["payload"]["success"], true, "{answer}");
    assert!(
        asked.elapsed() < Duration::from_secs(1),
        "another agent's call waited {:?}",
        asked.elapsed()
    );

    let sent = tokio::time::timeout(PATIENCE, flooder)
        .await
        .expect("the app closes the flooder's session after the stall timeout")
        .unwrap();
    most_queued.0.store(true, Ordering::Release);
    let most = most_queued.1.load(Ordering::Acquire);
    assert!(
        most <= MAX_QUEUED + LAST_ANSWER,
        "{flood:?}: {most} bytes were queued for the flooder ({sent} frames sent)"
    );
    let stats = app.app.stats();
    assert_eq!(
        (stats.stalled, stats.reading_stopped, stats.sessions),
        (1, 0, 1),
        "{stats:?}"
    );
    other.close().await;
    app.settled().await;
    let (stats, front) = (app.app.stats(), app.app.front().stats());
    assert_eq!(
        (
            stats.queued_bytes,
            stats.in_flight,
            front.open,
            front.in_flight
        ),
        (0, 0, 0, 0),
        "{stats:?} {front:?}"
    );
}

/// The most bytes the app had queued, sampled until the flag is set.
fn watch_the_queue(app: &App) -> (Arc<AtomicBool>, Arc<AtomicUsize>) {
    let (done, most) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicUsize::new(0)),
    );
    let watched = app.app.clone();
    let (flag, max) = (done.clone(), Arc::clone(&most));
    tokio::spawn(async move {
        while !flag.load(Ordering::Acquire) {
            max.fetch_max(watched.stats().queued_bytes, Ordering::AcqRel);
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    });
    (done, most)
}

#[tokio::test]
async fn past_the_session_limit_an_upgrade_is_refused_503_with_retry_after() {
    let app = serve_with(None, |app| app.max_sessions(2)).await;
    let first = Wire::session(&app.url).await;
    // A session not initialized yet holds its place too.
    let _second = Wire::connect(&app.url).await;
    let refused = raw_ws::upgrade(&app.url, None).await;
    assert_eq!(refused.status, 503, "{}", refused.head);
    assert!(
        refused.head.contains("retry-after: 1\r\n"),
        "{}",
        refused.head
    );
    assert_eq!(app.app.stats().sessions, 2);

    first.close().await;
    wait_for("the first session closes", || app.app.stats().sessions == 1).await;
    let admitted = raw_ws::upgrade(&app.url, None).await;
    assert_eq!(admitted.status, 101, "{}", admitted.head);
}

#[tokio::test]
async fn an_upgrade_from_another_sites_page_is_refused_403_and_opens_nothing() {
    let app = serve(None).await;
    let refused = raw_ws::upgrade(&app.url, Some("http://evil.example")).await;
    assert_eq!(refused.status, 403, "{}", refused.head);
    assert!(refused.socket.is_none());
    let (stats, front) = (app.app.stats(), app.app.front().stats());
    assert_eq!((stats.sessions, front.open), (0, 0));

    for loopback in [
        "http://localhost:5173",
        "http://127.0.0.1",
        "http://[::1]:8080",
    ] {
        let admitted = raw_ws::upgrade(&app.url, Some(loopback)).await;
        assert_eq!(admitted.status, 101, "{loopback}: {}", admitted.head);
    }
    // Not a browser: an agent's library sends no Origin.
    let mut agent = Wire::session(&app.url).await;
    let id = agent.call("c", "echo", json!({})).await;
    assert_eq!(agent.reply_to(&id).await["payload"]["success"], true);
}

#[tokio::test]
async fn a_listed_origin_is_let_through_and_any_lets_every_origin_through() {
    let listed = serve_with(None, |app| {
        app.origins(Origins::List(vec!["https://app.example.com".into()]))
    })
    .await;
    for (origin, status) in [
        ("https://app.example.com", 101),
        ("http://localhost:3000", 101),
        ("https://app.example.com.evil.example", 403),
        ("http://evil.example", 403),
    ] {
        let answer = raw_ws::upgrade(&listed.url, Some(origin)).await;
        assert_eq!(answer.status, status, "{origin}: {}", answer.head);
    }
    let any = serve_with(None, |app| app.origins(Origins::Any)).await;
    let answer = raw_ws::upgrade(&any.url, Some("http://evil.example")).await;
    assert_eq!(answer.status, 101, "{}", answer.head);
}

fn envelope(kind: &str, id: &str, payload: serde_json::Value) -> String {
    json!({ "type": kind, "id": id, "timestamp": 1_700_000_000_000u64, "payload": payload })
        .to_string()
}

async fn wait_for(what: &str, done: impl Fn() -> bool) {
    tokio::time::timeout(PATIENCE, async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("never: {what}"));
}
