//! The scenarios every dialect runs against a raw client, each dialect's test a call of one of them with its
//! stack and the frames that differ. Each asserts the exact replies, how the handler ended and why, and the
//! registry's counters, and ends with [`Conn::finish_counting`] (no reply left, `serve` returned, tables empty).

use tower_cancel::{CancelReason, CancelStack};

use crate::{Conn, Counts, Ended, Probe, Spoken};

fn hang(id: i64) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"hang"}}"#)
}

fn echo(id: i64) -> (String, String) {
    (
        format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"echo"}}"#),
        format!(r#"{{"jsonrpc":"2.0","id":{id},"result":null}}"#),
    )
}

/// The value of `field` in the JSON message `message`.
fn field(message: &str, field: &str) -> serde_json::Value {
    let value: serde_json::Value = serde_json::from_str(message).expect("a JSON message");
    value[field].clone()
}

/// [`cancel_while_running_with`] the dialect's plain cancel, the handler seeing no reason text.
pub async fn cancel_while_running<D: Spoken>(stack: CancelStack<D>) {
    cancel_while_running_with(stack, &D::cancel_frame(D::ID), CancelReason::peer(None)).await;
}

/// Request `ID` (`hang`) runs; the peer sends `cancel`: the handler is stopped, having seen `reason`, and the
/// dialect's answer is sent at once. Where the dialect sends none (MCP), a later request (`echo`) is answered
/// first, and that is the only reply. The cancel never reaches the service; the registry is empty.
pub async fn cancel_while_running_with<D: Spoken>(
    stack: CancelStack<D>,
    cancel: &str,
    reason: CancelReason,
) {
    let probe = Probe::new();
    let mut conn = Conn::ready(stack, &probe).await;
    let before = probe.ended().len();
    let id = D::ID;
    conn.send(&hang(id)).await;
    probe.wait_started(id).await;
    assert!(conn.registry().contains(&id.into()));

    conn.send(cancel).await;
    let later = match D::cancelled_frame(id) {
        Some(reply) => {
            conn.expect(&reply).await;
            0
        }
        None => {
            let next = id + 1;
            conn.send(&format!(
                r#"{{"jsonrpc":"2.0","id":{next},"method":"echo","params":{{"after":"cancel"}}}}"#
            ))
            .await;
            conn.expect(&format!(
                r#"{{"jsonrpc":"2.0","id":{next},"result":{{"after":"cancel"}}}}"#
            ))
            .await;
            1
        }
    };
    assert_eq!(
        probe.ended_of(id),
        Some(Ended::stopped(id, "hang", Some(reason)))
    );
    assert_eq!(probe.ended().len(), before + 1 + later as usize);
    assert!(
        conn.registry().is_empty(),
        "removed as soon as it is answered"
    );
    assert!(
        probe.notifications().is_empty(),
        "cancels never reach the service"
    );
    conn.finish_counting(Counts::new(1 + later, later, 1)).await;
}

/// The peer sends `cancel` for request `ID` before the request: the request is answered as cancelled (where
/// the dialect answers) without its handler ever running. `then`, a later request and its reply, shows the
/// remembered cancel was used up by `ID` and the connection goes on.
pub async fn a_cancel_before_its_request<D: Spoken>(
    stack: CancelStack<D>,
    cancel: &str,
    then: Option<(&str, &str)>,
) {
    let probe = Probe::new();
    let mut conn = Conn::ready(stack, &probe).await;
    let before = probe.started();
    let id = D::ID;
    conn.send(cancel).await;
    conn.send(&hang(id)).await;
    if let Some(reply) = D::cancelled_frame(id) {
        conn.expect(&reply).await;
    }
    if let Some((request, reply)) = then {
        conn.send(request).await;
        conn.expect(reply).await;
    }
    let then = u64::from(then.is_some());
    assert_eq!(
        probe.started(),
        before + then as usize,
        "request {id} never ran"
    );
    assert!(probe.started_list().iter().all(|s| s.method != "hang"));
    conn.finish_counting(Counts::new(1 + then, then, 1).early(1, 0))
        .await;
}

/// Request `ID` (`request`) is answered `reply`; then the peer cancels it, and a later `echo` is answered as
/// usual: nothing else is written. The registry cannot tell a late cancel from an early one: it remembers it
/// (bounded), in case a request `ID` is still on its way. Ids are never reused by a conforming peer, so that
/// memory is never used.
pub async fn a_cancel_after_completion<D: Spoken>(
    stack: CancelStack<D>,
    request: &str,
    reply: &str,
) {
    let probe = Probe::new();
    let mut conn = Conn::ready(stack, &probe).await;
    let before = probe.ended().len();
    let id = D::ID;
    conn.send(request).await;
    conn.expect(reply).await;
    conn.send(&D::cancel_frame(id)).await;
    let (echo, echoed) = echo(id + 1);
    conn.send(&echo).await;
    conn.expect(&echoed).await;
    let method = field(request, "method");
    assert_eq!(
        probe.ended()[before..],
        [
            Ended::finished(id, method.as_str().unwrap(), None),
            Ended::finished(id + 1, "echo", None)
        ]
    );
    conn.finish_counting(Counts::new(2, 2, 0).early(1, 1)).await;
}

/// Request `ID` (`hang`) runs; the peer sends the `bad` cancels (unknown ids, ids of the wrong type, the wrong
/// shapes) and an `echo`, all in one write: the next frame is the echo's reply, none of the cancels was answered
/// nor passed on, and `ID` still runs. Then two cancels of `ID` back to back: one answer (where the dialect
/// answers; a later `echo` is answered next). Remembered: the two unknown ids, and the second cancel of `ID`
/// (answered and removed by then).
pub async fn bad_and_duplicate_cancels_are_ignored<D: Spoken>(stack: CancelStack<D>, bad: &[&str]) {
    let probe = Probe::new();
    let mut conn = Conn::ready(stack, &probe).await;
    let id = D::ID;
    conn.send(&hang(id)).await;
    probe.wait_started(id).await;

    let next = id + 1;
    let echo_after = format!(
        r#"{{"jsonrpc":"2.0","id":{next},"method":"echo","params":"after the bad cancels"}}"#
    );
    let mut frames = bad.to_vec();
    frames.push(&echo_after);
    conn.send_together(&frames).await;
    conn.expect(&format!(
        r#"{{"jsonrpc":"2.0","id":{next},"result":"after the bad cancels"}}"#
    ))
    .await;
    assert!(conn.registry().contains(&id.into()));
    assert_eq!(probe.ended_of(id), None);
    assert!(
        probe.notifications().is_empty(),
        "malformed cancels are consumed, not passed on"
    );

    let cancel = D::cancel_frame(id);
    conn.send_together(&[&cancel, &cancel]).await;
    if let Some(reply) = D::cancelled_frame(id) {
        conn.expect(&reply).await;
    }
    let (echo, echoed) = echo(id + 2);
    conn.send(&echo).await;
    conn.expect(&echoed).await;
    assert_eq!(
        probe.ended_of(id),
        Some(Ended::stopped(id, "hang", Some(CancelReason::peer(None))))
    );
    conn.finish_counting(Counts::new(3, 2, 1).early(3, 3)).await;
}

/// `initialize` (`request`, whose handler takes a while) runs; the peer sends `cancel` for it: it is answered
/// in full and never counted. Its id is in flight, so the cancel is not remembered as an early one either: it
/// found its request, which cannot be cancelled.
pub async fn initialize_is_never_cancelled<D: Spoken>(
    stack: CancelStack<D>,
    request: &str,
    cancel: &str,
) {
    let probe = Probe::new();
    let mut conn = Conn::stack(stack, &probe);
    let id = field(request, "id").as_i64().expect("a number id");
    conn.send(request).await;
    probe.wait_started(id).await;
    conn.send(cancel).await;
    conn.expect(&format!(
        r#"{{"jsonrpc":"2.0","id":{id},"result":{{"capabilities":{{}}}}}}"#
    ))
    .await;
    assert_eq!(probe.ended(), [Ended::finished(id, "initialize", None)]);
    conn.finish_counting(Counts::default()).await;
}
