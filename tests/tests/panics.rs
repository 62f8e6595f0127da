//! A panicking handler is answered -32603, its registry entry is removed at once, and the connection goes on; a
//! panic after a cancel won is answered as the cancel says.

use std::time::Duration;

use serde_json::{json, Value};
use tests::{ms, Conn, Counts, End, Ended, Probe, Spoken};
use tower::{service_fn, ServiceBuilder};
use tower_cancel::{
    dialect::{Lsp, Mcp},
    BoxError, CancelReason, CancelStack, Request,
};
use tower_cancel_io::{Framing, Server};

/// What LSP answers request 7 once a cancel settled it (MCP answers nothing).
const LSP_CANCELLED_7: &str =
    r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32800,"message":"Request cancelled"}}"#;

const PANICKED_3: &str = r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32603,"message":"Internal error: handler panicked"}}"#;

#[tokio::test(start_paused = true)]
async fn lsp_a_panicking_handler_gets_internal_error_and_the_connection_goes_on() {
    let probe = Probe::new();
    let mut conn = Conn::lsp(&probe);
    // A request in flight next to the one that panics.
    conn.send(r#"{"jsonrpc":"2.0","id":1,"method":"hang"}"#)
        .await;
    probe.wait_started(1).await;

    conn.send(r#"{"jsonrpc":"2.0","id":3,"method":"panic"}"#)
        .await;
    // The panic message stays in the server's log; the peer gets the generic text.
    conn.expect(PANICKED_3).await;
    assert!(!conn.registry().contains(&3.into()), "the entry is removed");
    assert_eq!(conn.registry().len(), 1);
    assert_eq!(probe.ended_of(3).unwrap().end, End::Stopped);

    // The same id can be used again (the entry is gone), other requests are served, and the request that was in
    // flight is still cancellable.
    conn.send(r#"{"jsonrpc":"2.0","id":3,"method":"echo","params":"again"}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":3,"result":"again"}"#)
        .await;
    conn.send(r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":1}}"#)
        .await;
    conn.expect(
        r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32800,"message":"Request cancelled"}}"#,
    )
    .await;
    assert_eq!(
        probe.ended_of(1),
        Some(Ended::stopped(1, "hang", Some(CancelReason::peer(None))))
    );

    // The panic is the handler's outcome (answered -32603), so the panicked request counts as completed.
    conn.finish_counting(Counts::new(3, 2, 1)).await;
}

#[tokio::test(start_paused = true)]
async fn mcp_a_panicking_handler_gets_internal_error_too() {
    let probe = Probe::new();
    let mut conn = Conn::mcp(&probe);
    conn.send(r#"{"jsonrpc":"2.0","id":3,"method":"panic"}"#)
        .await;
    conn.expect(PANICKED_3).await;
    assert!(conn.registry().is_empty());
    conn.send(r#"{"jsonrpc":"2.0","id":4,"method":"echo"}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":4,"result":null}"#)
        .await;
    conn.finish_counting(Counts::new(2, 2, 0)).await;
}

#[tokio::test(start_paused = true)]
async fn a_panicking_initialize_gets_internal_error_and_initializes_nothing() {
    // `initialize` is never registered (never cancellable); its panic is caught all the same, and in the ACP
    // draft a failed initialize leaves the session uninitialized.
    let probe = Probe::new();
    let mut conn = Conn::acp_draft(&probe);
    conn.send(r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"panic":true}}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":0,"error":{"code":-32603,"message":"Internal error: handler panicked"}}"#)
        .await;
    assert!(!conn.session().is_initialized());
    conn.send(r#"{"jsonrpc":"2.0","id":1,"method":"initialize"}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":1,"result":{"capabilities":{}}}"#)
        .await;
    assert!(conn.session().is_initialized());
    conn.finish_counting(Counts::default()).await;
}

#[tokio::test(start_paused = true)]
async fn a_panicking_notification_handler_gets_no_reply_and_the_connection_goes_on() {
    let probe = Probe::new();
    let mut conn = Conn::lsp(&probe);
    conn.send(r#"{"jsonrpc":"2.0","method":"panic"}"#).await;
    conn.send(r#"{"jsonrpc":"2.0","id":4,"method":"echo"}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":4,"result":null}"#)
        .await;
    conn.finish_counting(Counts::new(1, 1, 0)).await;
}

/// A handler that waits for its request to be cancelled, then panics while winding down.
fn panics_after_cancel<D: Spoken>(stack: CancelStack<D>) -> Conn {
    let service = ServiceBuilder::new()
        .layer(stack.cooperative(Duration::from_secs(5)))
        .service(service_fn(|req: Request| async move {
            if req.method() == "work" {
                let ctx = req.context().cloned().expect("behind the stack");
                ctx.cancelled().await;
                panic!("cleanup failed while winding down");
            }
            Ok::<Value, BoxError>(json!("ok"))
        }));
    Conn::start(Server::new(service), D::FRAMING)
}

/// Request 7 (`work`) runs; after a round trip (it has been read, registered and polled) the peer cancels it: the
/// replies the server writes for it before the next round trip's. Then the connection closes, its counters checked.
async fn replies_to_7_after_the_peers_cancel<D: Spoken>(mut conn: Conn) -> Vec<String> {
    conn.send(r#"{"jsonrpc":"2.0","id":7,"method":"work"}"#)
        .await;
    conn.send(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":1,"result":"ok"}"#)
        .await;
    conn.send(&D::cancel_frame(7)).await;
    let replies = conn
        .replies_until(
            r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":2,"result":"ok"}"#,
        )
        .await;
    conn.finish_counting(Counts::new(3, 2, 1)).await;
    replies
}

/// Cooperative mode: the handler panics after the peer's cancel. The cancel settled the request first, so its
/// answer is the cancel's: nothing at all in MCP, -32800 in LSP (never -32603).
#[tokio::test(start_paused = true)]
async fn a_handler_panicking_after_the_peers_cancel_is_answered_as_cancelled() {
    let mcp = replies_to_7_after_the_peers_cancel::<Mcp>(panics_after_cancel(CancelStack::mcp()));
    assert_eq!(mcp.await, Vec::<String>::new());
    let lsp = replies_to_7_after_the_peers_cancel::<Lsp>(panics_after_cancel(CancelStack::lsp()));
    assert_eq!(lsp.await, [LSP_CANCELLED_7]);
}

/// Abort mode, the race a panic on one thread can lose to a cancel on another, made deterministic: the handler's
/// request is cancelled by its peer (through its connection, as the driver delivers a cancel) and then the
/// handler panics in the same poll. The cancel won: MCP sends nothing, LSP -32800.
#[tokio::test(start_paused = true)]
async fn a_panic_that_loses_the_race_to_a_cancel_is_answered_as_cancelled() {
    async fn served<D: Spoken>(stack: CancelStack<D>) -> Vec<String> {
        let service =
            ServiceBuilder::new()
                .layer(stack)
                .service(service_fn(|req: Request| async move {
                    if req.method() == "work" {
                        let id = req.id().expect("a request").clone();
                        let connection = req.connection().expect("over a connection");
                        connection.cancel(&id, CancelReason::peer(Some("user".into())));
                        panic!("after the cancel");
                    }
                    Ok::<Value, BoxError>(json!("ok"))
                }));
        let mut conn = Conn::start(Server::new(service), D::FRAMING);
        conn.send(r#"{"jsonrpc":"2.0","id":7,"method":"work"}"#)
            .await;
        let replies = conn
            .replies_until(
                r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#,
                r#"{"jsonrpc":"2.0","id":2,"result":"ok"}"#,
            )
            .await;
        conn.finish_counting(Counts::new(2, 1, 1)).await;
        replies
    }
    assert_eq!(served(CancelStack::mcp()).await, Vec::<String>::new());
    assert_eq!(served(CancelStack::lsp()).await, [LSP_CANCELLED_7]);
}

/// A panic in the handler of replies the connection has no peer for is logged; the connection goes on.
#[tokio::test(start_paused = true)]
async fn a_panicking_response_handler_does_not_end_the_connection() {
    let probe = Probe::new();
    let service = ServiceBuilder::new()
        .layer(CancelStack::lsp())
        .service(probe.service());
    let server = Server::new(service).on_response(|_| panic!("the response handler failed"));
    let mut conn = Conn::start(server, Framing::ContentLength);
    conn.send(r#"{"jsonrpc":"2.0","id":99,"result":"a reply to nothing"}"#)
        .await;
    conn.send(r#"{"jsonrpc":"2.0","id":4,"method":"echo"}"#)
        .await;
    conn.expect(r#"{"jsonrpc":"2.0","id":4,"result":null}"#)
        .await;
    conn.finish_counting(Counts::new(1, 1, 0)).await;
}

/// Panics in its drop: a handler whose destructor fails.
struct PanicsOnDrop;

impl Drop for PanicsOnDrop {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            panic!("a handler's destructor failed");
        }
    }
}

/// A handler that answers `ping` and never answers anything else, panicking when it is dropped.
async fn hangs_and_panics_on_drop(req: Request) -> Result<Value, BoxError> {
    if req.method() == "ping" {
        return Ok(json!("ok"));
    }
    let _guard = PanicsOnDrop;
    std::future::pending().await
}

/// [`hangs_and_panics_on_drop`] behind `stack`.
fn panics_on_drop<D: Spoken>(stack: CancelStack<D>) -> Conn {
    let service = ServiceBuilder::new()
        .layer(stack)
        .service(service_fn(hangs_and_panics_on_drop));
    Conn::start(Server::new(service), D::FRAMING)
}

/// The cancel won before the handler was dropped: its destructor's panic changes nothing (MCP: no reply; LSP:
/// -32800), and the connection goes on.
#[tokio::test(start_paused = true)]
async fn a_handler_whose_drop_panics_after_a_cancel_is_answered_as_cancelled() {
    let mcp = replies_to_7_after_the_peers_cancel::<Mcp>(panics_on_drop(CancelStack::mcp()));
    assert_eq!(mcp.await, Vec::<String>::new());
    let lsp = replies_to_7_after_the_peers_cancel::<Lsp>(panics_on_drop(CancelStack::lsp()));
    assert_eq!(lsp.await, [LSP_CANCELLED_7]);
}

/// `initialize` cannot be cancelled, so it is dropped after the close grace; its destructor's panic does not make
/// `serve` panic (the harness's `finish` checks that `serve` returned `Ok`).
#[tokio::test(start_paused = true)]
async fn an_initialize_whose_drop_panics_after_the_close_grace_leaves_serve_ok() {
    let service = ServiceBuilder::new()
        .layer(CancelStack::lsp())
        .service(service_fn(hangs_and_panics_on_drop));
    let mut conn = Conn::start(
        Server::new(service).close_grace(ms(100)),
        Framing::ContentLength,
    );
    conn.send(r#"{"jsonrpc":"2.0","id":0,"method":"initialize"}"#)
        .await;
    tokio::time::sleep(ms(10)).await;
    conn.finish_quiet().await;
}
