//! Figure 8: MCP over Streamable HTTP, our endpoint (`tower_cancel_http::McpHttp`) and rmcp's side by side.
//!
//! # The servers
//!
//! Each serves one MCP endpoint at `/mcp` of an axum `Router` on a free port of 127.0.0.1, both revisions, each in
//! its default configuration, with one tool: `sleep {ms, tag}`, which marks `tag` started
//! ([`probe::mark_started`]), holds a [`Work`](crate::probe::Work) guard (its drop before the end records the
//! instant the handler stopped), sleeps `ms` milliseconds (none for 0) and answers one text item `"done"`.
//!
//! - ours ([`ours`]): `McpHttp` over `CancelStack::mcp()` and a plain handler; for the session revision with
//!   `cancel_on_disconnect_in_sessions(true)` (the revision's default is that a hang-up is not a cancel).
//! - rmcp's ([`crate::peers::rmcp_http`]): `StreamableHttpService` with its `LocalSessionManager`; its tool races
//!   the work against the request's `ct`, because rmcp fires that token and does not drop the handler.
//! - ours in plain JSON-RPC ([`jsonrpc`]): `JsonRpc` at `/rpc` over the same kind of stack, a method `sleep` in
//!   place of the tool: no MCP on top, so its rows show what the MCP endpoint's own work costs.
//! - jsonrpsee 0.26's server ([`jsonrpsee_server`]), alone and under `tower-cancel-jsonrpsee`, with the same
//!   method `sleep`: over HTTP beside our `JsonRpc`, and over WebSocket (one connection per client).
//!
//! # The workloads
//!
//! - [`disconnect_latency`]: one request at a time, each on a new connection written by hand (raw HTTP/1.1, or a
//!   WebSocket): the request written, the handler seen started, then `t0` and the connection dropped; the sample
//!   is the time from `t0` to the handler's guard dropped. This is the cancel of the stateless revision (`2026-07-28`: closing a
//!   request's stream cancels it), and of the session revision where the server opts in.
//! - [`throughput`]: a fixed number of concurrent clients share one keep-alive reqwest pool and make a fixed
//!   number of `sleep 0` calls in all; each client opens its own session first in the session revision. Over
//!   WebSocket each client has a connection of its own, one call at a time on it.

pub mod client;
pub mod jsonrpc;
pub mod jsonrpsee_server;
pub mod ours;

use std::{
    future::Future,
    io,
    net::SocketAddr,
    pin::Pin,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use crate::probe;

/// How long a request may take to start, or its handler to stop after the hang-up, before it counts as missed.
const PATIENCE: Duration = Duration::from_secs(5);

/// Misses in a row after which [`disconnect_latency`] gives up on a round (the rest counted missed).
const GIVE_UP_AFTER: usize = 3;

/// A `sleep` long enough that only a cancel ends it.
const HELD_MS: u64 = 3_600_000;

/// Which revision of MCP over Streamable HTTP a workload speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Speaks {
    /// `2025-11-25`: `initialize` opens a session (`Mcp-Session-Id`) that every later POST names.
    Sessions,
    /// `2026-07-28`: no session; each request carries its version and client in `_meta`, and headers that echo it.
    Stateless,
    /// Plain JSON-RPC (not MCP): a `sleep` request per POST to `/rpc`, its reply the response's body.
    JsonRpc,
    /// Plain JSON-RPC over a WebSocket at `/`: a `sleep` request per text message, its reply the next one.
    JsonRpcWs,
}

impl Speaks {
    /// The protocol version, as the `MCP-Protocol-Version` header gives it (none: plain JSON-RPC).
    pub fn version(self) -> Option<&'static str> {
        match self {
            Self::Sessions => Some("2025-11-25"),
            Self::Stateless => Some("2026-07-28"),
            Self::JsonRpc | Self::JsonRpcWs => None,
        }
    }

    /// The endpoint's path.
    pub fn path(self) -> &'static str {
        match self {
            Self::Sessions | Self::Stateless => "/mcp",
            Self::JsonRpc => "/rpc",
            Self::JsonRpcWs => "/",
        }
    }
}

/// A running server: where it listens, and (ours) how many of its requests are in flight.
pub struct Running {
    /// Its address on loopback; the endpoint is at [`Speaks::path`].
    pub addr: SocketAddr,
    /// Requests in flight now, where the server can say.
    pub in_flight: Option<Box<dyn Fn() -> usize + Send + Sync>>,
}

impl std::fmt::Debug for Running {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Running")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

/// Starts a server on the current runtime.
pub type Start = fn() -> Pin<Box<dyn Future<Output = io::Result<Running>> + Send>>;

/// A server of figure 8, in one revision.
#[derive(Clone, Copy, Debug)]
pub struct HttpTarget {
    /// The name in the tables.
    pub name: &'static str,
    /// The revision its clients speak.
    pub speaks: Speaks,
    /// Starts it.
    pub start: Start,
}

/// Our endpoint, stateless revision.
pub const OURS_STATELESS: HttpTarget = HttpTarget {
    name: "tower-cancel-http, 2026-07-28",
    speaks: Speaks::Stateless,
    start: ours::start,
};

/// Our endpoint, session revision, a hang-up a cancel (`cancel_on_disconnect_in_sessions(true)`).
pub const OURS_SESSIONS: HttpTarget = HttpTarget {
    name: "tower-cancel-http, 2025-11-25",
    speaks: Speaks::Sessions,
    start: ours::start,
};

/// rmcp's endpoint, stateless revision.
pub const RMCP_STATELESS: HttpTarget = HttpTarget {
    name: "rmcp 3.11, 2026-07-28",
    speaks: Speaks::Stateless,
    start: crate::peers::rmcp_http::start,
};

/// rmcp's endpoint, session revision (a hang-up is not a cancel there: it serves only [`throughput`]).
pub const RMCP_SESSIONS: HttpTarget = HttpTarget {
    name: "rmcp 3.11, 2025-11-25",
    speaks: Speaks::Sessions,
    start: crate::peers::rmcp_http::start,
};

/// Our plain JSON-RPC endpoint (`JsonRpc`), a hang-up a cancel (its default).
pub const JSONRPC: HttpTarget = HttpTarget {
    name: "tower-cancel-http, plain JSON-RPC (`JsonRpc`)",
    speaks: Speaks::JsonRpc,
    start: jsonrpc::start,
};

/// jsonrpsee 0.26 alone, over HTTP.
pub const JSONRPSEE_HTTP: HttpTarget = HttpTarget {
    name: "jsonrpsee 0.26, HTTP",
    speaks: Speaks::JsonRpc,
    start: jsonrpsee_server::start_alone,
};

/// jsonrpsee 0.26 under `tower-cancel-jsonrpsee`, over HTTP.
pub const JSONRPSEE_ADAPTED_HTTP: HttpTarget = HttpTarget {
    name: "jsonrpsee 0.26 + tower-cancel, HTTP",
    speaks: Speaks::JsonRpc,
    start: jsonrpsee_server::start_adapted,
};

/// jsonrpsee 0.26 alone, over WebSocket.
pub const JSONRPSEE_WS: HttpTarget = HttpTarget {
    name: "jsonrpsee 0.26, WebSocket",
    speaks: Speaks::JsonRpcWs,
    start: jsonrpsee_server::start_alone,
};

/// jsonrpsee 0.26 under `tower-cancel-jsonrpsee`, over WebSocket.
pub const JSONRPSEE_ADAPTED_WS: HttpTarget = HttpTarget {
    name: "jsonrpsee 0.26 + tower-cancel, WebSocket",
    speaks: Speaks::JsonRpcWs,
    start: jsonrpsee_server::start_adapted,
};

/// Tags unique over the whole process, so that no run reads another's stop (and none meets the small tags the
/// other workloads use: theirs are their request ids).
fn next_tag() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1 << 40);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Disconnect-to-stop latencies.
#[derive(Clone, Debug, Default)]
pub struct DisconnectLatency {
    /// One per request whose handler stopped: from the connection dropped to the guard dropped.
    pub samples: Vec<Duration>,
    /// Requests that did not start, or whose handler did not stop, within the patience.
    pub missed: usize,
    /// Requests still in flight at the end (ours only: rmcp cannot say).
    pub left_in_flight: Option<usize>,
}

/// `samples` requests, one at a time, each cancelled by dropping its connection once its handler runs.
pub async fn disconnect_latency(
    target: &HttpTarget,
    samples: usize,
) -> io::Result<DisconnectLatency> {
    let server = (target.start)().await?;
    let session = match target.speaks {
        Speaks::Sessions => Some(client::raw_session(server.addr).await?),
        Speaks::Stateless | Speaks::JsonRpc | Speaks::JsonRpcWs => None,
    };
    let mut result = DisconnectLatency {
        samples: Vec::with_capacity(samples),
        ..DisconnectLatency::default()
    };
    // A few uncounted first, so that the first samples do not pay for the first connections and allocations.
    let warm_up = 10.min(samples);
    // A server that never stops a handler on a hang-up would cost the patience per request: after this many
    // misses in a row, the rest of the round counts as missed without being tried.
    let mut missed_in_a_row = 0;
    for sample in 0..warm_up + samples {
        if missed_in_a_row == GIVE_UP_AFTER {
            result.missed += (warm_up + samples - sample).min(samples);
            break;
        }
        let tag = next_tag();
        let body = client::sleep_body(target.speaks, tag, HELD_MS, tag);
        let connection: Box<dyn Send> = match target.speaks {
            Speaks::JsonRpcWs => Box::new(client::ws_open_call(server.addr, &body).await?),
            _ => Box::new(
                client::raw_post(server.addr, target.speaks, session.as_deref(), &body).await?,
            ),
        };
        if !probe::wait_for_start(tag, PATIENCE).await {
            result.missed += usize::from(sample >= warm_up);
            missed_in_a_row += 1;
            continue;
        }
        let t0 = Instant::now();
        drop(connection);
        let stopped = probe::wait_for_stop(tag, PATIENCE).await;
        missed_in_a_row = if stopped.is_some() {
            0
        } else {
            missed_in_a_row + 1
        };
        if sample < warm_up {
            continue;
        }
        match stopped {
            Some(stopped) => result.samples.push(stopped.saturating_duration_since(t0)),
            None => result.missed += 1,
        }
    }
    if let Some(in_flight) = &server.in_flight {
        // The server settles a cancelled request on its own task: give it the moment it needs.
        let deadline = Instant::now() + PATIENCE;
        while in_flight() != 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        result.left_in_flight = Some(in_flight());
    }
    Ok(result)
}

/// Requests per second of `clients` concurrent clients making `total` `sleep 0` calls in all.
pub async fn throughput(target: &HttpTarget, clients: usize, total: u64) -> io::Result<f64> {
    let server = (target.start)().await?;
    if target.speaks == Speaks::JsonRpcWs {
        return ws_throughput(server.addr, clients, total).await;
    }
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(clients)
        .build()
        .map_err(io::Error::other)?;
    let url = Arc::new(format!("http://{}{}", server.addr, target.speaks.path()));
    let mut sessions = Vec::with_capacity(clients);
    for _ in 0..clients {
        sessions.push(match target.speaks {
            Speaks::Sessions => Some(client::session(&http, &url).await?),
            Speaks::Stateless | Speaks::JsonRpc | Speaks::JsonRpcWs => None,
        });
    }
    // Every call of one client is the same bytes: made once, outside the timing.
    let body = client::sleep_body(target.speaks, 0, 0, 0);
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(clients);
    for (index, session) in sessions.into_iter().enumerate() {
        let share = total / clients as u64 + u64::from((index as u64) < total % clients as u64);
        let (http, url, body) = (http.clone(), url.clone(), body.clone());
        let speaks = target.speaks;
        tasks.push(tokio::spawn(async move {
            for _ in 0..share {
                client::call(&http, &url, speaks, session.as_deref(), body.clone()).await?;
            }
            Ok::<_, io::Error>(())
        }));
    }
    for task in tasks {
        task.await.map_err(io::Error::other)??;
    }
    Ok(total as f64 / start.elapsed().as_secs_f64())
}

/// [`throughput`] over WebSocket: each client a connection of its own, one call at a time on it.
async fn ws_throughput(addr: SocketAddr, clients: usize, total: u64) -> io::Result<f64> {
    let mut sockets = Vec::with_capacity(clients);
    for _ in 0..clients {
        sockets.push(client::ws_connect(addr).await?);
    }
    let body: Arc<str> = client::sleep_body(Speaks::JsonRpcWs, 0, 0, 0).into();
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(clients);
    for (index, mut socket) in sockets.into_iter().enumerate() {
        let share = total / clients as u64 + u64::from((index as u64) < total % clients as u64);
        let body = body.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..share {
                client::ws_call(&mut socket, &body).await?;
            }
            Ok::<_, io::Error>(())
        }));
    }
    for task in tasks {
        task.await.map_err(io::Error::other)??;
    }
    Ok(total as f64 / start.elapsed().as_secs_f64())
}

/// The work of the `sleep` tool, the same for every server: marks `tag` started, then holds its guard for `ms`.
pub async fn sleep(ms: u64, tag: u64) {
    let guard = probe::Work::start(tag);
    probe::mark_started(tag);
    if ms > 0 {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    guard.done();
}

/// The arguments of the `sleep` tool.
#[derive(Clone, Copy, Debug, serde::Deserialize)]
pub struct SleepArgs {
    /// How long it sleeps, in milliseconds.
    #[serde(default)]
    pub ms: u64,
    /// Which request this is, for the probe.
    #[serde(default)]
    pub tag: u64,
}

/// Serve `app` on a free loopback port, on a task of the current runtime; its address.
///
/// Every accepted connection gets `TCP_NODELAY`, as a server of small replies should have: without it, a reply
/// written in several pieces (rmcp's SSE events) waits for the client's delayed ACK, 40 ms a request on Linux.
pub async fn serve(app: axum::Router) -> io::Result<SocketAddr> {
    use axum::serve::ListenerExt;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let listener = listener.tap_io(|stream| {
        let _ = stream.set_nodelay(true);
    });
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every server of figure 8 answers the workload's calls, and each row of the latency table sees its
    /// handlers stopped by a hang-up, nothing left in flight.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_server_serves_and_stops_on_hang_up() {
        for target in [
            OURS_STATELESS,
            RMCP_STATELESS,
            OURS_SESSIONS,
            RMCP_SESSIONS,
            JSONRPC,
            JSONRPSEE_HTTP,
            JSONRPSEE_ADAPTED_HTTP,
            JSONRPSEE_WS,
            JSONRPSEE_ADAPTED_WS,
        ] {
            let per_second = throughput(&target, 4, 40).await.unwrap();
            assert!(per_second > 0.0, "{}", target.name);
        }
        for target in [
            OURS_STATELESS,
            RMCP_STATELESS,
            OURS_SESSIONS,
            JSONRPC,
            JSONRPSEE_HTTP,
            JSONRPSEE_ADAPTED_HTTP,
            JSONRPSEE_WS,
            JSONRPSEE_ADAPTED_WS,
        ] {
            let result = disconnect_latency(&target, 3).await.unwrap();
            assert_eq!(
                (result.samples.len(), result.missed),
                (3, 0),
                "{}",
                target.name
            );
            assert!(
                result.left_in_flight.is_none_or(|n| n == 0),
                "{}",
                target.name
            );
        }
    }
}
