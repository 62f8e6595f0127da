//! The bytes of a connection, the same in both variants: `Content-Length` frames in, framed replies out through one
//! writer task.

use std::io;

use bytes::{Buf, BytesMut};
use tokio::{
    io::{AsyncWriteExt, BufWriter},
    sync::mpsc,
};
use tokio_util::codec::Decoder;

use crate::target::BoxWrite;

/// Write every queued frame, flushing when the queue runs dry.
pub(super) async fn write_loop(writer: BoxWrite, mut queue: mpsc::UnboundedReceiver<Vec<u8>>) {
    let mut writer = BufWriter::new(writer);
    while let Some(frame) = queue.recv().await {
        if writer.write_all(&frame).await.is_err() {
            return;
        }
        while let Ok(frame) = queue.try_recv() {
            if writer.write_all(&frame).await.is_err() {
                return;
            }
        }
        if writer.flush().await.is_err() {
            return;
        }
    }
}

/// `Content-Length` framing, hand-rolled: headers up to the blank line, then the body.
pub(super) struct LspCodec;

impl Decoder for LspCodec {
    type Item = BytesMut;
    type Error = io::Error;

    fn decode(&mut self, src: &mut BytesMut) -> io::Result<Option<BytesMut>> {
        let Some(end) = src.windows(4).position(|w| w == b"\r\n\r\n") else {
            return Ok(None);
        };
        let headers = std::str::from_utf8(&src[..end]).map_err(io::Error::other)?;
        let length = headers
            .lines()
            .find_map(|line| line.strip_prefix("Content-Length: "))
            .and_then(|n| n.trim().parse::<usize>().ok())
            .ok_or_else(|| io::Error::other("no Content-Length"))?;
        if src.len() < end + 4 + length {
            src.reserve(end + 4 + length - src.len());
            return Ok(None);
        }
        src.advance(end + 4);
        Ok(Some(src.split_to(length)))
    }
}
