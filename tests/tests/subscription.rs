//! MCP subscriptions over a real connection (two servers back to back, [`Pair`]): a server that ends a
//! subscription on its own says so with `notifications/cancelled` naming the `subscriptions/listen` request, and
//! that is the subscription's end (no reply follows it), never when the client ended it; the client's
//! [`Peer`](tower_cancel::Peer) takes that cancel as the end of its call, with the server's reason.

use serde_json::json;
use tests::{
    ms,
    pair::{settle, Pair, PeerCounts},
    Counts, Ended,
};
use tokio::time::Instant;
use tower_cancel::{dialect::Mcp, CancelReason, CancelStack, PeerError, TimeoutLayer};
use tower_cancel_io::Framing;

const LISTEN_0: &str =
    r#"{"jsonrpc":"2.0","id":0,"method":"subscriptions/listen","params":{"ms":100}}"#;
const LISTEN_0_OPEN: &str =
    r#"{"jsonrpc":"2.0","id":0,"method":"subscriptions/listen","params":{"notifications":{}}}"#;

fn teardown_0(reason: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"reason":"{reason}","requestId":0}}}}"#
    )
}

/// The handler returns (the server ends the subscription after 100 ms): the teardown goes out, and nothing after
/// it (the handler's result is not sent: the teardown was the end); the client's call ends with the server's reason.
#[tokio::test(start_paused = true)]
async fn a_server_ending_a_subscription_sends_the_teardown_and_no_reply() {
    let mut pair = Pair::mcp();
    let start = Instant::now();
    let listen = pair
        .client
        .peer
        .request("subscriptions/listen", json!({ "ms": 100 }));
    assert_eq!(
        listen.await,
        Err(PeerError::CancelledByPeer {
            reason: Some("subscription ended by the server".into())
        })
    );
    tests::assert_about(start.elapsed(), ms(100));
    pair.to_server.expect(LISTEN_0).await;
    pair.to_client
        .expect(&teardown_0("subscription ended by the server"))
        .await;
    settle().await;
    pair.to_server.assert_quiet();
    pair.to_client.assert_quiet();
    assert_eq!(pair.server.counts(), Counts::new(1, 1, 0));
    assert_eq!(pair.client.peer_counts(), PeerCounts::new(1, 0, 0));
    pair.finish().await;
}

/// The server's own timeout ends the subscription: the teardown says why, and is the end (no -32001 after it).
#[tokio::test(start_paused = true)]
async fn a_server_side_timeout_tears_the_subscription_down_with_its_reason() {
    let server = CancelStack::mcp().timeouts(TimeoutLayer::new(ms(500)));
    let mut pair = Pair::new(Framing::Ndjson, (CancelStack::mcp(), Mcp), (server, Mcp));
    let listen = pair
        .client
        .peer
        .request("subscriptions/listen", json!({ "notifications": {} }));
    let reason = "subscription ended by the server: timed out";
    assert_eq!(
        listen.await,
        Err(PeerError::CancelledByPeer {
            reason: Some(reason.into())
        })
    );
    pair.to_server.expect(LISTEN_0_OPEN).await;
    pair.to_client.expect(&teardown_0(reason)).await;
    assert_eq!(
        pair.server.probe.ended_of(0),
        Some(Ended::stopped(
            0,
            "subscriptions/listen",
            Some(CancelReason::Timeout)
        ))
    );
    pair.finish().await;
}

/// A shutdown of the server's connection ends its subscriptions the same way.
#[tokio::test(start_paused = true)]
async fn a_shutdown_tears_the_subscription_down() {
    let mut pair = Pair::mcp();
    let listen = pair
        .client
        .peer
        .request("subscriptions/listen", json!({ "notifications": {} }))
        .no_timeout();
    let listen = tokio::spawn(listen);
    pair.server.probe.wait_started(0).await;
    pair.server.shutdown.shutdown();
    let reason = "subscription ended by the server: server shutting down";
    assert_eq!(
        listen.await.unwrap(),
        Err(PeerError::CancelledByPeer {
            reason: Some(reason.into())
        })
    );
    pair.to_server.expect(LISTEN_0_OPEN).await;
    pair.to_client.expect(&teardown_0(reason)).await;
    settle().await;
    pair.to_client.assert_quiet();
    pair.close().await;
}

/// The client ends its subscription (its call dropped: MCP's cancel goes out): the server stops the handler and
/// sends nothing at all, no teardown (it did not end it) and no reply.
#[tokio::test(start_paused = true)]
async fn a_subscription_the_client_cancels_gets_no_teardown() {
    let mut pair = Pair::mcp();
    let listen = pair
        .client
        .peer
        .request("subscriptions/listen", json!({ "notifications": {} }));
    let listen = tokio::spawn(listen);
    pair.server.probe.wait_started(0).await;
    listen.abort();
    pair.to_server.expect(LISTEN_0_OPEN).await;
    pair.to_server
        .expect(
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"reason":"cancelled locally: caller went away","requestId":0}}"#,
        )
        .await;
    settle().await;
    assert_eq!(
        pair.server.probe.ended_of(0),
        Some(Ended::stopped(
            0,
            "subscriptions/listen",
            Some(CancelReason::peer(Some(
                "cancelled locally: caller went away".into()
            )))
        ))
    );
    pair.to_client.assert_quiet();
    assert_eq!(pair.client.peer_counts(), PeerCounts::new(1, 1, 0));
    pair.finish().await;
}

/// A cancel naming an id that is not a subscription of the client's is not the peer's: it still reaches the
/// client's own handler of that id (a request the server sent it), as every cancel does.
#[tokio::test(start_paused = true)]
async fn a_cancel_of_another_id_is_still_a_cancel_of_the_clients_own_handler() {
    let mut pair = Pair::mcp();
    let listen = pair
        .client
        .peer
        .request("subscriptions/listen", json!({ "notifications": {} }))
        .no_timeout();
    let listen = tokio::spawn(listen);
    pair.server.probe.wait_started(0).await;
    // The server asks the client something (id 0 too, in its own numbering) and gives up on it.
    drop(pair.server.peer.request("hang", ()));
    pair.client.probe.wait_started(0).await;
    settle().await;
    assert_eq!(
        pair.client.probe.ended_of(0),
        Some(Ended::stopped(
            0,
            "hang",
            Some(CancelReason::peer(Some(
                "cancelled locally: caller went away".into()
            )))
        ))
    );
    assert!(!listen.is_finished(), "the subscription is still open");
    let went_away = r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"reason":"cancelled locally: caller went away","requestId":0}}"#;
    pair.to_client
        .expect(r#"{"jsonrpc":"2.0","id":0,"method":"hang"}"#)
        .await;
    pair.to_client.expect(went_away).await;
    listen.abort();
    pair.to_server.expect(LISTEN_0_OPEN).await;
    pair.to_server.expect(went_away).await;
    pair.finish().await;
}
