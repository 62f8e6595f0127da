//! A RAP tool server against hostile clients, over real sockets: each resource a token holder could exhaust is
//! bounded, and what the others see is what the spec asks for.
//!
//! - the notices' rate limit is each client's (its token and its address): a flood from one host leaves another
//!   host's cancels honoured, and every cancel is answered 200, the flood's included;
//! - a callback URL at an internal address is refused when the server says so;

mod support;

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
