//! What the codecs' unit tests share: decoding a byte string in one piece or a byte at a time, to the end.

use std::io;

use bytes::{BufMut, BytesMut};
use tokio_util::codec::Decoder;

use crate::FrameError;

/// What a codec read from a byte string: each frame's bytes, or the error it reported for a skipped one.
pub(crate) type Decoded = Vec<Result<Vec<u8>, FrameError>>;

/// Decode `bytes` arriving in one piece, then at the end of the stream.
pub(crate) fn decode_all<C>(codec: &mut C, bytes: &[u8]) -> Decoded
where
    C: Decoder<Item = Result<BytesMut, FrameError>, Error = io::Error>,
{
    let mut buf = BytesMut::from(bytes);
    let mut out = Vec::new();
    drain(codec, &mut buf, &mut out);
    finish(codec, &mut buf, &mut out);
    out
}

/// Decode `bytes` arriving a byte at a time, then at the end of the stream.
pub(crate) fn decode_byte_by_byte<C>(codec: &mut C, bytes: &[u8]) -> Decoded
where
    C: Decoder<Item = Result<BytesMut, FrameError>, Error = io::Error>,
{
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for byte in bytes {
        buf.put_u8(*byte);
        drain(codec, &mut buf, &mut out);
    }
    finish(codec, &mut buf, &mut out);
    out
}

fn drain<C>(codec: &mut C, buf: &mut BytesMut, out: &mut Decoded)
where
    C: Decoder<Item = Result<BytesMut, FrameError>, Error = io::Error>,
{
    while let Some(item) = codec.decode(buf).unwrap() {
        out.push(item.map(|frame| frame.to_vec()));
    }
}

fn finish<C>(codec: &mut C, buf: &mut BytesMut, out: &mut Decoded)
where
    C: Decoder<Item = Result<BytesMut, FrameError>, Error = io::Error>,
{
    while let Some(item) = codec.decode_eof(buf).unwrap() {
        out.push(item.map(|frame| frame.to_vec()));
    }
}
