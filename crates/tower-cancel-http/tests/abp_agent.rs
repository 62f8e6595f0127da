//! The agent side of ABP against a scripted app: each test's app plays a fixed script over a real WebSocket and
//! reports every envelope it received, so what the agent sends and what its caller sees are both checked.

use std::{
    future::{Future, IntoFuture},
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{
    extract::ws::{Message, WebSocket, WebSocketUpgrade},
    routing::get,
    Router,
};
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tower_cancel_http::abp::{
    wire::{
        AgentInfo, AppInfo, CancelResult, Capability, Envelope, Features, Initialize,
        InitializeResult, Progress,
    },
    Agent, AgentError,
};

/// A hang guard, never a measure: every step of these tests is due long before it.
const HANG: Duration = Duration::from_secs(10);

async fn within<T>(future: impl IntoFuture<Output = T>) -> T {
    tokio::time::timeout(HANG, future.into_future())
        .await
        .expect("hung")
}

fn agent_info() -> AgentInfo {
    AgentInfo {
        name: "test-agent".into(),
        version: "0.0.1".into(),
    }
}

fn session() -> InitializeResult {
    InitializeResult {
        session_id: "session-1".into(),
        protocol_version: "0.1".into(),
        app: AppInfo {
            id: "scripted".into(),
            name: "Scripted app".into(),
            version: "1.0.0".into(),
        },
        capabilities: vec![Capability {
            name: "sleep".into(),
            available: true,
        }],
        features: Features {
            notifications: false,
            progress: true,
            elicitation: false,
        },
    }
}

/// The app's side of one WebSocket: what it reads is also reported to the test.
struct Peer {
    socket: WebSocket,
    seen: mpsc::UnboundedSender<Envelope>,
}

impl Peer {
    /// The next envelope from the agent.
    async fn recv(&mut self) -> Envelope {
        loop {
            match self.socket.recv().await {
                Some(Ok(Message::Text(text))) => {
                    let envelope = Envelope::from_text(text.as_str()).expect("an envelope");
                    let _ = self.seen.send(envelope.clone());
                    return envelope;
                }
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => {
                    panic!("the agent closed the socket")
                }
                Some(Ok(_)) => {}
            }
        }
    }

    /// The next envelope from the agent, which must be of `kind`.
    async fn expect(&mut self, kind: &str) -> Envelope {
        let envelope = self.recv().await;
        assert_eq!(envelope.kind, kind, "{envelope:?}");
        envelope
    }

    async fn send_text(&mut self, text: impl Into<String>) {
        let text: String = text.into();
        self.socket
            .send(Message::Text(text.into()))
            .await
            .expect("sent");
    }

    async fn send(&mut self, kind: &str, id: Option<&str>, payload: Value) {
        let envelope = Envelope::new(kind, id.map(str::to_owned), payload);
        self.send_text(envelope.to_text()).await;
    }

    /// Answer `to` with an envelope of `kind`.
    async fn answer(&mut self, to: &Envelope, kind: &str, payload: Value) {
        self.send(kind, to.id.as_deref(), payload).await;
    }

    /// Answer the agent's `initialize` with [`session`].
    async fn initialize(&mut self) {
        let initialize = self.expect("initialize").await;
        let result = serde_json::to_value(session()).unwrap();
        self.answer(&initialize, "initialize-result", result).await;
    }

    /// Read (and report) whatever the agent still sends, until it closes the socket.
    async fn idle(mut self) {
        while let Some(Ok(message)) = self.socket.recv().await {
            if let Message::Text(text) = message {
                if let Ok(envelope) = Envelope::from_text(text.as_str()) {
                    let _ = self.seen.send(envelope);
                }
            }
        }
    }

    /// Close the socket, as an app that goes away does.
    async fn close(mut self) {
        let _ = self.socket.send(Message::Close(None)).await;
    }
}

/// What the scripted app received, in order.
struct Seen(mpsc::UnboundedReceiver<Envelope>);

impl Seen {
    /// The next envelope the app received, which must be of `kind`.
    async fn next(&mut self, kind: &str) -> Envelope {
        let envelope = within(self.0.recv()).await.expect("the app is gone");
        assert_eq!(envelope.kind, kind, "{envelope:?}");
        envelope
    }
}

/// Serve `script` as the app of the first WebSocket at `/abp` on a free loopback port; its URL.
async fn scripted_app<F, Fut>(script: F) -> (String, Seen)
where
    F: FnOnce(Peer) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let (seen, seen_by_test) = mpsc::unbounded_channel();
    let script = Arc::new(Mutex::new(Some(script)));
    let route = get(move |upgrade: WebSocketUpgrade| {
        let script = script.lock().unwrap().take();
        let seen = seen.clone();
        async move {
            upgrade.on_upgrade(move |socket| async move {
                if let Some(script) = script {
                    script(Peer { socket, seen }).await;
                }
            })
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = Router::new().route("/abp", route);
    tokio::spawn(async move { tower_cancel_http::serve(listener, router).await.unwrap() });
    (format!("ws://{addr}/abp"), Seen(seen_by_test))
}

/// An agent connected to an app that initializes the session and then plays `script`. Its grace is long: the
/// scripted app always answers, and no test waits for it to pass unless it sets a short one itself.
async fn start<F, Fut>(script: F) -> (Agent, Seen)
where
    F: FnOnce(Peer) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let (url, mut seen) = scripted_app(|mut peer| async move {
        peer.initialize().await;
        script(peer).await;
    })
    .await;
    let (agent, _session) = within(Agent::connect(&url, agent_info())).await.unwrap();
    seen.next("initialize").await;
    (agent.with_grace(HANG), seen)
}

fn call_id_of(call: &Envelope) -> String {
    call.payload["options"]["callId"]
        .as_str()
        .expect("options.callId")
        .to_owned()
}

fn cancelled_result(code: &str) -> Value {
    json!({"success": false, "cancelled": true, "error": {"code": code, "message": "stopped", "retryable": false}})
}

/// Answer every call with `{echo: params}`, forever.
async fn echo_calls(mut peer: Peer) {
    loop {
        let call = peer.expect("capabilities/call").await;
        let data = json!({"success": true, "data": {"echo": call.payload["params"]}});
        peer.answer(&call, "capabilities/call-result", data).await;
    }
}

#[tokio::test]
async fn connect_initializes_the_session_and_returns_the_apps_answer() {
    let (url, mut seen) = scripted_app(|mut peer| async move {
        peer.initialize().await;
        peer.idle().await;
    })
    .await;
    let (agent, initialized) = within(Agent::connect(&url, agent_info())).await.unwrap();
    assert_eq!(initialized, session());

    let initialize = seen.next("initialize").await;
    assert!(initialize.id.is_some());
    let payload: Initialize = initialize.payload_as().unwrap();
    assert_eq!(payload.agent, agent_info());
    assert_eq!(payload.protocol_version, "0.1");
    assert!(
        payload.features.progress,
        "the agent takes progress reports"
    );
    assert_eq!(agent.pending(), 0);
    assert!(!agent.is_closed());
}

#[tokio::test]
async fn an_initialize_the_app_refuses_fails_to_connect() {
    let (url, _seen) = scripted_app(|mut peer| async move {
        let initialize = peer.expect("initialize").await;
        let error =
            json!({"code": "UNSUPPORTED_VERSION", "message": "speak 9.9", "retryable": false});
        peer.answer(&initialize, "error", error).await;
        peer.idle().await;
    })
    .await;
    let refused = within(Agent::connect(&url, agent_info()))
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, AgentError::Refused(error) if error.code == "UNSUPPORTED_VERSION"),
        "{refused:?}"
    );
}

#[tokio::test]
async fn a_call_without_a_call_id_gets_a_uuid_and_a_given_one_is_sent_as_is() {
    let (agent, mut seen) = start(echo_calls).await;

    let generated = within(agent.call("echo", json!({"n": 1}))).await.unwrap();
    uuid::Uuid::parse_str(&generated.call_id).expect("a UUID");
    assert_eq!(
        call_id_of(&seen.next("capabilities/call").await),
        generated.call_id
    );
    assert!(generated.result.success);
    assert_eq!(generated.result.data, Some(json!({"echo": {"n": 1}})));
    assert_eq!(generated.cancel, None);

    let given = within(agent.call("echo", json!({"n": 2})).call_id("call-7"))
        .await
        .unwrap();
    assert_eq!(given.call_id, "call-7");
    let sent = seen.next("capabilities/call").await;
    assert_eq!(call_id_of(&sent), "call-7");
    assert_eq!(sent.payload["capability"], "echo");
    assert_eq!(given.result.data, Some(json!({"echo": {"n": 2}})));
    assert_eq!(agent.pending(), 0);
}

#[tokio::test]
async fn results_go_to_their_own_calls_whatever_their_order() {
    let (agent, _seen) = start(|mut peer| async move {
        let first = peer.expect("capabilities/call").await;
        let second = peer.expect("capabilities/call").await;
        for call in [&second, &first] {
            let data = json!({"success": true, "data": call.payload["params"]});
            peer.answer(call, "capabilities/call-result", data).await;
        }
        peer.idle().await;
    })
    .await;
    let (first, second) = within(async {
        tokio::join!(
            agent.call("echo", json!("first")).into_future(),
            agent.call("echo", json!("second")).into_future()
        )
    })
    .await;
    assert_eq!(first.unwrap().result.data, Some(json!("first")));
    assert_eq!(second.unwrap().result.data, Some(json!("second")));
}

#[tokio::test]
async fn a_cancelled_token_cancels_the_call_and_returns_the_acknowledgment_with_the_result() {
    let (agent, mut seen) = start(|mut peer| async move {
        let call = peer.expect("capabilities/call").await;
        let cancel = peer.expect("capabilities/cancel").await;
        let ack = json!({"callId": cancel.payload["callId"], "cancelled": true});
        peer.answer(&cancel, "capabilities/cancel-result", ack)
            .await;
        peer.answer(
            &call,
            "capabilities/call-result",
            cancelled_result("CANCELLED"),
        )
        .await;
        peer.idle().await;
    })
    .await;
    let token = CancellationToken::new();
    let call = tokio::spawn(
        agent
            .call("sleep", json!({"ms": 60_000}))
            .cancel_on(token.clone())
            .reason("the user pressed stop")
            .into_future(),
    );
    let sent = seen.next("capabilities/call").await;
    token.cancel();

    let outcome = within(call).await.unwrap().unwrap();
    let cancel = seen.next("capabilities/cancel").await;
    assert_eq!(
        cancel.payload,
        json!({"callId": call_id_of(&sent), "reason": "the user pressed stop"})
    );
    assert_eq!(
        outcome.cancel,
        Some(CancelResult {
            call_id: outcome.call_id.clone(),
            cancelled: true,
            reason: None,
            error: None,
        })
    );
    assert!(outcome.result.is_cancelled());
    assert_eq!(outcome.result.error.unwrap().code, "CANCELLED");
    assert_eq!(agent.pending(), 0);
    assert_eq!(agent.late_results(), 0);
}

#[tokio::test]
async fn a_call_that_completes_before_its_cancel_returns_its_result_and_the_refusal() {
    let (agent, mut seen) = start(|mut peer| async move {
        let call = peer.expect("capabilities/call").await;
        let cancel = peer.expect("capabilities/cancel").await;
        // The call had completed when the cancel came: its result went out first.
        let result = json!({"success": true, "data": {"done": true}});
        peer.answer(&call, "capabilities/call-result", result).await;
        let ack = json!({"callId": cancel.payload["callId"], "cancelled": false, "reason": "Operation already completed"});
        peer.answer(&cancel, "capabilities/cancel-result", ack).await;
        peer.idle().await;
    })
    .await;
    let token = CancellationToken::new();
    let call = tokio::spawn(
        agent
            .call("sleep", json!({}))
            .cancel_on(token.clone())
            .into_future(),
    );
    seen.next("capabilities/call").await;
    token.cancel();

    let outcome = within(call).await.unwrap().unwrap();
    assert!(outcome.result.success);
    assert!(!outcome.result.is_cancelled());
    assert_eq!(outcome.result.data, Some(json!({"done": true})));
    let ack = outcome.cancel.expect("the acknowledgment");
    assert!(!ack.cancelled);
    assert_eq!(ack.reason.as_deref(), Some("Operation already completed"));
    assert_eq!(agent.pending(), 0);
}

#[tokio::test]
async fn dropping_a_call_cancels_it_and_its_late_result_is_counted() {
    let (agent, mut seen) = start(|mut peer| async move {
        let call = peer.expect("capabilities/call").await;
        let cancel = peer.expect("capabilities/cancel").await;
        let ack = json!({"callId": cancel.payload["callId"], "cancelled": true});
        peer.answer(&cancel, "capabilities/cancel-result", ack)
            .await;
        peer.answer(
            &call,
            "capabilities/call-result",
            cancelled_result("CANCELLED"),
        )
        .await;
        echo_calls(peer).await;
    })
    .await;
    let mut call = agent
        .call("sleep", json!({}))
        .call_id("dropped")
        .into_future();
    tokio::select! {
        _ = &mut call => panic!("the app does not answer before the cancel"),
        sent = within(seen.0.recv()) => assert_eq!(sent.unwrap().kind, "capabilities/call"),
    }
    assert_eq!(agent.pending(), 1);

    // Dropped where no runtime runs: the cancel is queued without awaiting anything.
    std::thread::spawn(move || drop(call)).join().unwrap();
    assert_eq!(agent.pending(), 0, "a dropped call is not waited for");
    let cancel = seen.next("capabilities/cancel").await;
    assert_eq!(cancel.payload["callId"], "dropped");

    // The app answered the dropped call before this one: by its result, the late one was handled.
    let next = within(agent.call("echo", json!("after"))).await.unwrap();
    assert_eq!(next.result.data, Some(json!({"echo": "after"})));
    assert_eq!(agent.late_results(), 1);
    assert_eq!(agent.pending(), 0);
}

#[tokio::test]
async fn cancelling_an_unknown_call_returns_the_apps_acknowledgment() {
    let (agent, mut seen) = start(|mut peer| async move {
        let cancel = peer.expect("capabilities/cancel").await;
        let ack = json!({"callId": cancel.payload["callId"], "cancelled": false, "reason": "Operation not found"});
        peer.answer(&cancel, "capabilities/cancel-result", ack).await;
        peer.idle().await;
    })
    .await;
    let ack = within(agent.cancel("no-such-call", Some("tidying up".into())))
        .await
        .unwrap();
    assert_eq!(
        ack,
        CancelResult {
            call_id: "no-such-call".into(),
            cancelled: false,
            reason: Some("Operation not found".into()),
            error: None,
        }
    );
    let sent = seen.next("capabilities/cancel").await;
    assert_eq!(
        sent.payload,
        json!({"callId": "no-such-call", "reason": "tidying up"})
    );
    assert_eq!(agent.pending(), 0);
}

#[tokio::test]
async fn a_cancel_the_app_refuses_with_an_error_envelope_is_acknowledged_with_that_error() {
    let (agent, _seen) = start(|mut peer| async move {
        let cancel = peer.expect("capabilities/cancel").await;
        let error =
            json!({"code": "NOT_IMPLEMENTED", "message": "no cancels here", "retryable": false});
        peer.answer(&cancel, "error", error).await;
        peer.idle().await;
    })
    .await;
    let ack = within(agent.cancel("c1", None)).await.unwrap();
    assert_eq!(ack.call_id, "c1");
    assert!(!ack.cancelled);
    assert_eq!(ack.error.expect("the app's error").code, "NOT_IMPLEMENTED");
}

#[tokio::test]
async fn a_closed_connection_fails_what_waits_and_what_comes_after() {
    let (agent, mut seen) = start(|mut peer| async move {
        peer.expect("capabilities/call").await;
        peer.expect("capabilities/cancel").await;
        peer.close().await;
    })
    .await;
    let call = tokio::spawn(agent.call("sleep", json!({})).into_future());
    seen.next("capabilities/call").await;
    let canceller = agent.clone();
    let cancel = tokio::spawn(async move { canceller.cancel("elsewhere", None).await });
    seen.next("capabilities/cancel").await;

    assert_eq!(within(call).await.unwrap(), Err(AgentError::Closed));
    assert_eq!(within(cancel).await.unwrap(), Err(AgentError::Closed));
    assert_eq!(agent.pending(), 0);
    assert!(agent.is_closed());
    assert_eq!(
        within(agent.call("sleep", json!({}))).await,
        Err(AgentError::Closed)
    );
    assert_eq!(
        within(agent.cancel("any", None)).await,
        Err(AgentError::Closed)
    );
    assert_eq!(within(agent.shutdown()).await, Err(AgentError::Closed));
    assert_eq!(agent.pending(), 0);
}

#[tokio::test]
async fn garbage_from_the_app_is_ignored() {
    let (agent, _seen) = start(|mut peer| async move {
        for text in [
            "not JSON at all",
            "[1, 2, 3]",
            r#"{"payload": {}}"#,
            r#"{"type": "notification", "payload": {"hello": true}}"#,
            r#"{"type": "capabilities/call-result", "id": "nobody", "payload": {"success": true}}"#,
            r#"{"type": "capabilities/call-result", "payload": {"success": true}}"#,
            r#"{"type": "capabilities/cancel-result", "id": "nobody", "payload": {"callId": "x", "cancelled": true}}"#,
            r#"{"type": "progress", "payload": {"operationId": "nobody", "progress": 1}}"#,
            r#"{"type": "progress", "payload": "not an object"}"#,
            r#"{"type": "error", "id": "nobody", "payload": {"code": "X", "message": "y"}}"#,
            r#"{"type": "initialize-result", "id": "again", "payload": {}}"#,
        ] {
            peer.send_text(text).await;
        }
        let _ = peer.socket.send(Message::Binary(vec![0, 159, 146, 150].into())).await;
        echo_calls(peer).await;
    })
    .await;
    let outcome = within(agent.call("echo", json!("still here")))
        .await
        .unwrap();
    assert_eq!(outcome.result.data, Some(json!({"echo": "still here"})));
    assert_eq!(
        agent.late_results(),
        0,
        "answers to nothing are not late results"
    );
    assert_eq!(agent.pending(), 0);
    assert!(!agent.is_closed());
}

#[tokio::test]
async fn a_result_that_cannot_be_read_fails_its_call_only() {
    let (agent, _seen) = start(|mut peer| async move {
        let call = peer.expect("capabilities/call").await;
        peer.answer(
            &call,
            "capabilities/call-result",
            json!({"success": "maybe"}),
        )
        .await;
        echo_calls(peer).await;
    })
    .await;
    let unreadable = within(agent.call("echo", json!(1))).await.unwrap_err();
    assert!(
        matches!(unreadable, AgentError::Protocol(_)),
        "{unreadable:?}"
    );
    let next = within(agent.call("echo", json!(2))).await.unwrap();
    assert!(next.result.success);
}

#[tokio::test]
async fn a_timeout_is_sent_in_milliseconds_and_the_apps_timeout_is_reported() {
    let (agent, mut seen) = start(|mut peer| async move {
        let call = peer.expect("capabilities/call").await;
        // The app's timer expired: it cancelled the call itself.
        peer.answer(
            &call,
            "capabilities/call-result",
            cancelled_result("TIMEOUT"),
        )
        .await;
        peer.idle().await;
    })
    .await;
    let outcome = within(
        agent
            .call("sleep", json!({"ms": 60_000}))
            .timeout(Duration::from_millis(1500)),
    )
    .await
    .unwrap();
    assert_eq!(
        seen.next("capabilities/call").await.payload["options"]["timeout"],
        1500
    );
    assert!(outcome.result.is_cancelled());
    assert_eq!(outcome.result.error.unwrap().code, "TIMEOUT");
    assert_eq!(outcome.cancel, None, "the agent sent no cancel of its own");
    assert_eq!(agent.pending(), 0);
}

#[tokio::test]
async fn a_call_the_app_leaves_unanswered_past_its_timeout_is_cancelled_by_the_agent() {
    let (go_on, gone_on) = oneshot::channel::<()>();
    let (agent, mut seen) = start(|mut peer| async move {
        let call = peer.expect("capabilities/call").await;
        let cancel = peer.expect("capabilities/cancel").await;
        // Silent until the agent has given up, then answers both: the result comes too late.
        let _ = gone_on.await;
        let ack = json!({"callId": cancel.payload["callId"], "cancelled": true});
        peer.answer(&cancel, "capabilities/cancel-result", ack)
            .await;
        peer.answer(
            &call,
            "capabilities/call-result",
            cancelled_result("CANCELLED"),
        )
        .await;
        echo_calls(peer).await;
    })
    .await;
    let agent = agent.with_grace(Duration::from_millis(50));
    let gave_up = within(
        agent
            .call("sleep", json!({}))
            .timeout(Duration::from_millis(20)),
    )
    .await
    .unwrap_err();
    assert_eq!(gave_up, AgentError::TimedOut);
    assert_eq!(agent.pending(), 0);
    let sent = seen.next("capabilities/call").await;
    let cancel = seen.next("capabilities/cancel").await;
    assert_eq!(cancel.payload["callId"], call_id_of(&sent));

    go_on.send(()).unwrap();
    let agent = agent.with_grace(HANG);
    let next = within(agent.call("echo", json!("next"))).await.unwrap();
    assert!(next.result.success);
    assert_eq!(agent.late_results(), 1);
    assert_eq!(agent.pending(), 0);
}

#[tokio::test]
async fn progress_reaches_the_callback_of_its_call() {
    let (agent, mut seen) = start(|mut peer| async move {
        for _ in 0..2 {
            let call = peer.expect("capabilities/call").await;
            let token = call.payload["options"]["progressToken"].clone();
            for (operation, progress) in [(token.clone(), 1), (json!("someone-else"), 9), (token, 2)] {
                let report = json!({"operationId": operation, "progress": progress, "total": 3, "status": "working"});
                peer.send("progress", None, report).await;
            }
            let result = json!({"success": true, "data": "done"});
            peer.answer(&call, "capabilities/call-result", result).await;
        }
        peer.idle().await;
    })
    .await;
    let reports: Arc<Mutex<Vec<Progress>>> = Arc::default();
    let collected = reports.clone();
    let outcome = within(
        agent
            .call("report", json!({"steps": 3}))
            .progress_token(json!("tok-1"))
            .on_progress(move |report| collected.lock().unwrap().push(report)),
    )
    .await
    .unwrap();
    assert_eq!(outcome.result.data, Some(json!("done")));
    assert_eq!(
        seen.next("capabilities/call").await.payload["options"]["progressToken"],
        "tok-1"
    );
    let seen_reports: Vec<(Value, f64)> = reports
        .lock()
        .unwrap()
        .iter()
        .map(|report| (report.operation_id.clone(), report.progress))
        .collect();
    assert_eq!(seen_reports, [(json!("tok-1"), 1.0), (json!("tok-1"), 2.0)]);

    // Without a token of the caller's, the callId is the token.
    let reports: Arc<Mutex<Vec<Progress>>> = Arc::default();
    let collected = reports.clone();
    let outcome = within(
        agent
            .call("report", json!({"steps": 3}))
            .call_id("call-9")
            .on_progress(move |report| collected.lock().unwrap().push(report)),
    )
    .await
    .unwrap();
    assert!(outcome.result.success);
    assert_eq!(
        seen.next("capabilities/call").await.payload["options"]["progressToken"],
        "call-9"
    );
    assert_eq!(reports.lock().unwrap().len(), 2);
    assert_eq!(agent.pending(), 0);
}

#[tokio::test]
async fn shutdown_ends_the_session() {
    let (agent, mut seen) = start(|peer| async move {
        peer.idle().await;
    })
    .await;
    within(agent.shutdown()).await.unwrap();
    seen.next("shutdown").await;
    assert!(agent.is_closed());
    assert_eq!(
        within(agent.call("sleep", json!({}))).await,
        Err(AgentError::Closed)
    );
    assert_eq!(agent.pending(), 0);
}
