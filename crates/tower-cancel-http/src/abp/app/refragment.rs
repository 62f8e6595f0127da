//! The agent's frames cut into pieces on their way to the WebSocket library, so that a large message does not
//! leave a large read buffer behind.
//!
//! The library reads a frame into one buffer, reserved at the frame's length, and hands the message out as a
//! slice of it; once the message is dropped the buffer takes the whole allocation back and keeps it, at the size
//! of the largest frame, for as long as the socket is open (about 1 MiB per socket after one 1 MiB message). Cut
//! into frames of at most [`PIECE`] bytes, the message is gathered in a buffer of its own instead, which goes
//! with the message, and the read buffer stays at its usual size.
//!
//! Cutting a frame is allowed (RFC 6455 §5.4: a message may be fragmented anew where no extension is in use, and
//! the app accepts none): its first piece keeps its opcode without the FIN bit, the others are continuations, the
//! last has the frame's FIN. A client's payload is masked from its first byte with a key cycling every 4 bytes;
//! [`PIECE`] is a multiple of 4, so each piece is masked with the same key from its own first byte, and the
//! payload passes through unchanged. Control frames (at most 125 bytes) are never cut.

use std::{
    io,
    pin::Pin,
    task::{ready, Context, Poll},
};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The largest payload of a frame given to the library: a multiple of 4 (see the module docs), well under its
/// 128 KiB read buffer.
pub(super) const PIECE: u64 = 16 * 1024;

/// The longest frame header: 2 bytes, 8 of length, 4 of mask.
const MAX_HEADER: usize = 14;

/// `io`, whose incoming frames are cut into pieces of at most [`PIECE`] payload bytes. Writes pass through.
#[derive(Debug)]
pub(super) struct Refragment<IO> {
    io: IO,
    // A header being read from the agent.
    header: [u8; MAX_HEADER],
    header_len: usize,
    // A header to hand on before anything else, and how much of it is handed on.
    out: [u8; MAX_HEADER],
    out_len: usize,
    out_at: usize,
    // Payload bytes left in the piece being handed on, and in the frame after it.
    piece_left: u64,
    frame_left: u64,
    // The frame's FIN bit and mask key, for its later pieces.
    fin: bool,
    mask: Option<[u8; 4]>,
}

impl<IO> Refragment<IO> {
    pub(super) fn new(io: IO) -> Self {
        Self {
            io,
            header: [0; MAX_HEADER],
            header_len: 0,
            out: [0; MAX_HEADER],
            out_len: 0,
            out_at: 0,
            piece_left: 0,
            frame_left: 0,
            fin: false,
            mask: None,
        }
    }

    /// How many bytes the header being read has in all, as far as its first bytes tell.
    fn header_size(&self) -> usize {
        if self.header_len < 2 {
            return 2;
        }
        let length_bytes = match self.header[1] & 0x7F {
            126 => 2,
            127 => 8,
            _ => 0,
        };
        let mask_bytes = if self.header[1] & 0x80 != 0 { 4 } else { 0 };
        2 + length_bytes + mask_bytes
    }

    /// A whole header is read: hand it on as it is, or as the header of the frame's first piece.
    fn begin_frame(&mut self) {
        let (first, second) = (self.header[0], self.header[1]);
        let (len, at) = match second & 0x7F {
            126 => (
                u64::from(u16::from_be_bytes([self.header[2], self.header[3]])),
                4,
            ),
            127 => {
                let mut bytes = [0; 8];
                bytes.copy_from_slice(&self.header[2..10]);
                (u64::from_be_bytes(bytes), 10)
            }
            short => (u64::from(short), 2),
        };
        self.mask = (second & 0x80 != 0).then(|| {
            let mut key = [0; 4];
            key.copy_from_slice(&self.header[at..at + 4]);
            key
        });
        let control = first & 0x08 != 0;
        if control || len <= PIECE {
            self.out[..self.header_len].copy_from_slice(&self.header[..self.header_len]);
            self.out_len = self.header_len;
            self.out_at = 0;
            self.piece_left = len;
            self.frame_left = 0;
        } else {
            self.fin = first & 0x80 != 0;
            self.frame_left = len - PIECE;
            // The frame's opcode and reserved bits, without FIN: more pieces follow.
            self.piece(first & 0x7F, PIECE);
        }
        self.header_len = 0;
    }

    /// The piece after the one handed on, if the frame has more.
    fn next_piece(&mut self) {
        if self.frame_left == 0 {
            return;
        }
        let size = self.frame_left.min(PIECE);
        self.frame_left -= size;
        let last = self.frame_left == 0;
        // A continuation (opcode 0), final if it is the frame's last piece and the frame was final.
        self.piece(if last && self.fin { 0x80 } else { 0 }, size);
    }

    /// Hand on the header of a piece of `size` bytes whose first byte is `first`.
    fn piece(&mut self, first: u8, size: u64) {
        let masked = if self.mask.is_some() { 0x80 } else { 0 };
        self.out[0] = first;
        let mut len = 2;
        if size <= 125 {
            self.out[1] = masked | size as u8;
        } else {
            // At most PIECE, which fits in 16 bits.
            self.out[1] = masked | 126;
            self.out[2..4].copy_from_slice(&(size as u16).to_be_bytes());
            len = 4;
        }
        if let Some(key) = self.mask {
            self.out[len..len + 4].copy_from_slice(&key);
            len += 4;
        }
        self.out_len = len;
        self.out_at = 0;
        self.piece_left = size;
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Refragment<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        loop {
            if this.out_at < this.out_len {
                let n = buf.remaining().min(this.out_len - this.out_at);
                buf.put_slice(&this.out[this.out_at..this.out_at + n]);
                this.out_at += n;
                return Poll::Ready(Ok(()));
            }
            if this.piece_left > 0 {
                let want = this.piece_left.min(buf.remaining() as u64) as usize;
                // Read into `buf` itself, but no further than the piece: its next header comes from here.
                let mut limited = ReadBuf::new(buf.initialize_unfilled_to(want));
                ready!(Pin::new(&mut this.io).poll_read(cx, &mut limited))?;
                let n = limited.filled().len();
                buf.advance(n);
                this.piece_left -= n as u64;
                if this.piece_left == 0 {
                    this.next_piece();
                }
                // Zero bytes is the end of the stream, in the middle of a frame: the library says so.
                return Poll::Ready(Ok(()));
            }
            let size = this.header_size();
            if this.header_len < size {
                let mut rest = ReadBuf::new(&mut this.header[this.header_len..size]);
                ready!(Pin::new(&mut this.io).poll_read(cx, &mut rest))?;
                let n = rest.filled().len();
                if n == 0 {
                    // The end of the stream: hand on what there is of a header (the library sees a frame cut
                    // off), then the end.
                    if this.header_len == 0 {
                        return Poll::Ready(Ok(()));
                    }
                    this.out[..this.header_len].copy_from_slice(&this.header[..this.header_len]);
                    this.out_len = this.header_len;
                    this.out_at = 0;
                    this.header_len = 0;
                    continue;
                }
                this.header_len += n;
                continue;
            }
            this.begin_frame();
        }
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Refragment<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt;
    use tokio_tungstenite::tungstenite::{protocol::Role, Message, WebSocket};

    use super::*;

    /// A client's frame: final or not, masked with `key`.
    fn frame(first: u8, payload: &[u8], key: [u8; 4]) -> Vec<u8> {
        let mut out = vec![first];
        match payload.len() {
            len @ 0..=125 => out.push(0x80 | len as u8),
            len @ 126..=0xFFFF => {
                out.push(0x80 | 126);
                out.extend_from_slice(&(len as u16).to_be_bytes());
            }
            len => {
                out.push(0x80 | 127);
                out.extend_from_slice(&(len as u64).to_be_bytes());
            }
        }
        out.extend_from_slice(&key);
        out.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
        out
    }

    /// What the library makes of `wire` once it went through a [`Refragment`], read `step` bytes at a time.
    async fn messages(wire: Vec<u8>, step: usize) -> (Vec<Message>, usize) {
        let mut cut = Refragment::new(wire.as_slice());
        let (mut out, mut chunk) = (Vec::new(), vec![0; step]);
        loop {
            let n = cut.read(&mut chunk).await.unwrap();
            if n == 0 {
                break;
            }
            out.extend_from_slice(&chunk[..n]);
        }
        let largest = largest_frame(&out);
        let mut socket = WebSocket::from_raw_socket(std::io::Cursor::new(out), Role::Server, None);
        let mut read = Vec::new();
        while let Ok(message) = socket.read() {
            read.push(message);
        }
        (read, largest)
    }

    /// The largest payload of the frames in `wire`.
    fn largest_frame(mut wire: &[u8]) -> usize {
        let mut largest = 0;
        while wire.len() >= 2 {
            let (len, at) = match wire[1] & 0x7F {
                126 => (u16::from_be_bytes([wire[2], wire[3]]) as usize, 4),
                127 => (
                    u64::from_be_bytes(wire[2..10].try_into().unwrap()) as usize,
                    10,
                ),
                short => (short as usize, 2),
            };
            let at = at + if wire[1] & 0x80 != 0 { 4 } else { 0 };
            largest = largest.max(len);
            wire = &wire[at + len..];
        }
        largest
    }

    #[tokio::test]
    async fn a_large_message_arrives_whole_in_pieces_and_small_frames_as_they_are() {
        let large: String = (0..300_000)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        let key = [0x12, 0x34, 0x56, 0x78];
        let mut wire = frame(0x81, large.as_bytes(), key);
        wire.extend(frame(0x89, b"ping", key));
        wire.extend(frame(0x81, b"small", key));
        // A message fragmented by the agent, its first fragment large: cut too, still one message.
        wire.extend(frame(0x01, &vec![b'x'; 40_000], key));
        wire.extend(frame(0x80, b"end", key));
        for step in [1, 7, 4096, 1 << 20] {
            let (read, largest) = messages(wire.clone(), step).await;
            assert!(largest as u64 <= PIECE, "a frame of {largest} bytes");
            assert_eq!(read.len(), 4, "{step}");
            assert_eq!(read[0], Message::Text(large.clone().into()));
            assert_eq!(read[1], Message::Ping(b"ping".to_vec().into()));
            assert_eq!(read[2], Message::Text("small".into()));
            assert_eq!(
                read[3],
                Message::Text(format!("{}end", "x".repeat(40_000)).into())
            );
        }
    }
}
