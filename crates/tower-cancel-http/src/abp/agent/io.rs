//! The agent's WebSocket: the `initialize` handshake, then a reader task that delivers what the app sends into
//! the [`Shared`] table and a writer task that sends what the agent queues.

use std::sync::Arc;

use futures_util::{
    stream::{SplitSink, SplitStream},
    SinkExt, StreamExt,
};
use tokio::{net::TcpStream, sync::mpsc, time::Instant};
use tokio_tungstenite::{tungstenite::Message, MaybeTlsStream, WebSocketStream};

use super::{table::Shared, AgentError, INITIALIZE_TIMEOUT};
use crate::abp::wire::{
    types, AgentInfo, CallResult, CancelResult, Envelope, ErrorBody, Features, Initialize,
    InitializeResult, Progress, PROTOCOL_VERSION,
};

pub(super) type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// What the agent's handle and calls queue for the writer.
#[derive(Debug)]
pub(super) enum Outgoing {
    /// One envelope's text.
    Text(String),
    /// Close the socket (after `shutdown`).
    Close,
}

/// Open the WebSocket at `url` and initialize the session, as envelope `envelope_id`.
pub(super) async fn open(
    url: &str,
    info: AgentInfo,
    envelope_id: String,
) -> Result<(Socket, InitializeResult), AgentError> {
    let (mut socket, _response) = tokio_tungstenite::connect_async(url)
        .await
        .map_err(|error| AgentError::Connect(error.to_string()))?;
    let initialize = Initialize {
        agent: info,
        protocol_version: PROTOCOL_VERSION.to_owned(),
        requested_capabilities: None,
        // Progress is routed to the calls that ask for it; notifications and elicitations have no taker here.
        features: Features {
            notifications: false,
            progress: true,
            elicitation: false,
        },
    };
    let envelope = Envelope::new(types::INITIALIZE, Some(envelope_id.clone()), initialize);
    socket
        .send(Message::text(envelope.to_text()))
        .await
        .map_err(|_| AgentError::Closed)?;
    let deadline = Instant::now() + INITIALIZE_TIMEOUT;
    match tokio::time::timeout_at(deadline, initialized(&mut socket, &envelope_id)).await {
        Ok(Ok(result)) => Ok((socket, result)),
        Ok(Err(error)) => Err(error),
        Err(_elapsed) => Err(AgentError::TimedOut),
    }
}

/// Read until the answer to the `initialize` sent as `envelope_id`.
async fn initialized(
    socket: &mut Socket,
    envelope_id: &str,
) -> Result<InitializeResult, AgentError> {
    loop {
        let text = match socket.next().await {
            Some(Ok(Message::Text(text))) => text,
            Some(Ok(Message::Close(_))) | Some(Err(_)) | None => return Err(AgentError::Closed),
            Some(Ok(_)) => continue,
        };
        let Ok(envelope) = Envelope::from_text(text.as_str()) else {
            tracing::debug!("a frame that is not an envelope before initialize-result: ignored");
            continue;
        };
        // Lenient on a missing id: an app has only one initialize to answer.
        let answers_ours = !matches!(envelope.id.as_deref(), Some(id) if id != envelope_id);
        match envelope.kind.as_str() {
            types::INITIALIZE_RESULT if answers_ours => {
                return envelope.payload_as().map_err(AgentError::Protocol);
            }
            types::ERROR if answers_ours => {
                return Err(match envelope.payload_as::<ErrorBody>() {
                    Ok(error) => AgentError::Refused(error),
                    Err(why) => AgentError::Protocol(why),
                });
            }
            other => tracing::debug!(
                kind = other,
                "an envelope before initialize-result: ignored"
            ),
        }
    }
}

/// Deliver what the app sends until the socket closes or [`Shared::stop`]; then fail whatever still waits.
pub(super) async fn read(mut frames: SplitStream<Socket>, shared: Arc<Shared>) {
    loop {
        let frame = tokio::select! {
            biased;
            () = shared.stop.cancelled() => break,
            frame = frames.next() => frame,
        };
        match frame {
            Some(Ok(Message::Text(text))) => receive(&shared, text.as_str()),
            Some(Ok(Message::Close(_))) => {
                // Reading on lets tungstenite send the closing handshake's answer; an app that then keeps the
                // TCP connection open is not waited for long.
                let _ = tokio::time::timeout(shared.grace(), frames.next()).await;
                break;
            }
            Some(Ok(Message::Binary(_))) => {
                tracing::debug!("a binary frame: ABP envelopes are text, ignored");
            }
            Some(Ok(_)) => {}
            Some(Err(error)) => {
                tracing::debug!(%error, "the ABP connection failed");
                break;
            }
            None => break,
        }
    }
    tracing::debug!("the ABP connection is closed");
    shared.close();
    shared.ended.cancel();
}

/// One envelope from the app, to whoever waits for it. Anything unreadable or unexpected is logged and ignored.
fn receive(shared: &Shared, text: &str) {
    let envelope = match Envelope::from_text(text) {
        Ok(envelope) => envelope,
        Err(why) => {
            tracing::debug!(%why, "a frame that is not an ABP envelope: ignored");
            return;
        }
    };
    let id = envelope.id.as_deref();
    match envelope.kind.as_str() {
        types::CALL_RESULT => shared.deliver_call(id, envelope.payload_as::<CallResult>()),
        types::CANCEL_RESULT => shared.deliver_cancel(id, envelope.payload_as::<CancelResult>()),
        types::ERROR => match envelope.payload_as::<ErrorBody>() {
            Ok(error) => shared.deliver_error(id, error),
            Err(why) => tracing::debug!(%why, "an unreadable error envelope: ignored"),
        },
        types::PROGRESS => match envelope.payload_as::<Progress>() {
            Ok(progress) => shared.deliver_progress(progress),
            Err(why) => tracing::debug!(%why, "an unreadable progress envelope: ignored"),
        },
        other => tracing::debug!(
            kind = other,
            "an envelope this agent does not take: ignored"
        ),
    }
}

/// Send what is queued until the agent is dropped, asks to close, or the connection ends.
pub(super) async fn write(
    mut sink: SplitSink<Socket, Message>,
    mut queue: mpsc::UnboundedReceiver<Outgoing>,
    shared: Arc<Shared>,
) {
    loop {
        let next = tokio::select! {
            () = shared.ended.cancelled() => return,
            next = queue.recv() => next,
        };
        let text = match next {
            Some(Outgoing::Text(text)) => text,
            // Asked to, or every handle of the agent is gone.
            Some(Outgoing::Close) | None => break,
        };
        if let Err(error) = sink.send(Message::text(text)).await {
            tracing::debug!(%error, "an ABP envelope could not be sent");
            shared.stop.cancel();
            return;
        }
    }
    // Starts the closing handshake; the app's answer ends the reader.
    let _ = sink.close().await;
    tokio::select! {
        () = shared.ended.cancelled() => {}
        () = tokio::time::sleep(shared.grace()) => shared.stop.cancel(),
    }
}
