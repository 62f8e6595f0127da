//! A RAP tool server's reading of the runtime's notices: `cancel_tool_call` (also the body of
//! `tool_call_status`) and `close_thread`, each a JSON object whose ids are checked; anything else is ignored.
//!
//! # Invariants checked
//!
//! - Only a JSON object is read, and the ids of a notice read are ones `ids::validate` takes.
//! - A notice read, written out, reads back the same.
//! - A body read as a `cancel_tool_call` is also a `close_thread` of the same thread (the reading ignores
//!   members it does not know).
//! - Reading holds at most `peak::allocation_bound` of the body's length.

#![no_main]

use libfuzzer_sys::fuzz_target;
use tower_cancel_fuzz::peak::{bounded, Counting};
use tower_cancel_http::{
    fuzzing::rap::{read_cancel_tool_call, read_close_thread},
    rap::ids,
};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fuzz_target!(|data: &[u8]| {
    let cancel = bounded(data.len(), || read_cancel_tool_call(data));
    let close = bounded(data.len(), || read_close_thread(data));
    if cancel.is_some() || close.is_some() {
        let first = data.iter().find(|byte| !byte.is_ascii_whitespace());
        assert_eq!(
            first,
            Some(&b'{'),
            "a notice read from what is not an object"
        );
    }
    if let Some(cancel) = &cancel {
        assert_eq!(ids::validate(&cancel.thread_id), Ok(()), "{cancel:?}");
        assert_eq!(ids::validate(&cancel.tool_call_id), Ok(()), "{cancel:?}");
        let written = serde_json::to_vec(cancel).expect("a notice serializes");
        assert_eq!(read_cancel_tool_call(&written).as_ref(), Some(cancel));
        let close = close
            .as_ref()
            .expect("a cancel_tool_call body is a close_thread body");
        assert_eq!(close.thread_id, cancel.thread_id);
    }
    if let Some(close) = &close {
        assert_eq!(ids::validate(&close.thread_id), Ok(()), "{close:?}");
        let written = serde_json::to_vec(close).expect("a notice serializes");
        assert_eq!(read_close_thread(&written).as_ref(), Some(close));
    }
});
