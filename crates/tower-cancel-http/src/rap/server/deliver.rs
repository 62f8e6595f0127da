//! Delivering a result to the runtime's `callback_url`.
//!
//! The spec asks tools to retry a delivery that failed for a passing reason (a 5xx, a connection error, a
//! timeout) with exponential backoff, and never one the runtime refused (a 4xx): a tool result is the one message
//! the runtime is waiting for, so it is not given up on at the first hiccup. The attempts are bounded.

use std::time::Duration;

use http::StatusCode;
use tokio_util::sync::CancellationToken;

use super::{super::wire::ToolResult, public_resolver};

/// The client that POSTs results to the runtime's `callback_url`, and how hard it tries.
#[derive(Clone, Debug)]
pub(super) struct CallbackClient {
    pub(super) client: reqwest::Client,
    /// Attempts in all (the first included).
    pub(super) attempts: u32,
    /// The wait before the second attempt; doubled before each next one.
    pub(super) backoff: Duration,
    /// How long one attempt may take.
    pub(super) attempt_timeout: Duration,
}

/// What became of a delivery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Delivered {
    /// The runtime answered 2xx.
    Accepted,
    /// The runtime refused it (4xx), or every attempt failed.
    Failed,
    /// The runtime cancelled the call before an attempt got through: nothing more was sent.
    Cancelled,
}

impl CallbackClient {
    /// Deliver `result`, unless `stop` (the runtime's cancel of the call) fires first: then no attempt is begun,
    /// the one under way is dropped and no backoff is waited out.
    pub(super) async fn send(
        &self,
        url: &str,
        result: &ToolResult,
        stop: &CancellationToken,
    ) -> Delivered {
        // Bytes, so that each attempt shares the one serialization.
        let body = match serde_json::to_vec(result) {
            Ok(body) => bytes::Bytes::from(body),
            Err(error) => {
                // A result of strings and JSON values: this does not happen.
                tracing::error!(%error, "a tool result could not be serialized");
                return Delivered::Failed;
            }
        };
        let mut backoff = self.backoff;
        for attempt in 1..=self.attempts.max(1) {
            let post = self
                .client
                .post(url)
                .header(http::header::CONTENT_TYPE, "application/json")
                .body(body.clone())
                .send();
            if stop.is_cancelled() {
                return Delivered::Cancelled;
            }
            let attempt_result = tokio::select! {
                biased;
                () = stop.cancelled() => return Delivered::Cancelled,
                attempt_result = tokio::time::timeout(self.attempt_timeout, post) => attempt_result,
            };
            let retry = match attempt_result {
                Ok(Ok(response)) if response.status().is_success() => {
                    tracing::debug!(thread = %result.group_id, call = %result.id, attempt, "tool result delivered");
                    return Delivered::Accepted;
                }
                Ok(Ok(response)) => {
                    let status = response.status();
                    tracing::warn!(thread = %result.group_id, call = %result.id, attempt, %status, "the runtime did not take the tool result");
                    status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS
                }
                Ok(Err(error)) if public_resolver::is_internal_only(&error) => {
                    // A name of internal addresses only, and private callbacks are refused: no attempt would do.
                    tracing::warn!(thread = %result.group_id, call = %result.id, url, "the callback's host has internal addresses only: the tool result is not sent");
                    false
                }
                Ok(Err(error)) => {
                    tracing::warn!(thread = %result.group_id, call = %result.id, attempt, %error, "the tool result could not be posted");
                    // A URL reqwest cannot use will not get better.
                    !error.is_builder()
                }
                Err(_elapsed) => {
                    tracing::warn!(thread = %result.group_id, call = %result.id, attempt, timeout_ms = self.attempt_timeout.as_millis() as u64, "posting the tool result timed out");
                    true
                }
            };
            if !retry || attempt == self.attempts {
                break;
            }
            tokio::select! {
                () = stop.cancelled() => return Delivered::Cancelled,
                () = tokio::time::sleep(backoff) => {}
            }
            backoff = backoff.saturating_mul(2);
        }
        tracing::error!(thread = %result.group_id, call = %result.id, url, "the tool result was not delivered");
        Delivered::Failed
    }
}

#[cfg(test)]
mod tests {
    use std::{
        sync::{
            atomic::{AtomicUsize, Ordering},
            Arc,
        },
        time::{Duration, Instant},
    };

    use tokio_util::sync::CancellationToken;

    use super::{CallbackClient, Delivered};
    use crate::rap::{wire::ToolResult, PublicResolver};

    #[tokio::test]
    async fn a_name_of_internal_addresses_only_is_never_connected_to_nor_tried_again() {
        // A runtime's callback on this host, counting the connections that reach it.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let reached = Arc::new(AtomicUsize::new(0));
        tokio::spawn({
            let reached = reached.clone();
            async move {
                while listener.accept().await.is_ok() {
                    reached.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
        let callback = CallbackClient {
            client: reqwest::Client::builder()
                .dns_resolver(PublicResolver)
                .build()
                .unwrap(),
            attempts: 3,
            backoff: Duration::from_secs(5),
            attempt_timeout: Duration::from_secs(5),
        };
        let result = ToolResult {
            group_id: "t1".into(),
            id: "c1".into(),
            call_id: None,
            text: Some("secret".into()),
            content: None,
            display_as: None,
        };
        let started = Instant::now();
        let delivered = callback
            .send(
                &format!("http://localhost:{port}/callback"),
                &result,
                &CancellationToken::new(),
            )
            .await;
        assert_eq!(delivered, Delivered::Failed);
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "not tried again after a backoff"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(reached.load(Ordering::SeqCst), 0, "never connected to");
    }
}
