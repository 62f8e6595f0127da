//! A RAP tool server's reading of an invocation's body (`POST {endpoint}`): a JSON object of the invocation's
//! shape, its ids, its `call_id` and its `callback_url` checked.
//!
//! # Invariants checked
//!
//! - Only a JSON object is read; an invocation read has a `group_id` and an `id` that `ids::validate` takes
//!   (so at most `MAX_ID_BYTES`), a `call_id` of at most `MAX_CALL_ID_BYTES`, and an http or https
//!   `callback_url` with a host.
//! - An invocation read, written out, reads back the same.
//! - A refusal's detail (the 400's body, and a log line) is at most `MAX_DETAIL_BYTES` and an ellipsis.
//! - Reading holds at most `peak::allocation_bound` of the body's length.

#![no_main]

use libfuzzer_sys::fuzz_target;
use tower_cancel_fuzz::{
    peak::{bounded, Counting},
    same_serialized,
};
use tower_cancel_http::{
    fuzzing::rap::{read_invocation, MAX_CALL_ID_BYTES, MAX_DETAIL_BYTES},
    rap::ids::{self, MAX_ID_BYTES},
};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fuzz_target!(|data: &[u8]| {
    let invocation = match bounded(data.len(), || read_invocation(data)) {
        Ok(invocation) => invocation,
        Err(detail) => {
            assert!(
                detail.len() <= MAX_DETAIL_BYTES + "...".len(),
                "a detail of {} bytes",
                detail.len()
            );
            return;
        }
    };
    let first = data.iter().find(|byte| !byte.is_ascii_whitespace());
    assert_eq!(
        first,
        Some(&b'{'),
        "an invocation read from what is not an object"
    );
    for id in [&invocation.group_id, &invocation.id] {
        assert_eq!(ids::validate(id), Ok(()), "{id:?}");
        assert!(id.len() <= MAX_ID_BYTES);
    }
    if let Some(call_id) = &invocation.call_id {
        assert!(
            call_id.len() <= MAX_CALL_ID_BYTES,
            "a call_id of {} bytes",
            call_id.len()
        );
    }
    let url: http::Uri = invocation
        .callback_url
        .parse()
        .expect("the callback URL is a URI");
    assert!(matches!(url.scheme_str(), Some("http" | "https")), "{url}");
    assert!(url.host().is_some(), "{url}");

    let written = serde_json::to_vec(&invocation).expect("an invocation serializes");
    let again = read_invocation(&written).unwrap_or_else(|detail| {
        panic!(
            "{} does not read back: {detail}",
            String::from_utf8_lossy(&written)
        )
    });
    assert!(
        same_serialized(&again, &invocation),
        "{invocation:?} read back as {again:?}"
    );
});
