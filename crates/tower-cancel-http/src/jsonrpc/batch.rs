//! A batch's replies, their memory bounded: each is written out on its request's task as soon as it is made,
//! and one that would take the batch past its budget is replaced by an error naming the bound, so that the
//! replies of a batch never hold more than the budget however large the handlers' results.

use std::sync::{
    atomic::{AtomicUsize, Ordering},
    Arc,
};

use bytes::{BufMut, Bytes, BytesMut};
use serde_json::value::RawValue;
use tower_cancel::{ErrorObject, Response};

/// The most bytes a batch's replies take by default, written out (a single request's reply is not bounded).
pub const DEFAULT_MAX_BATCH_REPLY_BYTES: usize = 16 * 1024 * 1024;

/// The most messages in one batch by default; a longer one is answered with one -32600 error and none of it runs.
pub const DEFAULT_MAX_BATCH_LEN: usize = 1_000;

/// The bytes a batch's replies may still take; shared by its requests' tasks.
#[derive(Clone, Debug)]
pub(super) struct ReplyBudget {
    left: Arc<AtomicUsize>,
    max: usize,
}

impl ReplyBudget {
    pub(super) fn new(max: usize) -> Self {
        Self {
            left: Arc::new(AtomicUsize::new(max)),
            max,
        }
    }

    /// `reply` written out, or, if it does not fit in what is left, an error in its place (-32603 with its id).
    pub(super) fn fit(&self, reply: Response) -> Box<RawValue> {
        let written = write(&reply);
        if self.take(written.get().len()) {
            return written;
        }
        tracing::debug!(
            id = ?reply.id,
            bytes = written.get().len(),
            max = self.max,
            "a batch's reply is over its budget: an error in its place"
        );
        let why = format!(
            "the batch's replies are over the size limit ({} bytes)",
            self.max
        );
        // The error is small and always kept: a batch's length is bounded, and so is the sum of its errors.
        write(&Response::error(
            reply.id.clone(),
            ErrorObject::internal_error(why),
        ))
    }

    fn take(&self, bytes: usize) -> bool {
        self.left
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |left| {
                left.checked_sub(bytes)
            })
            .is_ok()
    }
}

/// A reply as JSON text.
pub(super) fn write(reply: &Response) -> Box<RawValue> {
    // Our replies' maps have string keys and their numbers are finite: writing one does not fail.
    serde_json::value::to_raw_value(reply).expect("a reply is always JSON")
}

/// The body of a batch's answer: its replies, written out already, as one JSON array.
pub(super) fn array(replies: &[Box<RawValue>]) -> Bytes {
    let len = replies
        .iter()
        .map(|reply| reply.get().len() + 1)
        .sum::<usize>()
        + 1;
    let mut body = BytesMut::with_capacity(len);
    body.put_u8(b'[');
    for (n, reply) in replies.iter().enumerate() {
        if n > 0 {
            body.put_u8(b',');
        }
        body.put_slice(reply.get().as_bytes());
    }
    body.put_u8(b']');
    body.freeze()
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};
    use tower_cancel::Response;

    use super::{array, ReplyBudget};

    #[test]
    fn replies_past_the_budget_become_errors_with_their_ids() {
        let budget = ReplyBudget::new(100);
        let small = budget.fit(Response::ok(1.into(), json!("x")));
        let large = budget.fit(Response::ok(2.into(), json!("y".repeat(200))));
        let body: Value = serde_json::from_slice(&array(&[small, large])).unwrap();
        assert_eq!(body[0], json!({"jsonrpc": "2.0", "id": 1, "result": "x"}));
        assert_eq!(body[1]["id"], json!(2));
        assert_eq!(body[1]["error"]["code"], json!(-32603));
        assert!(body[1]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("over the size limit (100 bytes)"));
    }
}
