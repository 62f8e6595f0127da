//! ABP, the Agentic Browser Protocol, over WebSocket: capability calls that an agent can cancel, and a cancel that
//! the app acknowledges.
//!
//! - App side: [`AbpApp`] serves any tower `Service` of capability calls (a [`CancelStack`](tower_cancel::CancelStack)
//!   of the [`Abp`](tower_cancel::dialect::Abp) dialect over your handler) at a WebSocket route of an axum `Router`.
//!   Each WebSocket is one session and one scope: a call is a request keyed by its `callId`, its
//!   `options.timeout` is the request's timeout, and a `capabilities/cancel` is answered with what the request's
//!   lifecycle decided.
//! - Agent side: [`Agent`] calls capabilities, generating a `callId` when none is given, and cancels a call when
//!   its future is dropped, its token is cancelled or its timeout passes, returning the acknowledgment.
//!
//! [`wire`] has the envelopes and payloads.

mod agent;
pub(crate) mod app;
pub mod wire;

pub use agent::*;
pub use app::{
    AbpApp, AppStats, DEFAULT_MAX_CALLS_PER_SESSION, DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_MAX_QUEUED_BYTES, DEFAULT_MAX_SESSIONS, DEFAULT_STALL_TIMEOUT,
};
