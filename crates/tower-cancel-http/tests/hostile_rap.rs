//! A RAP tool server against hostile clients, over real sockets: each resource a token holder could exhaust is
//! bounded, and what the others see is what the spec asks for.
//!
//! - the notices' rate limit is each client's (its token and its address): a flood from one host leaves another
//!   host's cancels honoured, and every cancel is answered 200, the flood's included;
//! - a callback URL at an internal address is refused when the server says so (a name is checked at delivery:
//!   see the unit tests of `rap/server/deliver.rs`, since every name that resolves here is `localhost`, which is
//!   refused at the invocation);

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
