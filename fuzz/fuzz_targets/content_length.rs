//! `ContentLengthCodec` on arbitrary bytes, in one piece, byte by byte and in chunks: see
//! [`tower_cancel_fuzz::check_codec`] for what is checked.

#![no_main]

use libfuzzer_sys::fuzz_target;
use tower_cancel_fuzz::check_codec;
use tower_cancel_io::ContentLengthCodec;

/// Small, so that the fuzzer meets the limit often.
const MAX_FRAME: usize = 128;
/// The codec's limit on a header block (private to it): a header block is never buffered past it.
const MAX_HEADER: usize = 8 * 1024;

fuzz_target!(|data: &[u8]| {
    check_codec(
        || ContentLengthCodec::with_max_frame_size(MAX_FRAME),
        data,
        MAX_FRAME,
        MAX_FRAME.max(MAX_HEADER),
    );
});
