//! rmcp 3.11 servers under tower-cancel. (Docs: see README.)

mod call;
mod guarded;
mod link;
mod service;
mod wire;

pub use service::{BridgeSizes, RmcpService};
