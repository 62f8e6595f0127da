//! RAP's id check, `ids::validate`, against a reading of its rule written here byte by byte, and the notices and
//! invocation that carry such an id.
//!
//! # Invariants checked
//!
//! - An id is taken exactly when it is 1 to `MAX_ID_BYTES` bytes of printable ASCII without a space, none of its
//!   `/`- or `\`-separated segments is `.` or `..`, and it does not start with `/` or `\`; a refused id is
//!   refused for the first of those rules it breaks (empty, too long, the first bad character, a path).
//! - A `cancel_tool_call`, `close_thread` or invocation whose ids are this one is read exactly when it is taken,
//!   and carries it unchanged.

#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::json;
use tower_cancel_http::{
    fuzzing::rap::{read_cancel_tool_call, read_close_thread, read_invocation},
    rap::ids::{validate, InvalidId, MAX_ID_BYTES},
};

fuzz_target!(|data: &[u8]| {
    let id = String::from_utf8_lossy(data);
    let verdict = validate(&id);
    assert_eq!(verdict, expected(&id), "{id:?}");
    let taken = verdict.is_ok();
    if taken {
        assert!(id.len() <= MAX_ID_BYTES);
    }

    let notice = json!({ "thread_id": id, "tool_call_id": id });
    let notice = serde_json::to_vec(&notice).expect("JSON");
    let cancel = read_cancel_tool_call(&notice);
    assert_eq!(cancel.is_some(), taken, "cancel_tool_call of {id:?}");
    if let Some(cancel) = cancel {
        assert_eq!(
            (cancel.thread_id.as_str(), cancel.tool_call_id.as_str()),
            (&*id, &*id)
        );
    }
    let close = read_close_thread(&notice);
    assert_eq!(
        close.map(|close| close.thread_id),
        taken.then(|| id.to_string())
    );

    let invocation = json!({
        "operation": "op",
        "id": id,
        "group_id": id,
        "callback_url": "http://runtime.example/results",
    });
    let invocation = serde_json::to_vec(&invocation).expect("JSON");
    match read_invocation(&invocation) {
        Ok(read) => {
            assert!(taken, "an invocation with the id {id:?}");
            assert_eq!((read.id.as_str(), read.group_id.as_str()), (&*id, &*id));
        }
        Err(detail) => assert!(!taken, "the id {id:?} refused in an invocation: {detail}"),
    }
});

/// The rule, as the module docs of `ids` state it.
fn expected(id: &str) -> Result<(), InvalidId> {
    if id.is_empty() {
        return Err(InvalidId::Empty);
    }
    if id.len() > MAX_ID_BYTES {
        return Err(InvalidId::TooLong(id.len()));
    }
    if let Some(bad) = id.chars().find(|&c| !(('!'..='~').contains(&c))) {
        return Err(InvalidId::Character(bad));
    }
    let bytes = id.as_bytes();
    if bytes[0] == b'/' || bytes[0] == b'\\' {
        return Err(InvalidId::Path);
    }
    let mut segment_start = 0;
    for end in
        (0..=bytes.len()).filter(|&at| at == bytes.len() || matches!(bytes[at], b'/' | b'\\'))
    {
        if matches!(&bytes[segment_start..end], b"." | b"..") {
            return Err(InvalidId::Path);
        }
        segment_start = end + 1;
    }
    Ok(())
}
