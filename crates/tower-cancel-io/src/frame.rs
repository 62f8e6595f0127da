//! What can be wrong with a frame, short of the connection itself failing.

use std::fmt;

/// The largest frame the codecs accept by default: 16 MiB.
pub const DEFAULT_MAX_FRAME_SIZE: usize = 16 * 1024 * 1024;

/// A frame that could not be read. The codecs skip past it and go on with the next frame, so one bad frame
/// never stops the connection for the others.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FrameError {
    /// The frame is larger than the limit; its bytes were discarded.
    TooLarge {
        /// The announced length, where the framing announces one.
        len: Option<usize>,
        /// The limit.
        limit: usize,
    },
    /// The header block of a `Content-Length` frame could not be read.
    InvalidHeader(String),
    /// The stream ended in the middle of a frame.
    Truncated,
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::TooLarge {
                len: Some(len),
                limit,
            } => write!(f, "frame of {len} bytes exceeds the limit of {limit} bytes"),
            FrameError::TooLarge { len: None, limit } => {
                write!(f, "frame exceeds the limit of {limit} bytes")
            }
            FrameError::InvalidHeader(detail) => write!(f, "invalid frame header: {detail}"),
            FrameError::Truncated => f.write_str("stream ended in the middle of a frame"),
        }
    }
}

impl std::error::Error for FrameError {}
