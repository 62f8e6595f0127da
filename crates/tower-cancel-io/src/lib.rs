//! Stream transports for [`tower_cancel`]: framing codecs and a connection driver.
//!
//! - [`ContentLengthCodec`] (LSP) and [`NdjsonCodec`] (ACP, MCP over stdio), on `tokio-util`'s codec traits, each
//!   with a frame size limit: a frame past it is skipped and reported, never buffered.
//! - [`Server`] drives one connection: it reads messages, calls the service concurrently, writes replies, answers
//!   garbage with the protocol's errors, and cancels everything in flight when the connection closes.
//!
//! # Example
//!
//! ```no_run
//! use tower::{service_fn, ServiceBuilder};
//! use tower_cancel::{BoxError, CancelStack, ErrorObject, Request};
//! use tower_cancel_io::{Framing, Server};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> std::io::Result<()> {
//! let service = ServiceBuilder::new()
//!     .layer(CancelStack::lsp())
//!     .service(service_fn(|req: Request| async move {
//!         match req.method() {
//!             "initialize" => Ok(serde_json::json!({ "capabilities": {} })),
//!             other => Err(BoxError::from(ErrorObject::method_not_found(other))),
//!         }
//!     }));
//! Server::new(service).serve_stdio(Framing::ContentLength).await
//! # }
//! ```

#![forbid(unsafe_code)]

mod adaptive;
mod config;
mod content_length;
#[cfg(test)]
mod decode_test;
mod frame;
mod in_flight;
mod ndjson;
mod read;
mod repoll;
mod requests;
mod server;
mod settled;
mod shutdown;
mod signal;
mod spawned;
mod write;

pub use config::{
    ResponseHandler, DEFAULT_CLOSE_GRACE, DEFAULT_DRAIN_TIMEOUT, DEFAULT_STALL_TIMEOUT,
};
pub use content_length::ContentLengthCodec;
pub use frame::{FrameError, DEFAULT_MAX_FRAME_SIZE};
pub use ndjson::NdjsonCodec;
pub use server::{Framing, Server};
pub use shutdown::ShutdownHandle;
