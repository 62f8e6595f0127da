//! The clients of figure 8: raw HTTP/1.1 over a `TcpStream` (to hang up at an exact moment), and reqwest (a
//! keep-alive pool, for throughput). Both send what an MCP client sends in each revision, or a plain JSON-RPC
//! client's request. And a WebSocket client (tokio-tungstenite), for plain JSON-RPC over WebSocket.

use std::{io, net::SocketAddr};

use serde_json::{json, Value};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

use super::Speaks;

/// Both content types, as the revisions ask a client to accept.
const ACCEPT: &str = "application/json, text/event-stream";

/// The stateless revision's `_meta`: the version and the client, in every request.
fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": { "name": "tower-cancel-bench", "version": "0" },
        "io.modelcontextprotocol/clientCapabilities": {},
    })
}

/// The body of a `tools/call` of `sleep {ms, tag}` with JSON-RPC id `id` (plain JSON-RPC: a `sleep` request).
pub fn sleep_body(speaks: Speaks, id: u64, ms: u64, tag: u64) -> String {
    if matches!(speaks, Speaks::JsonRpc | Speaks::JsonRpcWs) {
        let params = json!({ "ms": ms, "tag": tag });
        return json!({ "jsonrpc": "2.0", "id": id, "method": "sleep", "params": params })
            .to_string();
    }
    let mut params = json!({ "name": "sleep", "arguments": { "ms": ms, "tag": tag } });
    if speaks == Speaks::Stateless {
        params["_meta"] = meta();
    }
    json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params }).to_string()
}

fn initialize_body() -> String {
    json!({ "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": { "name": "tower-cancel-bench", "version": "0" },
    }})
    .to_string()
}

const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;

/// The headers of a POST in `speaks`, besides the body's own: the session, or the stateless revision's echoes
/// of the body (a `tools/call` of `sleep`).
fn headers(speaks: Speaks, session: Option<&str>, call: bool) -> Vec<(&'static str, String)> {
    let mut headers = vec![("content-type", "application/json".to_owned())];
    let Some(version) = speaks.version() else {
        // Plain JSON-RPC: the reply is JSON, never a stream.
        headers.push(("accept", "application/json".to_owned()));
        return headers;
    };
    headers.push(("accept", ACCEPT.to_owned()));
    if let Some(session) = session {
        headers.push(("mcp-session-id", session.to_owned()));
        headers.push(("mcp-protocol-version", version.to_owned()));
    }
    if speaks == Speaks::Stateless && call {
        headers.push(("mcp-protocol-version", version.to_owned()));
        headers.push(("mcp-method", "tools/call".to_owned()));
        headers.push(("mcp-name", "sleep".to_owned()));
    }
    headers
}

/// Write a raw HTTP/1.1 POST of `body` to the endpoint and give the open connection (drop it to hang up).
pub async fn raw_post(
    addr: SocketAddr,
    speaks: Speaks,
    session: Option<&str>,
    body: &str,
) -> io::Result<TcpStream> {
    let mut stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let mut head = format!(
        "POST {} HTTP/1.1\r\nhost: {addr}\r\ncontent-length: {}\r\n",
        speaks.path(),
        body.len()
    );
    for (name, value) in headers(speaks, session, true) {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    head.push_str(body);
    stream.write_all(head.as_bytes()).await?;
    Ok(stream)
}

/// Open a session over raw HTTP/1.1 (`initialize`, then `notifications/initialized`); its id.
pub async fn raw_session(addr: SocketAddr) -> io::Result<String> {
    let mut stream = TcpStream::connect(addr).await?;
    let body = initialize_body();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\naccept: {ACCEPT}\r\n\
         connection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    // Read the head only: the session id is a header (an SSE body may stay open).
    let mut read = Vec::new();
    let mut buf = [0u8; 4096];
    while !read.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        read.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&read);
    let session = text
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("mcp-session-id")
                .then(|| value.trim().to_owned())
        })
        .ok_or_else(|| io::Error::other(format!("initialize opened no session: {text}")))?;
    let http = reqwest::Client::new();
    let url = format!("http://{addr}/mcp");
    post(
        &http,
        &url,
        Speaks::Sessions,
        Some(&session),
        false,
        INITIALIZED.to_owned(),
    )
    .await?;
    Ok(session)
}

/// Open a session with reqwest; its id.
pub async fn session(http: &reqwest::Client, url: &str) -> io::Result<String> {
    let response = http
        .post(url)
        .header("content-type", "application/json")
        .header("accept", ACCEPT)
        .body(initialize_body())
        .send()
        .await
        .map_err(io::Error::other)?;
    let session = response
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .ok_or_else(|| io::Error::other("initialize opened no session"))?;
    // The whole body, so that the connection goes back to the pool.
    response.bytes().await.map_err(io::Error::other)?;
    post(
        http,
        url,
        Speaks::Sessions,
        Some(&session),
        false,
        INITIALIZED.to_owned(),
    )
    .await?;
    Ok(session)
}

/// Make one `tools/call` of `sleep 0` and check its answer.
pub async fn call(
    http: &reqwest::Client,
    url: &str,
    speaks: Speaks,
    session: Option<&str>,
    body: String,
) -> io::Result<()> {
    let answer = post(http, url, speaks, session, true, body).await?;
    // A JSON body or an SSE stream: either way the result's text is in it.
    if !answer.windows(6).any(|w| w == b"\"done\"") {
        return Err(io::Error::other(format!(
            "not the tool's answer: {}",
            String::from_utf8_lossy(&answer)
        )));
    }
    Ok(())
}

async fn post(
    http: &reqwest::Client,
    url: &str,
    speaks: Speaks,
    session: Option<&str>,
    call: bool,
    body: String,
) -> io::Result<bytes::Bytes> {
    let mut request = http.post(url).body(body);
    for (name, value) in headers(speaks, session, call) {
        request = request.header(name, value);
    }
    let response = request.send().await.map_err(io::Error::other)?;
    let status = response.status();
    let answer = response.bytes().await.map_err(io::Error::other)?;
    if !status.is_success() {
        return Err(io::Error::other(format!(
            "{status}: {}",
            String::from_utf8_lossy(&answer)
        )));
    }
    Ok(answer)
}

/// A WebSocket to a plain JSON-RPC server over it (jsonrpsee's, at `/`).
pub type WebSocket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<TcpStream>>;

/// Open a WebSocket to `ws://addr/`, Nagle off (as the HTTP clients have it).
pub async fn ws_connect(addr: SocketAddr) -> io::Result<WebSocket> {
    let url = format!("ws://{addr}/");
    let (socket, _) = tokio_tungstenite::connect_async_with_config(url, None, true)
        .await
        .map_err(io::Error::other)?;
    Ok(socket)
}

/// Make one `sleep 0` call on `socket` and check its answer (one call at a time: the next text is its reply).
pub async fn ws_call(socket: &mut WebSocket, body: &str) -> io::Result<()> {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;

    socket
        .send(Message::text(body))
        .await
        .map_err(io::Error::other)?;
    loop {
        match socket.next().await {
            Some(Ok(Message::Text(answer))) if answer.contains("\"done\"") => return Ok(()),
            Some(Ok(Message::Text(answer))) => {
                return Err(io::Error::other(format!(
                    "not the method's answer: {answer}"
                )))
            }
            // Pings and pongs: the socket's own traffic.
            Some(Ok(_)) => continue,
            Some(Err(e)) => return Err(io::Error::other(e)),
            None => return Err(io::ErrorKind::UnexpectedEof.into()),
        }
    }
}

/// Open a WebSocket, send `body` on it, and give the socket (drop it to close the connection, without a close
/// frame: the client is gone).
pub async fn ws_open_call(addr: SocketAddr, body: &str) -> io::Result<WebSocket> {
    use futures_util::SinkExt;

    let mut socket = ws_connect(addr).await?;
    socket
        .send(tokio_tungstenite::tungstenite::Message::text(body))
        .await
        .map_err(io::Error::other)?;
    Ok(socket)
}
