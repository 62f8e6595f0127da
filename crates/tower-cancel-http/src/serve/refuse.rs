//! The answer to a new connection when every open connection is busy: a fast 503 with `Retry-After`, then the
//! connection closed.

use std::{
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::Duration,
};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::limits::RETRY_AFTER_SECONDS;

/// How long a refused connection is kept to deliver its 503 (and read what the client sent meanwhile).
const LINGER: Duration = Duration::from_secs(1);

/// The most refused connections kept lingering at once; past it one is closed without an answer, so that
/// refusing never holds more than this many sockets.
const MAX_LINGERING: usize = 64;

const BODY: &str = "the server has too many connections open; retry later\n";

/// Refused connections lingering now.
#[derive(Debug, Default)]
pub(super) struct Refusals {
    lingering: Arc<AtomicUsize>,
}

impl Refusals {
    /// Answer `io` 503 and close it, on a task of its own.
    pub(super) fn refuse<I>(&self, io: I)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        if self.lingering.fetch_add(1, Ordering::AcqRel) >= MAX_LINGERING {
            self.lingering.fetch_sub(1, Ordering::AcqRel);
            return;
        }
        let lingering = Arc::clone(&self.lingering);
        tokio::spawn(async move {
            let _ = tokio::time::timeout(LINGER, answer(io)).await;
            lingering.fetch_sub(1, Ordering::AcqRel);
        });
    }
}

async fn answer<I: AsyncRead + AsyncWrite + Unpin>(mut io: I) -> std::io::Result<()> {
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\nretry-after: {RETRY_AFTER_SECONDS}\r\n\
         content-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{BODY}",
        BODY.len()
    );
    io.write_all(response.as_bytes()).await?;
    io.shutdown().await?;
    // Read what the client sent until it closes: a socket closed with unread data is reset, and a reset can
    // destroy the answer before the client reads it.
    let mut sink = [0; 1024];
    while io.read(&mut sink).await? > 0 {}
    Ok(())
}
