//! Newline-delimited JSON: one message per line (ACP and MCP over stdio).

use std::io;

use bytes::{BufMut, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

use crate::frame::{FrameError, DEFAULT_MAX_FRAME_SIZE};

/// A codec for newline-delimited JSON.
///
/// Each line is a frame; a trailing `\r` is stripped and blank lines are skipped. A line longer than the limit is
/// discarded as it streams in (never buffered whole) and reported once as [`FrameError::TooLarge`]. Unlike
/// `LinesCodec` it does not require UTF-8 (the JSON parser reports that as a parse error, which is the reply the
/// protocol asks for) and it never ends the stream on a bad line.
#[derive(Clone, Debug)]
pub struct NdjsonCodec {
    max_frame_size: usize,
    // How far the buffer has been searched for a newline.
    searched: usize,
    // Inside a line that was too long: drop bytes up to the next newline.
    discarding: bool,
}

impl Default for NdjsonCodec {
    fn default() -> Self {
        Self::new()
    }
}

impl NdjsonCodec {
    /// A codec with the [default frame size limit](DEFAULT_MAX_FRAME_SIZE).
    pub fn new() -> Self {
        Self::with_max_frame_size(DEFAULT_MAX_FRAME_SIZE)
    }

    /// A codec accepting lines of up to `max_frame_size` bytes.
    pub fn with_max_frame_size(max_frame_size: usize) -> Self {
        Self {
            max_frame_size,
            searched: 0,
            discarding: false,
        }
    }
}

impl Decoder for NdjsonCodec {
    type Item = Result<BytesMut, FrameError>;
    type Error = io::Error;

    fn decode(&mut self, src: &mut BytesMut) -> io::Result<Option<Self::Item>> {
        loop {
            let newline = memchr::memchr(b'\n', &src[self.searched..]).map(|p| p + self.searched);
            let Some(at) = newline else {
                if self.discarding {
                    src.clear();
                    self.searched = 0;
                    return Ok(None);
                }
                // A `\r` at the end may be the start of the `\r\n` that ends a line of exactly the limit: it does not
                // count yet, so such a line is read whether or not its `\n` came in the same read.
                let line_len = src.len() - usize::from(src.last() == Some(&b'\r'));
                if line_len > self.max_frame_size {
                    src.clear();
                    self.searched = 0;
                    self.discarding = true;
                    return Ok(Some(Err(FrameError::TooLarge {
                        len: None,
                        limit: self.max_frame_size,
                    })));
                }
                self.searched = src.len();
                return Ok(None);
            };
            let mut line = src.split_to(at + 1);
            self.searched = 0;
            if std::mem::take(&mut self.discarding) {
                continue;
            }
            line.truncate(line.len() - 1);
            if line.last() == Some(&b'\r') {
                line.truncate(line.len() - 1);
            }
            if line.len() > self.max_frame_size {
                return Ok(Some(Err(FrameError::TooLarge {
                    len: Some(line.len()),
                    limit: self.max_frame_size,
                })));
            }
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            return Ok(Some(Ok(line)));
        }
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> io::Result<Option<Self::Item>> {
        if let Some(frame) = self.decode(src)? {
            return Ok(Some(frame));
        }
        // A last line without its newline is still a whole message.
        self.searched = 0;
        if std::mem::take(&mut self.discarding) || src.iter().all(u8::is_ascii_whitespace) {
            src.clear();
            return Ok(None);
        }
        let mut line = src.split();
        if line.last() == Some(&b'\r') {
            line.truncate(line.len() - 1);
        }
        Ok(Some(Ok(line)))
    }
}

impl Encoder<&[u8]> for NdjsonCodec {
    type Error = io::Error;

    fn encode(&mut self, payload: &[u8], dst: &mut BytesMut) -> io::Result<()> {
        // serde_json never writes a raw newline inside a document, so a line is always one whole message.
        dst.reserve(payload.len() + 1);
        dst.put_slice(payload);
        dst.put_u8(b'\n');
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode_test::{decode_all, decode_byte_by_byte};

    #[test]
    fn lines_are_frames() {
        let mut codec = NdjsonCodec::new();
        assert_eq!(
            decode_all(&mut codec, b"{\"a\":1}\r\n\n  \n{}\n[2]"),
            vec![
                Ok(b"{\"a\":1}".to_vec()),
                Ok(b"{}".to_vec()),
                Ok(b"[2]".to_vec())
            ]
        );
    }

    #[test]
    fn long_lines_are_discarded_and_reading_goes_on() {
        let mut codec = NdjsonCodec::with_max_frame_size(4);
        let mut buf = BytesMut::from(&b"0123456789"[..]);
        assert_eq!(
            codec.decode(&mut buf).unwrap(),
            Some(Err(FrameError::TooLarge {
                len: None,
                limit: 4
            }))
        );
        assert!(buf.is_empty(), "the long line is not buffered");
        buf.put_slice(b"more of it\n{}\n");
        assert_eq!(
            codec.decode(&mut buf).unwrap(),
            Some(Ok(BytesMut::from(&b"{}"[..])))
        );
        assert_eq!(
            decode_all(&mut codec, b"12345\n{}\n"),
            vec![
                Err(FrameError::TooLarge {
                    len: Some(5),
                    limit: 4
                }),
                Ok(b"{}".to_vec())
            ]
        );
    }

    #[test]
    fn a_line_at_the_limit_ending_in_crlf_is_read_however_the_bytes_arrive() {
        let bytes = b"1234\r\n{}\n5678\r";
        let expected = vec![
            Ok(b"1234".to_vec()),
            Ok(b"{}".to_vec()),
            Ok(b"5678".to_vec()),
        ];
        let mut codec = NdjsonCodec::with_max_frame_size(4);
        assert_eq!(decode_all(&mut codec, bytes), expected);
        // Found by fuzzing: the `\r` alone made the line one byte over the limit.
        let mut codec = NdjsonCodec::with_max_frame_size(4);
        assert_eq!(decode_byte_by_byte(&mut codec, bytes), expected);
    }

    #[test]
    fn invalid_utf8_is_passed_on_for_the_parser_to_reject() {
        let mut codec = NdjsonCodec::new();
        assert_eq!(
            decode_all(&mut codec, b"\xff\xfe\n"),
            vec![Ok(b"\xff\xfe".to_vec())]
        );
    }
}
