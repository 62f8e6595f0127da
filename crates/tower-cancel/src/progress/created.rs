//! Progress under a token this side creates (LSP's server-initiated progress): the handler asks the peer to accept a
//! token (`window/workDoneProgress/create`), reports under it, and the peer may cancel the request by it
//! (`window/workDoneProgress/cancel`).

use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::Value;

use super::Progress;
use crate::{message::Id, peer::PeerError, request::Request};

/// Numbers the tokens this side creates. One counter for the process: a token is then unique on every
/// connection, which vscode-jsonrpc requires (it refuses a second progress handler for a token it knows).
static NEXT_TOKEN: AtomicU64 = AtomicU64::new(1);

fn mint_token() -> String {
    format!(
        "tower-cancel-progress-{}",
        NEXT_TOKEN.fetch_add(1, Ordering::Relaxed)
    )
}

impl Request {
    /// Create a progress token on the peer and report under it: the request's child [`Peer`](crate::Peer) sends
    /// the dialect's create request (LSP: `window/workDoneProgress/create {"token": "tower-cancel-progress-<n>"}`),
    /// and once the peer accepted it, the returned [`Progress`] reports under that token, its first report
    /// (LSP's `begin`) saying `"cancellable": true`.
    ///
    /// The token is bound to this request before the create request is written, for as long as the request is in
    /// flight: the peer's cancel of the token (LSP's `window/workDoneProgress/cancel`) cancels the request as its
    /// `$/cancelRequest` would (reason [`CancelReason::Peer`](crate::CancelReason::Peer), -32800), even one sent
    /// the moment it answered the create. The cancel is still passed on to the service.
    ///
    /// Errors: the peer's refusal ([`PeerError::Rejected`]: LSP then forbids any progress under the token, so do
    /// the work without reporting), the request's own cancel or the connection's end while waiting, or
    /// [`PeerError::NotAllowed`] when there is nobody to ask: the request came without a child peer (no
    /// [`CascadeLayer`](crate::CascadeLayer), or a scope without a dialect) or the dialect has no such request.
    pub async fn create_progress(&self) -> Result<Progress, PeerError> {
        let peer = self.peer().ok_or(PeerError::NotAllowed)?;
        let format = super::format_of(self).ok_or(PeerError::NotAllowed)?;
        let token = mint_token();
        let (method, params) = format
            .create_progress(&Id::String(token.clone()))
            .ok_or(PeerError::NotAllowed)?;
        peer.request(method, params).await?;
        let token = Value::String(token);
        tracing::debug!(%token, "progress token created on the peer");
        Progress::with_token(self, token, true).ok_or(PeerError::Closed)
    }
}
