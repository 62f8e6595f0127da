//! A tool whose handler calls a tool of another tool server, through a `Runtime` and with its request's child
//! token: when the outer call is cancelled, the cascade stops the inner call on the other server too, with no
//! result sent by either.

mod support;

use std::{future::IntoFuture, net::SocketAddr};

use serde_json::json;
use tokio_util::sync::CancellationToken;
use tower::{service_fn, ServiceBuilder};
use tower_cancel::{BoxError, CancelStack, Request};
use tower_cancel_http::{
    auth::require_bearer,
    rap::{CallError, Notifier, Rap, Runtime, ToolDef, ToolServer, Tools},
};

use support::{
    eventually,
    rap::{end, Harness, Stack, TOKEN},
};

/// A runtime whose notifier reaches the tool servers at `bases`, with its callback endpoint served.
async fn runtime(bases: Vec<String>) -> Runtime {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let runtime = Runtime::new(
        format!("http://{addr}/callback"),
        Notifier::new(bases).bearer(TOKEN),
    )
    .bearer(TOKEN);
    let router = runtime.callback_router("/callback");
    tokio::spawn(async move { tower_cancel_http::serve(listener, router).await.unwrap() });
    runtime
}

/// The upstream tool server: its one tool, `delegate`, sleeps `ms` on `downstream` through `inner`, cancelled with
/// its own call (its request's child token). Served with the same bearer token.
async fn upstream(
    downstream: &Harness,
    inner: &Runtime,
    ms: u64,
) -> (ToolServer<Stack>, SocketAddr) {
    let delegate = {
        let (inner, endpoint) = (inner.clone(), downstream.url("/invoke"));
        service_fn(move |req: Request| {
            let (inner, endpoint) = (inner.clone(), endpoint.clone());
            async move {
                let token = req.context().expect("a context").child_token();
                let result = inner
                    .call(endpoint, "t-down", "c-down", "sleep", json!({ "ms": ms }))
                    .cancel_on(token)
                    .await?;
                Ok::<_, BoxError>(json!({ "downstream": result.text }))
            }
        })
    };
    let tools = Tools::new().tool(
        ToolDef::new(
            "delegate",
            "Sleeps on another tool server",
            json!({"type": "object"}),
        ),
        delegate,
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let toolset = tools.toolset("upstream", format!("http://{addr}/invoke"));
    let server = ToolServer::new(
        toolset,
        ServiceBuilder::new()
            .layer(CancelStack::new(Rap))
            .service(tools),
    );
    let router = server.clone().router_with(require_bearer(TOKEN));
    tokio::spawn(async move { tower_cancel_http::serve(listener, router).await.unwrap() });
    (server, addr)
}

#[tokio::test]
async fn cancelling_a_call_stops_the_call_its_handler_made_on_another_tool_server() {
    let downstream = Harness::start().await;
    let inner = runtime(vec![format!("http://{}", downstream.addr)]).await;
    let (upstream, addr) = upstream(&downstream, &inner, 60_000).await;

    let outer = runtime(vec![format!("http://{addr}")]).await;
    let token = CancellationToken::new();
    let call = tokio::spawn(
        outer
            .call(
                format!("http://{addr}/invoke"),
                "t-up",
                "c-up",
                "delegate",
                json!({}),
            )
            .cancel_on(token.clone())
            .into_future(),
    );
    downstream.probe.started(1).await;
    assert_eq!(upstream.in_flight(), 1);

    token.cancel();
    assert!(matches!(call.await.unwrap(), Err(CallError::Cancelled)));
    // The upstream server was told (its call stopped with reason Peer), its handler's child token fired, and its
    // runtime told the downstream server, whose handler stopped as a peer's cancel stops it.
    assert_eq!(downstream.probe.ended(1).await, [end("c-down", "peer")]);
    downstream.idle().await;
    eventually("the upstream call over", || upstream.in_flight() == 0).await;
    let (up, down) = (upstream.stats(), downstream.stats());
    assert_eq!((up.accepted, up.cancelled, up.delivered), (1, 1, 0));
    assert_eq!((down.accepted, down.cancelled, down.delivered), (1, 1, 0));
    assert_eq!(down.cancels, 1);
    // Neither runtime is left waiting, and no result reached either.
    assert_eq!((inner.pending(), outer.pending()), (0, 0));
    assert_eq!((inner.results(), outer.results()), ((0, 0), (0, 0)));
}

/// The cascade only cancels: an inner call that finishes is the outer call's result.
#[tokio::test]
async fn a_delegated_call_that_finishes_answers_through_both_servers() {
    let downstream = Harness::start().await;
    let inner = runtime(vec![format!("http://{}", downstream.addr)]).await;
    let (upstream, addr) = upstream(&downstream, &inner, 5).await;
    let outer = runtime(vec![format!("http://{addr}")]).await;

    let result = outer
        .call(
            format!("http://{addr}/invoke"),
            "t-up",
            "c-up",
            "delegate",
            json!({}),
        )
        .await
        .unwrap();
    assert_eq!(
        result.text.as_deref(),
        Some(r#"{"downstream":"{\"slept\":5}"}"#)
    );
    assert_eq!(
        downstream.probe.ended(1).await,
        [end("c-down", "completed")]
    );
    eventually("the upstream call over", || upstream.in_flight() == 0).await;
    assert_eq!(upstream.stats().cancelled, 0);
}
