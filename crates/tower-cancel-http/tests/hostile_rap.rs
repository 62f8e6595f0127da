//! A RAP tool server against hostile clients, over real sockets: each resource a token holder could exhaust is
//! bounded, and what the others see is what the spec asks for.
//!
//! - the notices' rate limit is each client's (its token and its address): a flood from one host leaves another
//!   host's cancels honoured, and every cancel is answered 200, the flood's included;
//! - a callback URL at an internal address is refused when the server says so (a name is checked at delivery:
//!   see the unit tests of `rap/server/deliver.rs`, since every name that resolves here is `localhost`, which is
//!   refused at the invocation);
//! - the calls in flight are bounded, the server's and each thread's: past either bound an invocation gets 503
//!   with `Retry-After` at once, never a hang, and the server goes on answering.

mod support;

use std::{
    sync::{
        atomic::{AtomicBool, AtomicUsize, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use futures_util::{stream, StreamExt};
use http::StatusCode;
use serde_json::json;
use tower_cancel::CancelStack;
use tower_cancel_http::rap::Rap;

use support::rap::{client_from, end, Harness, TOKEN};

/// Another host, as the server sees it: Linux answers on all of 127.0.0.0/8.
const OTHER_HOST: [u8; 4] = [127, 0, 0, 2];

async fn cancel_from(h: &Harness, http: &reqwest::Client, thread: &str, call: &str) -> StatusCode {
    let body = json!({"thread_id": thread, "tool_call_id": call}).to_string();
    let (status, text) = h
        .post_with(
            http,
            "/cancel_tool_call",
            Some(TOKEN),
            "application/json",
            body,
        )
        .await;
    assert_eq!(text, "", "a cancel's answer is empty");
    status
}

#[tokio::test]
async fn a_client_flooding_cancels_starves_no_other_and_every_answer_is_200() {
    let h = Harness::with(
        CancelStack::new(Rap),
        |server| server.notices_per_second(Some(5)),
        vec![],
    )
    .await;
    h.invoke("t1", "c1", 60_000).await;
    h.probe.started(1).await;

    // One host floods with the token: its burst (10) passes, the rest is past its quota, answered 200 all the same.
    let flooder = h.http.clone();
    for n in 0..40 {
        let status = cancel_from(&h, &flooder, "t1", &format!("flood-{n}")).await;
        assert_eq!(status, StatusCode::OK, "cancel {n} of the flood");
    }
    let limited = h.stats().rate_limited;
    assert!(
        limited >= 25,
        "the flood past the quota is counted: {limited}"
    );
    // Past its quota, its own cancel does nothing (it is answered 200 and the call runs on).
    assert_eq!(cancel_from(&h, &flooder, "t1", "c1").await, StatusCode::OK);
    assert!(
        h.alive("t1", "c1").await,
        "a cancel past the quota does nothing"
    );
    assert_eq!(h.stats().rate_limited, limited + 1);

    // Another host with the same token has a quota of its own: its cancel is honoured.
    let other = client_from(OTHER_HOST);
    assert_eq!(cancel_from(&h, &other, "t1", "c1").await, StatusCode::OK);
    assert_eq!(h.probe.ended(1).await, [end("c1", "peer")]);
    assert_eq!(h.stats().rate_limited, limited + 1);
    h.idle().await;
    assert!(h.callback.received().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_cancelling_1000_calls_at_once_is_served_in_full() {
    const CALLS: usize = 1000;
    let h = Harness::start().await;
    stream::iter(0..CALLS)
        .for_each_concurrent(32, |n| {
            let h = &h;
            async move { h.invoke("fan-out", &format!("c{n}"), 60_000).await }
        })
        .await;
    h.probe.started(CALLS).await;

    // Every cancel at once, on as many connections, from one client.
    let statuses = stream::iter(0..CALLS)
        .map(|n| {
            let h = &h;
            async move { cancel_from(h, &h.http, "fan-out", &format!("c{n}")).await }
        })
        .buffer_unordered(CALLS)
        .collect::<Vec<_>>()
        .await;
    assert!(statuses.iter().all(|status| *status == StatusCode::OK));
    assert_eq!(h.stats().rate_limited, 0, "all within the default quota");
    let ends = h.probe.ended(CALLS).await;
    assert!(
        ends.iter().all(|(_, how)| how == "peer"),
        "every call stopped"
    );
    h.idle().await;
    assert!(h.callback.received().is_empty());
}

/// Callback URLs that lead back to the server's host or its network, the callback server's port where there is one.
fn internal_callback_urls(h: &Harness) -> Vec<String> {
    let port = h
        .callback_url
        .rsplit(':')
        .next()
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    [
        "http://169.254.169.254/latest/meta-data/iam".to_owned(),
        format!("http://127.0.0.1:{port}/callback"),
        format!("http://[::1]:{port}/callback"),
        format!("http://[::ffff:127.0.0.1]:{port}/callback"),
        // 127.0.0.1 as reqwest reads it.
        format!("http://2130706433:{port}/callback"),
        "http://10.0.0.7/callback".to_owned(),
        format!("http://localhost:{port}/callback"),
    ]
    .into()
}

#[tokio::test]
async fn callbacks_to_internal_addresses_are_refused_when_the_server_says_so() {
    let h = Harness::with(
        CancelStack::new(Rap),
        |server| server.refuse_private_callbacks(true),
        vec![],
    )
    .await;
    for (n, url) in internal_callback_urls(&h).into_iter().enumerate() {
        let mut body = h.invocation("t1", &format!("c{n}"), "sleep", json!({"ms": 1}));
        body["callback_url"] = json!(url);
        let (status, text) = h.post("/invoke", body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{url}");
        assert!(
            text.starts_with("callback_url: an internal address"),
            "{url}: {text}"
        );
    }
    let refused = h.stats();
    assert_eq!((refused.accepted, refused.refused), (0, 7));
    // Nothing ran, nothing reached the callback server.
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert!(h.probe.ends().is_empty());
    assert!(h.callback.received().is_empty());
    assert_eq!(h.stats().undelivered, 0);
}

#[tokio::test]
async fn callbacks_to_internal_addresses_are_delivered_when_allowed() {
    let h = Harness::start().await;
    let loopback = internal_callback_urls(&h).into_iter().filter(|url| {
        url.contains("127.0.0.1") || url.contains("localhost") || url.contains("2130706433")
    });
    let mut delivered = 0;
    for (n, url) in loopback.enumerate() {
        let mut body = h.invocation("t1", &format!("c{n}"), "sleep", json!({"ms": 1}));
        body["callback_url"] = json!(url);
        assert_eq!(
            h.post("/invoke", body).await,
            (StatusCode::OK, String::new()),
            "{url}"
        );
        delivered += 1;
        h.callback.results(delivered).await;
    }
    assert_eq!(delivered, 4);
}

/// Invoke a 60 s `sleep` as `call` of `thread`: the status, and the `Retry-After` of a refusal.
async fn invoke_status(h: &Harness, thread: &str, call: &str) -> (StatusCode, Option<String>) {
    let response = h
        .http
        .post(h.url("/invoke"))
        .bearer_auth(TOKEN)
        .header("content-type", "application/json")
        .body(
            h.invocation(thread, call, "sleep", json!({"ms": 60_000}))
                .to_string(),
        )
        .send()
        .await
        .unwrap();
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|value| value.to_str().unwrap().to_owned());
    (response.status(), retry_after)
}

/// The most `in_flight` seen while `run` runs, sampled every millisecond.
async fn peak_in_flight<F: std::future::Future>(h: &Harness, run: F) -> (usize, F::Output) {
    let (peak, done) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicBool::new(false)),
    );
    let watcher = tokio::spawn({
        let (server, peak, done) = (h.server.clone(), peak.clone(), done.clone());
        async move {
            while !done.load(Ordering::SeqCst) {
                peak.fetch_max(server.in_flight(), Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    });
    let output = run.await;
    done.store(true, Ordering::SeqCst);
    watcher.await.unwrap();
    (
        peak.load(Ordering::SeqCst).max(h.server.in_flight()),
        output,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invocations_past_the_servers_bound_get_503_at_once_and_the_server_still_answers() {
    const LIMIT: usize = 64;
    const INVOCATIONS: usize = 500;
    let h = Harness::with(
        CancelStack::new(Rap),
        |server| server.max_in_flight(LIMIT),
        vec![],
    )
    .await;
    // A thread per 10 calls: the threads' own bound (1000) is not what refuses them.
    let (peak, answers) = peak_in_flight(&h, async {
        stream::iter(0..INVOCATIONS)
            .map(|n| {
                let h = &h;
                async move { invoke_status(h, &format!("t{}", n / 10), &format!("c{n}")).await }
            })
            .buffer_unordered(100)
            .collect::<Vec<_>>()
            .await
    })
    .await;
    assert!(peak <= LIMIT, "at most {LIMIT} in flight, saw {peak}");
    let accepted = answers
        .iter()
        .filter(|(status, _)| *status == StatusCode::OK)
        .count();
    let busy: Vec<_> = answers
        .iter()
        .filter(|(status, _)| *status != StatusCode::OK)
        .collect();
    assert_eq!(accepted, LIMIT);
    assert_eq!(busy.len(), INVOCATIONS - LIMIT);
    assert!(busy
        .iter()
        .all(|answer| **answer == (StatusCode::SERVICE_UNAVAILABLE, Some("1".to_owned()))));
    assert_eq!(h.server.in_flight(), LIMIT);
    assert_eq!(h.stats().refused, (INVOCATIONS - LIMIT) as u64);
    assert_eq!(h.server.front().stats().busy, (INVOCATIONS - LIMIT) as u64);

    // The server still answers at once: discovery, and a status question.
    let started = Instant::now();
    let discovery = h
        .http
        .get(h.url("/.well-known/rap-toolset"))
        .send()
        .await
        .unwrap();
    assert_eq!(discovery.status(), StatusCode::OK);
    assert!(!h.alive("t-none", "c-none").await);
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );

    // Closing the threads gives their room back: an invocation is taken again.
    for thread in 0..INVOCATIONS / 10 {
        let body = json!({"thread_id": format!("t{thread}")});
        assert_eq!(h.post("/close_thread", body).await.0, StatusCode::OK);
    }
    h.idle().await;
    assert_eq!(
        invoke_status(&h, "t-late", "c-late").await.0,
        StatusCode::OK
    );
    h.post("/close_thread", json!({"thread_id": "t-late"}))
        .await;
    h.idle().await;
    assert!(h.callback.received().is_empty());
}

#[tokio::test]
async fn invocations_past_a_threads_bound_get_503_and_other_threads_run() {
    const PER_THREAD: usize = 8;
    let h = Harness::with(
        CancelStack::new(Rap),
        |server| server.max_in_flight_per_thread(PER_THREAD),
        vec![],
    )
    .await;
    let (peak, answers) = peak_in_flight(&h, async {
        let mut answers = vec![];
        for n in 0..3 * PER_THREAD {
            answers.push(invoke_status(&h, "greedy", &format!("c{n}")).await);
        }
        answers
    })
    .await;
    assert!(
        peak <= PER_THREAD,
        "at most {PER_THREAD} in flight, saw {peak}"
    );
    assert!(answers[..PER_THREAD]
        .iter()
        .all(|answer| answer.0 == StatusCode::OK));
    assert!(answers[PER_THREAD..]
        .iter()
        .all(|answer| *answer == (StatusCode::SERVICE_UNAVAILABLE, Some("1".to_owned()))));
    // A retry of a call that runs is still acknowledged (it has its room), and runs once.
    assert_eq!(invoke_status(&h, "greedy", "c0").await.0, StatusCode::OK);
    // Another thread has room of its own.
    assert_eq!(invoke_status(&h, "other", "c0").await.0, StatusCode::OK);
    h.probe.started(PER_THREAD + 1).await;
    assert_eq!(h.server.in_flight(), PER_THREAD + 1);
    // A call of the thread that ends gives its room back.
    h.cancel("greedy", "c0").await;
    h.probe.ended(1).await;
    eventually_in_flight(&h, PER_THREAD).await;
    assert_eq!(
        invoke_status(&h, "greedy", "c-next").await.0,
        StatusCode::OK
    );
    for thread in ["greedy", "other"] {
        h.post("/close_thread", json!({"thread_id": thread})).await;
    }
    h.idle().await;
    assert_eq!(h.stats().refused, 2 * PER_THREAD as u64);
}

async fn eventually_in_flight(h: &Harness, n: usize) {
    support::eventually(&format!("{n} in flight"), || h.server.in_flight() == n).await;
}
