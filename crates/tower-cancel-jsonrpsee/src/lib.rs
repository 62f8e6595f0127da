//! jsonrpsee 0.26 servers under tower-cancel.
//!
//! TODO docs

mod bridge;
mod ids;
mod layer;
mod reply;
mod service;

pub use layer::{CancelRpcLayer, DEFAULT_MAX_BATCH_REPLY_BYTES};
pub use service::CancelRpc;
