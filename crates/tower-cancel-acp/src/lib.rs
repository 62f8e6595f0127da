//! agent-client-protocol 5.2 agents under tower-cancel.

mod call;
mod link;
mod service;
mod wire;

pub use service::{AcpService, BridgeSizes};
