//! LSP's framing: `Content-Length: N\r\n\r\n` and N bytes of UTF-8 JSON.

use std::{io, sync::LazyLock};

use bytes::{Buf, BufMut, BytesMut};
use memchr::memmem::Finder;
use tokio_util::codec::{Decoder, Encoder};

use crate::frame::{FrameError, DEFAULT_MAX_FRAME_SIZE};

/// The longest header block accepted; the LSP headers are two short lines.
const MAX_HEADER_SIZE: usize = 8 * 1024;

/// A codec for `Content-Length` framing (LSP, and any JSON-RPC over a byte stream in that style).
///
/// Decoding yields each frame's payload, or a [`FrameError`] for a frame that was skipped: too large (its body is
/// discarded as it streams in, never buffered), or a header block that cannot be read. An optional
/// `Content-Type` header is accepted and ignored, as are unknown headers.
///
/// After a header block that cannot be read, reading resumes at the next `Content-Length` inside it, if any: bytes
/// before a header (the rest of a body whose length was announced too small, garbage between frames) cost one
/// error, not every frame that follows.
#[derive(Clone, Debug)]
pub struct ContentLengthCodec {
    max_frame_size: usize,
    state: State,
    // How far the current header block has been searched for its end, so a slow sender costs O(n) overall.
    searched: usize,
}

#[derive(Clone, Copy, Debug)]
enum State {
    Head,
    Body(usize),
    Skip(usize),
}

impl Default for ContentLengthCodec {
    fn default() -> Self {
        Self::new()
    }
}

impl ContentLengthCodec {
    /// A codec with the [default frame size limit](DEFAULT_MAX_FRAME_SIZE).
    pub fn new() -> Self {
        Self::with_max_frame_size(DEFAULT_MAX_FRAME_SIZE)
    }

    /// A codec accepting frames of up to `max_frame_size` bytes.
    pub fn with_max_frame_size(max_frame_size: usize) -> Self {
        Self {
            max_frame_size,
            state: State::Head,
            searched: 0,
        }
    }

    fn parse_head(head: &[u8]) -> Result<usize, FrameError> {
        let head = std::str::from_utf8(head)
            .map_err(|_| FrameError::InvalidHeader("header is not UTF-8".into()))?;
        let mut length = None;
        for line in crlf_lines(head) {
            let Some((name, value)) = line.split_once(':') else {
                return Err(FrameError::InvalidHeader(format!(
                    "malformed header line {line:?}"
                )));
            };
            if trim(name).eq_ignore_ascii_case("content-length") {
                let value = trim(value);
                length = Some(value.parse::<usize>().map_err(|_| {
                    FrameError::InvalidHeader(format!("invalid Content-Length {value:?}"))
                })?);
            }
        }
        length.ok_or_else(|| FrameError::InvalidHeader("missing Content-Length".into()))
    }
}

/// Where the header block that starts `bytes` ends (its blank line), if it does. The searcher is built once: a
/// `memmem::find` builds one for every frame.
fn header_end(bytes: &[u8]) -> Option<usize> {
    static TERMINATOR: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\r\n\r\n"));
    TERMINATOR.find(bytes)
}

/// The header block that starts `bytes`, if it is exactly `Content-Length: N\r\n\r\n` (what LSP clients send,
/// and every frame this codec encodes): where it ends (its blank line) and N, read with a look at each byte once.
/// `None` for anything else (other headers, another spelling, spaces, a block not all here yet, an N that does not
/// fit), which the general path reads; for a block this reads, the general path finds the same end and length.
fn canonical_head(bytes: &[u8]) -> Option<(usize, usize)> {
    const NAME: &[u8] = b"Content-Length: ";
    // A `usize` has at most 20 digits: a longer run (leading zeros, or too large) is left to the general path.
    const MAX_DIGITS: usize = 20;
    let rest = bytes.strip_prefix(NAME)?;
    let digits = rest
        .iter()
        .take(MAX_DIGITS)
        .take_while(|b| b.is_ascii_digit())
        .count();
    if digits == 0 || rest.get(digits..digits + 4)? != b"\r\n\r\n" {
        return None;
    }
    let len = rest[..digits].iter().try_fold(0_usize, |len, digit| {
        len.checked_mul(10)?.checked_add(usize::from(digit - b'0'))
    })?;
    Some((NAME.len() + digits, len))
}

/// The lines of a header block, split at each `\r\n` (a lone `\r` or `\n` stays inside its line), as
/// `head.split("\r\n")` gives them without building a string searcher for every frame.
fn crlf_lines(head: &str) -> impl Iterator<Item = &str> {
    let mut rest = Some(head);
    std::iter::from_fn(move || {
        let text = rest?;
        let bytes = text.as_bytes();
        let mut from = 0;
        while let Some(at) = memchr::memchr(b'\r', &bytes[from..]).map(|p| p + from) {
            if bytes.get(at + 1) == Some(&b'\n') {
                // Both are ASCII: the cuts fall on character boundaries.
                rest = Some(&text[at + 2..]);
                return Some(&text[..at]);
            }
            from = at + 1;
        }
        rest = None;
        Some(text)
    })
}

/// `text.trim()`, without decoding characters where the ends are ASCII (a header always is, but `trim` steps
/// through it as Unicode): ASCII whitespace as `char::is_whitespace` has it (vertical tab included) is cut byte by
/// byte, and only an end that is not ASCII is left to `trim`.
fn trim(text: &str) -> &str {
    let is_space = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | b'\x0B' | b'\x0C' | b'\r');
    let bytes = text.as_bytes();
    let start = bytes
        .iter()
        .position(|b| !is_space(b))
        .unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|b| !is_space(b))
        .map_or(start, |p| p + 1);
    let trimmed = &text[start..end];
    match (trimmed.as_bytes().first(), trimmed.as_bytes().last()) {
        (Some(first), Some(last)) if !first.is_ascii() || !last.is_ascii() => trimmed.trim(),
        _ => trimmed,
    }
}

impl Decoder for ContentLengthCodec {
    type Item = Result<BytesMut, FrameError>;
    type Error = io::Error;

    fn decode(&mut self, src: &mut BytesMut) -> io::Result<Option<Self::Item>> {
        loop {
            match self.state {
                State::Head => {
                    // Blank lines between frames are tolerated.
                    while src.starts_with(b"\r\n") {
                        src.advance(2);
                        self.searched = 0;
                    }
                    // The header block every peer sends is read without searching or the general parser; the
                    // general path below reads it the same way (see `canonical_head`).
                    let (at, parsed) = if let Some((at, len)) = canonical_head(src) {
                        (at, Ok(len))
                    } else {
                        // Only the first MAX_HEADER_SIZE + 1 bytes are searched, however many have arrived: a
                        // header block is cut at the same byte whether it came in one read or in many.
                        let window = src.len().min(MAX_HEADER_SIZE + 1);
                        let from = self.searched.saturating_sub(3);
                        let Some(at) = header_end(&src[from..window]).map(|p| p + from) else {
                            if src.len() > MAX_HEADER_SIZE {
                                // Keep the last 3 bytes searched: they may be the start of a terminator of a header
                                // that follows the garbage.
                                src.advance(MAX_HEADER_SIZE - 2);
                                self.searched = 0;
                                return Ok(Some(Err(FrameError::InvalidHeader(
                                    "no header terminator within 8 KiB".into(),
                                ))));
                            }
                            self.searched = src.len();
                            return Ok(None);
                        };
                        (at, Self::parse_head(&src[..at]))
                    };
                    self.searched = 0;
                    match parsed {
                        Ok(len) if len > self.max_frame_size => {
                            src.advance(at + 4);
                            self.state = State::Skip(len);
                            return Ok(Some(Err(FrameError::TooLarge {
                                len: Some(len),
                                limit: self.max_frame_size,
                            })));
                        }
                        Ok(len) => {
                            src.advance(at + 4);
                            self.state = State::Body(len);
                            src.reserve(len.saturating_sub(src.len()));
                        }
                        Err(error) => {
                            // Garbage before a header (the rest of a body whose Content-Length was too small,
                            // bytes between frames) is read as the start of the next header block. Dropping the
                            // whole block would lose that frame, and its body would become the garbage before the
                            // next one, and so on: the stream would never resynchronise. Reading resumes at the
                            // next `Content-Length` inside the block instead (as tower-lsp does), so the error is
                            // reported once and the frame is read; each resumption drops at least one byte.
                            let resume = find_content_length(&src[1..at]).map_or(at + 4, |p| p + 1);
                            src.advance(resume);
                            return Ok(Some(Err(error)));
                        }
                    }
                }
                State::Body(len) => {
                    if src.len() < len {
                        return Ok(None);
                    }
                    self.state = State::Head;
                    return Ok(Some(Ok(src.split_to(len))));
                }
                State::Skip(remaining) => {
                    let n = remaining.min(src.len());
                    src.advance(n);
                    if n < remaining {
                        self.state = State::Skip(remaining - n);
                        return Ok(None);
                    }
                    self.state = State::Head;
                }
            }
        }
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> io::Result<Option<Self::Item>> {
        if let Some(frame) = self.decode(src)? {
            return Ok(Some(frame));
        }
        let partial = !src.is_empty() || matches!(self.state, State::Body(_));
        src.clear();
        self.state = State::Head;
        self.searched = 0;
        Ok(partial.then_some(Err(FrameError::Truncated)))
    }
}

/// Where the first `Content-Length` (in any case) starts in `bytes`.
fn find_content_length(bytes: &[u8]) -> Option<usize> {
    const NAME: &[u8] = b"content-length";
    bytes
        .windows(NAME.len())
        .position(|w| w.eq_ignore_ascii_case(NAME))
}

impl Encoder<&[u8]> for ContentLengthCodec {
    type Error = io::Error;

    fn encode(&mut self, payload: &[u8], dst: &mut BytesMut) -> io::Result<()> {
        dst.reserve(payload.len() + 32);
        // The number through `itoa`: `write!` costs several hundred instructions per frame in `fmt`'s machinery.
        dst.put_slice(b"Content-Length: ");
        dst.put_slice(itoa::Buffer::new().format(payload.len()).as_bytes());
        dst.put_slice(b"\r\n\r\n");
        dst.put_slice(payload);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode_test::{decode_all, decode_byte_by_byte};

    #[test]
    fn header_lines_and_trimming_are_those_of_str_split_and_trim() {
        let texts = [
            "",
            "Content-Length: 5",
            "Content-Length: 5\r\nContent-Type: x",
            "a\rb\nc\r\n\r\nd\r",
            "\r\r\n\n\r\n",
            "\r\n",
            " \t\x0B\x0C value \r\n",
            "\u{a0}Content-Length\u{2003}",
            " \u{a0} 12 \u{a0} ",
            "\u{3000}",
            "é: 1\r\nÉ\r",
        ];
        for text in texts {
            let ours: Vec<_> = crlf_lines(text).collect();
            let std: Vec<_> = text.split("\r\n").collect();
            assert_eq!(ours, std, "lines of {text:?}");
            for piece in std.iter().copied().chain([text]) {
                assert_eq!(trim(piece), piece.trim(), "trim of {piece:?}");
            }
        }
    }

    #[test]
    fn the_canonical_header_is_read_as_the_general_path_reads_it() {
        let blocks: [&[u8]; 16] = [
            b"Content-Length: 7\r\n\r\n{\"a\":1}",
            b"Content-Length: 0\r\n\r\n",
            b"Content-Length: 0042\r\n\r\n",
            b"Content-Length: 18446744073709551615\r\n\r\n",
            b"Content-Length: 18446744073709551616\r\n\r\n",
            b"Content-Length: 000000000000000000001\r\n\r\n",
            b"Content-Length: +5\r\n\r\n",
            b"Content-Length: 5 \r\n\r\n",
            b"Content-Length:5\r\n\r\n",
            b"content-length: 5\r\n\r\n",
            b"Content-Length: 5\r\nContent-Type: x\r\n\r\n",
            b"Content-Length: 5\r\n\r",
            b"Content-Length: 5\r\n",
            b"Content-Length: \r\n\r\n",
            b"Content-Length: 12",
            b"Content-Length: 5\r\n\r\nContent-Length: 6\r\n\r\n",
        ];
        let mut read = 0;
        for block in blocks {
            let general =
                header_end(block).map(|at| (at, ContentLengthCodec::parse_head(&block[..at])));
            if let Some((at, len)) = canonical_head(block) {
                assert_eq!(
                    general,
                    Some((at, Ok(len))),
                    "{:?}",
                    String::from_utf8_lossy(block)
                );
                read += 1;
            }
        }
        // The canonical blocks: the first four, and the last (its first frame). 21 digits are left to the general
        // path, whether they fit or not.
        assert_eq!(read, 5);
        assert_eq!(
            canonical_head(b"Content-Length: 42\r\n\r\n{}"),
            Some((18, 42))
        );
    }

    #[test]
    fn round_trip() {
        let mut codec = ContentLengthCodec::new();
        let mut buf = BytesMut::new();
        codec.encode(&b"{\"a\":1}"[..], &mut buf).unwrap();
        codec.encode(&b"{}"[..], &mut buf).unwrap();
        assert_eq!(
            &buf[..],
            b"Content-Length: 7\r\n\r\n{\"a\":1}Content-Length: 2\r\n\r\n{}"
        );
        assert_eq!(
            decode_all(&mut codec, &buf),
            vec![Ok(b"{\"a\":1}".to_vec()), Ok(b"{}".to_vec())]
        );
    }

    #[test]
    fn content_type_and_case_are_accepted() {
        let mut codec = ContentLengthCodec::new();
        let bytes = b"content-length: 2\r\nContent-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n{}";
        assert_eq!(decode_all(&mut codec, bytes), vec![Ok(b"{}".to_vec())]);
    }

    #[test]
    fn byte_by_byte() {
        let bytes = b"Content-Length: 2\r\n\r\n{}Content-Length: 3\r\n\r\n[1]";
        assert_eq!(
            decode_byte_by_byte(&mut ContentLengthCodec::new(), bytes),
            vec![Ok(b"{}".to_vec()), Ok(b"[1]".to_vec())]
        );
    }

    #[test]
    fn oversize_frames_are_skipped_and_the_next_frame_is_read() {
        let mut codec = ContentLengthCodec::with_max_frame_size(4);
        let bytes = b"Content-Length: 10\r\n\r\n0123456789Content-Length: 2\r\n\r\n{}";
        assert_eq!(
            decode_all(&mut codec, bytes),
            vec![
                Err(FrameError::TooLarge {
                    len: Some(10),
                    limit: 4
                }),
                Ok(b"{}".to_vec())
            ]
        );
    }

    #[test]
    fn bad_headers_are_reported_and_skipped() {
        let mut codec = ContentLengthCodec::new();
        let out = decode_all(
            &mut codec,
            b"Content-Length: x\r\n\r\nContent-Type: a\r\n\r\nContent-Length: 2\r\n\r\n{}",
        );
        assert!(matches!(out[0], Err(FrameError::InvalidHeader(_))));
        assert!(matches!(out[1], Err(FrameError::InvalidHeader(_))));
        assert_eq!(out[2], Ok(b"{}".to_vec()));
    }

    #[test]
    fn garbage_before_a_header_is_reported_once_and_the_frame_is_read() {
        let bytes = b"Content-Length: 2\r\n\r\n{}}junkContent-Length: 2\r\n\r\n[]xy\r\ncontent-length: 1\r\n\r\n1";
        let out = decode_all(&mut ContentLengthCodec::new(), bytes);
        assert_eq!(out.len(), 5, "{out:?}");
        assert_eq!(out[0], Ok(b"{}".to_vec()));
        assert!(matches!(out[1], Err(FrameError::InvalidHeader(_))));
        assert_eq!(out[2], Ok(b"[]".to_vec()));
        assert!(matches!(out[3], Err(FrameError::InvalidHeader(_))));
        assert_eq!(out[4], Ok(b"1".to_vec()));
        // The same, whichever way the bytes arrive.
        assert_eq!(
            decode_byte_by_byte(&mut ContentLengthCodec::new(), bytes),
            out
        );
    }

    #[test]
    fn garbage_without_terminator_is_bounded() {
        let mut codec = ContentLengthCodec::new();
        let mut buf = BytesMut::from(&vec![b'x'; 20_000][..]);
        // One error for each 8 KiB searched (as when the bytes trickle in), and never more kept than that.
        let mut errors = 0;
        while let Some(item) = codec.decode(&mut buf).unwrap() {
            assert!(matches!(item, Err(FrameError::InvalidHeader(_))));
            errors += 1;
        }
        assert_eq!(errors, 2);
        assert!(buf.len() <= MAX_HEADER_SIZE, "{}", buf.len());
    }

    #[test]
    fn a_header_block_over_8_kib_is_cut_however_the_bytes_arrive() {
        let mut bytes = b"X-Padding: ".to_vec();
        bytes.resize(MAX_HEADER_SIZE + 100, b'p');
        bytes.extend_from_slice(b"\r\nContent-Length: 2\r\n\r\n{}Content-Length: 2\r\n\r\n[]");
        // Found by fuzzing: in one piece the whole block was searched and read, past the limit.
        let one_piece = decode_all(&mut ContentLengthCodec::new(), &bytes);
        assert!(
            matches!(&one_piece[0], Err(FrameError::InvalidHeader(e)) if e.contains("8 KiB")),
            "{one_piece:?}"
        );
        assert_eq!(one_piece.last(), Some(&Ok(b"[]".to_vec())));
        assert_eq!(
            decode_byte_by_byte(&mut ContentLengthCodec::new(), &bytes),
            one_piece
        );
    }

    #[test]
    fn truncated_frame_at_eof() {
        let mut codec = ContentLengthCodec::new();
        assert_eq!(
            decode_all(&mut codec, b"Content-Length: 10\r\n\r\n{}"),
            vec![Err(FrameError::Truncated)]
        );
    }
}
