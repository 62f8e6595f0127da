//! `NdjsonCodec` on arbitrary bytes, in one piece, byte by byte and in chunks: see
//! [`tower_cancel_fuzz::check_codec`] for what is checked.

#![no_main]

use libfuzzer_sys::fuzz_target;
use tower_cancel_fuzz::check_codec;
use tower_cancel_io::NdjsonCodec;

/// Small, so that the fuzzer meets the limit often.
const MAX_FRAME: usize = 64;

fuzz_target!(|data: &[u8]| {
    // A line is held until its newline arrives: the limit, and the `\r` of a `\r\n` that may follow it.
    check_codec(
        || NdjsonCodec::with_max_frame_size(MAX_FRAME),
        data,
        MAX_FRAME,
        MAX_FRAME + 1,
    );
});
