//! The in-memory pipe between async-lsp's main loop and the bridge: what the main loop writes, cut into its
//! `Content-Length` frames, and what it reads, the replies the bridge encodes for it.

use std::{
    io,
    pin::Pin,
    task::{ready, Context, Poll},
};

use async_lsp::ResponseError;
use futures::{AsyncRead, AsyncWrite};
use serde_json::Value;
use tokio::sync::mpsc;

/// A reply as the main loop reads it: `Content-Length` framed JSON.
pub(crate) fn encode(id: &Value, result: Result<Value, ResponseError>) -> Vec<u8> {
    let body = match result {
        Ok(value) => serde_json::json!({ "jsonrpc": "2.0", "id": id, "result": value }),
        Err(error) => serde_json::json!({ "jsonrpc": "2.0", "id": id, "error": error }),
    };
    let body = body.to_string();
    let mut framed = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    framed.extend_from_slice(body.as_bytes());
    framed
}

/// What the main loop writes: `Content-Length` frames, each read and forwarded as soon as it is whole. Never
/// pending, so the main loop writes each message before it takes the next event off its channel.
pub(crate) struct Output<F> {
    buffer: Vec<u8>,
    message: F,
}

impl<F: FnMut(&[u8])> Output<F> {
    /// Hands each message's body to `message`.
    pub(crate) fn new(message: F) -> Self {
        Self {
            buffer: Vec::new(),
            message,
        }
    }

    fn forward_frames(&mut self) {
        const END: &[u8] = b"\r\n\r\n";
        loop {
            let Some(head) = self.buffer.windows(END.len()).position(|w| w == END) else {
                return;
            };
            let Some(length) = content_length(&self.buffer[..head]) else {
                tracing::warn!(
                    "a frame without Content-Length from async-lsp's main loop, dropped"
                );
                self.buffer.clear();
                return;
            };
            let start = head + END.len();
            let Some(end) = start
                .checked_add(length)
                .filter(|&end| end <= self.buffer.len())
            else {
                return;
            };
            let body = self.buffer[start..end].to_vec();
            self.buffer.drain(..end);
            (self.message)(&body);
        }
    }
}

fn content_length(head: &[u8]) -> Option<usize> {
    let head = std::str::from_utf8(head).ok()?;
    head.split("\r\n").find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case("content-length")
            .then(|| value.trim().parse().ok())?
    })
}

impl<F: FnMut(&[u8]) + Unpin> AsyncWrite for Output<F> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.buffer.extend_from_slice(buf);
        self.forward_frames();
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_close(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// What the main loop reads: the client's replies to its requests, as [`encode`]d.
pub(crate) struct Input {
    replies: mpsc::UnboundedReceiver<Vec<u8>>,
    chunk: Vec<u8>,
    read: usize,
}

impl Input {
    pub(crate) fn new(replies: mpsc::UnboundedReceiver<Vec<u8>>) -> Self {
        Self {
            replies,
            chunk: Vec::new(),
            read: 0,
        }
    }
}

impl AsyncRead for Input {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        while this.read == this.chunk.len() {
            match ready!(this.replies.poll_recv(cx)) {
                Some(chunk) => {
                    this.chunk = chunk;
                    this.read = 0;
                }
                None => return Poll::Ready(Ok(0)),
            }
        }
        let n = buf.len().min(this.chunk.len() - this.read);
        buf[..n].copy_from_slice(&this.chunk[this.read..this.read + n]);
        this.read += n;
        Poll::Ready(Ok(n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_length_is_read_from_the_head() {
        assert_eq!(content_length(b"Content-Length: 12"), Some(12));
        assert_eq!(
            content_length(b"content-length:3\r\nContent-Type: x"),
            Some(3)
        );
        assert_eq!(content_length(b"Content-Type: x"), None);
    }
}
