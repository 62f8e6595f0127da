//! What the fuzz targets share: feeding a framing codec the way `FramedRead` does, checking a dialect's reading
//! of its cancel notification against the params it was given, comparing JSON that went through text and back,
//! and measuring what a parser allocates.

// Not `forbid`: `peak` implements `GlobalAlloc`, which takes `unsafe` (it says why that is sound).
#![deny(unsafe_code)]

pub mod peak;
mod same_json;

pub use same_json::{same_json, same_serialized};

use std::collections::BTreeMap;

use bytes::BytesMut;
use serde_json::value::RawValue;
use tokio_util::codec::Decoder;
use tower_cancel::{
    dialect::{Dialect, Recognized},
    scope::SessionState,
    Id, Message, Request,
};
use tower_cancel_io::FrameError;

/// What a codec yielded, without the detail that may rightly depend on how the bytes arrived (a line found too
/// long before its end is reported without its length).
#[derive(Debug, PartialEq, Eq)]
pub enum Item {
    /// A frame's payload.
    Frame(Vec<u8>),
    /// [`FrameError::TooLarge`].
    TooLarge,
    /// [`FrameError::InvalidHeader`].
    InvalidHeader,
    /// [`FrameError::Truncated`].
    Truncated,
}

/// Decode `data` three ways (in one piece, byte by byte, and in chunks whose sizes the data picks), the way
/// `FramedRead` calls a decoder: `decode` until `None` after every read, `decode_eof` until `None` at the end.
///
/// # Invariants checked
///
/// - The decoder never fails, never panics and never yields a frame longer than `max_frame`.
/// - Whenever it asks for more bytes, at most `max_buffered` are held: an endless header or line is dropped as
///   it streams in, never buffered.
/// - Every item consumes input (so `FramedRead` cannot spin), and nothing is left in the buffer at the end.
/// - The items do not depend on how the bytes were split into reads.
pub fn check_codec<C: Decoder<Item = Result<BytesMut, FrameError>, Error = std::io::Error>>(
    new: impl Fn() -> C,
    data: &[u8],
    max_frame: usize,
    max_buffered: usize,
) {
    let whole = decode(new(), data, |_| usize::MAX, max_frame, max_buffered);
    let bytes = decode(new(), data, |_| 1, max_frame, max_buffered);
    let chunks = decode(
        new(),
        data,
        |rest| 1 + usize::from(rest[0] % 32),
        max_frame,
        max_buffered,
    );
    assert_eq!(whole, bytes, "byte by byte differs from one piece");
    assert_eq!(whole, chunks, "in chunks differs from one piece");
}

fn decode<C: Decoder<Item = Result<BytesMut, FrameError>, Error = std::io::Error>>(
    mut codec: C,
    data: &[u8],
    chunk: impl Fn(&[u8]) -> usize,
    max_frame: usize,
    max_buffered: usize,
) -> Vec<Item> {
    let mut buf = BytesMut::new();
    let mut items = Vec::new();
    let push = |item: Result<BytesMut, FrameError>, items: &mut Vec<Item>| {
        items.push(match item {
            Ok(frame) => {
                assert!(frame.len() <= max_frame, "a frame of {} bytes", frame.len());
                Item::Frame(frame.to_vec())
            }
            Err(FrameError::TooLarge { .. }) => Item::TooLarge,
            Err(FrameError::InvalidHeader(_)) => Item::InvalidHeader,
            Err(FrameError::Truncated) => Item::Truncated,
            Err(other) => panic!("unknown frame error {other:?}"),
        });
        // Every item but a final Truncated consumes at least one byte.
        assert!(items.len() <= data.len() + 1, "items without input");
    };
    let mut rest = data;
    while !rest.is_empty() {
        let (now, later) = rest.split_at(chunk(rest).min(rest.len()));
        buf.extend_from_slice(now);
        rest = later;
        while let Some(item) = codec.decode(&mut buf).expect("decode never fails") {
            push(item, &mut items);
        }
        assert!(buf.len() <= max_buffered, "{} bytes buffered", buf.len());
    }
    while let Some(item) = codec.decode_eof(&mut buf).expect("decode_eof never fails") {
        push(item, &mut items);
    }
    assert!(buf.is_empty(), "{} bytes left at the end", buf.len());
    items
}

/// How a dialect spells its cancel notification, for [`check_cancel`].
#[derive(Clone, Copy, Debug)]
pub struct CancelShape {
    /// The method.
    pub method: &'static str,
    /// The params member that holds the id of the request to cancel.
    pub id: &'static str,
    /// The params member that holds the reason, if the dialect carries one.
    pub reason: Option<&'static str>,
}

/// Check `dialect`'s reading of notifications made from `data`: the bytes as a whole message, and the bytes as
/// the params of the dialect's cancel method (so the fuzzer reaches the params parser without having to write
/// the envelope).
///
/// # Invariants checked
///
/// - Another method is never taken for a cancel; while `session` lets the dialect handle cancels, its own method
///   is never passed on (it is a cancel, or malformed and consumed).
/// - A cancel's id is the id member of the params, which are an object; its reason is the reason member.
pub fn check_cancel<D: Dialect>(
    dialect: &D,
    session: &SessionState,
    handles_cancels: bool,
    shape: CancelShape,
    data: &[u8],
) {
    if let Ok(Message::Request(request)) = Message::from_slice(data) {
        check_notification(dialect, session, handles_cancels, shape, &request);
    }
    if let Ok(params) = serde_json::from_slice::<Box<RawValue>>(data) {
        let request = Request::from_parts(None, shape.method.to_owned(), Some(params));
        check_notification(dialect, session, handles_cancels, shape, &request);
    }
}

fn check_notification<D: Dialect>(
    dialect: &D,
    session: &SessionState,
    handles_cancels: bool,
    shape: CancelShape,
    request: &Request,
) {
    let recognized = dialect.recognize(request, session);
    if request.method() != shape.method || !handles_cancels {
        // Another method is never a cancel of one request; it may be a group's (ACP's `session/cancel`).
        assert!(
            matches!(recognized, Recognized::NotACancel | Recognized::CancelGroup(_)),
            "{recognized:?}"
        );
        return;
    }
    let notice = match recognized {
        Recognized::Cancel(notice) => notice,
        Recognized::Malformed => return,
        Recognized::NotACancel => panic!("the cancel method was passed on"),
        Recognized::CancelGroup(group) => panic!("the cancel method read as a group cancel: {group:?}"),
    };
    // The reference reading: the params as a map of raw members, each looked up by name and read on its own. Raw,
    // because members the dialect does not read are skipped unread (a number out of range among them is no error).
    let params = request.params().expect("a cancel has params").get();
    let params: BTreeMap<String, Box<RawValue>> =
        serde_json::from_str(params).expect("a cancel's params are an object");
    let read = |name: &str| params.get(name).map(|raw| raw.get());
    let id = read(shape.id).and_then(|raw| serde_json::from_str::<Id>(raw).ok());
    assert_eq!(id, Some(notice.id), "id");
    let reason = shape
        .reason
        .and_then(read)
        .and_then(|raw| serde_json::from_str::<Option<String>>(raw).ok())
        .flatten();
    assert_eq!(notice.reason, reason, "reason");
}
