//! Requests a handler makes to the client through its `ClientSocket`: answered, and cancelled on the wire
//! (`$/cancelRequest` with the nested request's id) when the handler's own request is cancelled or times out.

mod common;

use std::time::Duration;

use common::{cancelled, settle, start};
use serde_json::{json, Value};
use tower_cancel::CancelStack;
use tower_cancel_async_lsp::AdapterStats;

/// The nested request the client sees, checked, and its id.
async fn question(client: &mut common::Client) -> Value {
    question_with(client, json!({ "q": 1 })).await
}

/// The nested request the client sees, checked against `params`, and its id.
async fn question_with(client: &mut common::Client, params: Value) -> Value {
    let nested = client.next().await;
    assert_eq!(nested["method"], "test/question", "{nested}");
    assert_eq!(nested["params"], params, "{nested}");
    nested["id"].clone()
}

#[tokio::test(start_paused = true)]
async fn a_nested_request_is_answered_through_the_connection() {
    let mut h = start(CancelStack::lsp());
    h.client.request(1, "test/ask", json!({ "q": 1 })).await;
    let nested = question(&mut h.client).await;
    assert_eq!(h.watch.stats().nested_waiting, 1);
    h.client
        .send(json!({ "jsonrpc": "2.0", "id": nested, "result": { "yes": true } }))
        .await;
    assert_eq!(
        h.client.next().await,
        json!({ "jsonrpc": "2.0", "id": 1, "result": { "answer": { "yes": true } } })
    );
    settle().await;
    assert_eq!(h.watch.stats(), AdapterStats::default());
    assert!(h.registry.is_empty());
}

#[tokio::test(start_paused = true)]
async fn an_error_from_the_client_reaches_the_handler() {
    let mut h = start(CancelStack::lsp());
    h.client.request(1, "test/ask", json!({ "q": 1 })).await;
    let nested = question(&mut h.client).await;
    h.client
        .send(
            json!({ "jsonrpc": "2.0", "id": nested, "error": { "code": -32099, "message": "no" } }),
        )
        .await;
    let reply = h.client.next().await;
    assert_eq!(reply["id"], 1);
    assert!(
        reply["result"]["failed"].as_str().unwrap().contains("no"),
        "{reply}"
    );
    settle().await;
    assert_eq!(h.watch.stats(), AdapterStats::default());
}

#[tokio::test(start_paused = true)]
async fn cancelling_the_handler_cancels_its_nested_request_on_the_wire() {
    let mut h = start(CancelStack::lsp());
    h.client.request(1, "test/ask", json!({ "q": 1 })).await;
    let nested = question(&mut h.client).await;

    h.client.cancel(1).await;
    let messages = h.client.reply_and_cancel().await;
    assert_eq!(messages[0], cancelled(1));
    assert_eq!(
        messages[1],
        json!({ "jsonrpc": "2.0", "method": "$/cancelRequest", "params": { "id": nested } })
    );
    assert_eq!(h.counters.stopped(), 1);
    // The client's late answer to the cancelled nested request goes nowhere.
    h.client
        .send(json!({ "jsonrpc": "2.0", "id": nested, "error": { "code": -32800, "message": "Request cancelled" } }))
        .await;
    assert!(h.client.nothing_more().await);
    assert_eq!(h.watch.stats(), AdapterStats::default());
    assert!(h.registry.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_timed_out_handler_cancels_its_nested_request_on_the_wire() {
    let mut h = start(CancelStack::lsp().timeout(Duration::from_secs(2)));
    h.client.request("ask", "test/ask", json!({ "q": 1 })).await;
    // The nested request carries the time its handler's request has left (the clock is paused: all of it).
    let nested = question_with(
        &mut h.client,
        json!({ "q": 1, "_meta": { "timeoutMs": 2000 } }),
    )
    .await;
    let messages = h.client.reply_and_cancel().await;
    assert_eq!(messages[0], cancelled("ask"));
    assert_eq!(messages[1]["method"], "$/cancelRequest");
    assert_eq!(messages[1]["params"]["id"], nested);
    settle().await;
    assert_eq!(h.watch.stats(), AdapterStats::default());
}

#[tokio::test(start_paused = true)]
async fn only_the_cancelled_handlers_nested_request_is_cancelled() {
    let mut h = start(CancelStack::lsp());
    h.client.request(1, "test/ask", json!({ "q": 1 })).await;
    let first = question(&mut h.client).await;
    h.client.request(2, "test/ask", json!({ "q": 1 })).await;
    let second = question(&mut h.client).await;
    assert_ne!(first, second);

    h.client.cancel(2).await;
    let messages = h.client.reply_and_cancel().await;
    assert_eq!(messages[0], cancelled(2));
    assert_eq!(messages[1]["params"]["id"], second);
    assert!(h.client.nothing_more().await);

    // The other one still waits, and gets its answer.
    h.client
        .send(json!({ "jsonrpc": "2.0", "id": first, "result": 42 }))
        .await;
    assert_eq!(
        h.client.next().await,
        json!({ "jsonrpc": "2.0", "id": 1, "result": { "answer": 42 } })
    );
    settle().await;
    assert_eq!(h.watch.stats(), AdapterStats::default());
}

#[tokio::test(start_paused = true)]
async fn a_close_ends_the_nested_requests_too() {
    let mut h = start(CancelStack::lsp());
    h.client.request(1, "test/ask", json!({ "q": 1 })).await;
    question(&mut h.client).await;
    h.client.close().await;
    h.served.await.unwrap().unwrap();
    assert_eq!(h.counters.stopped(), 1);
    assert_eq!(h.watch.stats(), AdapterStats::default());
    assert!(h.registry.is_empty());
}

/// The connection's first handler may be polled before the main loop's future is: its nested request is still
/// tied to it (a fault random schedules found: the marks only began at the bridge's first poll).
#[tokio::test(start_paused = true)]
async fn a_handler_polled_before_the_bridge_still_has_its_nested_request_cancelled() {
    use std::sync::Arc;

    use tower_cancel_async_lsp::AsyncLsp;
    use tower_cancel_io::{Framing, Server};

    let counters = Arc::new(common::Counters::default());
    let lsp = AsyncLsp::new_server({
        let counters = counters.clone();
        |client| common::router(client, counters)
    });
    let watch = lsp.watch();
    let server = Server::with_stack(CancelStack::lsp(), lsp.service());
    let bridge = lsp.run(server.peer());
    let (client_io, server_io) = tokio::io::duplex(1 << 16);
    let mut client = common::Client::new(client_io);
    client.request(1, "test/ask", json!({ "q": 1 })).await;
    let (read, write) = tokio::io::split(server_io);
    // `biased` polls the connection first: it reads the request and polls its handler before the bridge runs.
    let served = tokio::spawn(async move {
        let serving = server.serve(read, write, Framing::ContentLength);
        tokio::select! {
            biased;
            served = serving => served,
            () = bridge => unreachable!("the main loop runs until dropped"),
        }
    });
    let nested = question(&mut client).await;
    client.cancel(1).await;
    let messages = client.reply_and_cancel().await;
    assert_eq!(messages[0], cancelled(1));
    assert_eq!(messages[1]["params"]["id"], nested);
    client.close().await;
    served.await.unwrap().unwrap();
    assert_eq!(watch.stats(), AdapterStats::default());
}
