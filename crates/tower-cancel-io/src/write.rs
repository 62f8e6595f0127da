//! The writing half of a connection: everything the outbox queues, framed, in order.

use std::{io, time::Duration};

use futures_util::SinkExt;
use tokio::io::AsyncWrite;
use tokio_util::{
    codec::{Encoder, FramedWrite},
    sync::CancellationToken,
};
use tower_cancel::outbox::{OutboxReceiver, Outgoing};

use crate::signal::Signal;

/// The writing half of a connection, ready to run (on a task of its own, or beside the read loop).
pub(crate) struct WriteLoop<W, C> {
    pub(crate) sink: FramedWrite<W, C>,
    pub(crate) rx: OutboxReceiver,
    pub(crate) closing: CancellationToken,
    pub(crate) writer_gone: Signal,
    pub(crate) close_grace: Duration,
}

impl<W, C> WriteLoop<W, C>
where
    W: AsyncWrite + Unpin,
    C: for<'a> Encoder<&'a [u8], Error = io::Error>,
{
    /// Write what the outbox queues until `closing` (the read loop is done), then what is still queued, within
    /// `close_grace`: a peer that stopped reading cannot hold the connection open. `writer_gone` tells the read
    /// loop that the peer can no longer hear this side.
    pub(crate) async fn run(self) -> io::Result<()> {
        let Self {
            mut sink,
            mut rx,
            closing,
            writer_gone,
            close_grace,
        } = self;
        // Tells the read loop that the peer can no longer hear this side, however the writer ends: done, failed,
        // or unwinding from a panic (the read loop then ends too, and the panic reaches the `serve` future).
        let _gone = writer_gone.fire_on_drop();
        let cut_off = async {
            closing.cancelled().await;
            tokio::time::sleep(close_grace).await;
        };
        let result = tokio::select! {
            result = write_all(&mut sink, &mut rx, &closing) => result,
            () = cut_off => {
                tracing::warn!(?close_grace, "the peer is not reading: the last replies were not all written");
                Ok(())
            }
        };
        if let Err(error) = &result {
            tracing::debug!(%error, "writing to the connection failed");
        }
        // Closing the receiver makes later sends fail.
        rx.close();
        match result {
            // A peer that hung up is a disconnect, not a failure of this side.
            Err(error) if error.kind() == io::ErrorKind::BrokenPipe => Ok(()),
            other => other,
        }
    }
}

async fn write_all<W, C>(
    sink: &mut FramedWrite<W, C>,
    rx: &mut OutboxReceiver,
    closing: &CancellationToken,
) -> io::Result<()>
where
    W: AsyncWrite + Unpin,
    C: for<'a> Encoder<&'a [u8], Error = io::Error>,
{
    loop {
        let bytes = tokio::select! {
            biased;
            bytes = rx.recv() => bytes,
            // The read loop is done: write what is queued, then stop.
            () = closing.cancelled() => {
                while let Some(outgoing) = rx.try_recv() {
                    feed(sink, rx, outgoing).await?;
                }
                return sink.flush().await;
            }
        };
        let Some(outgoing) = bytes else {
            return Ok(());
        };
        feed(sink, rx, outgoing).await?;
        // Batch whatever else is ready into one flush.
        while let Some(outgoing) = rx.try_recv() {
            feed(sink, rx, outgoing).await?;
        }
        sink.flush().await?;
    }
}

/// Hand one message to the sink; its bytes stop counting against the outbox's bound once the sink took them (the
/// sink itself waits for the peer when its own buffer is full), and its buffer goes back to the outbox for the
/// next message.
async fn feed<W, C>(
    sink: &mut FramedWrite<W, C>,
    rx: &OutboxReceiver,
    outgoing: Outgoing,
) -> io::Result<()>
where
    W: AsyncWrite + Unpin,
    C: for<'a> Encoder<&'a [u8], Error = io::Error>,
{
    sink.feed(&outgoing[..]).await?;
    rx.written(&outgoing);
    rx.recycle(outgoing);
    Ok(())
}
