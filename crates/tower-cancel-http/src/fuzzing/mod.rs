//! The parsers of what clients send, for the fuzz targets in `fuzz/` (behind the `fuzzing` feature, which only
//! the fuzz crate turns on). Not an API: hidden from the docs, and free to change with the parsers.
//!
//! Each function is a thin wrapper over the crate-private function the front end runs on that input, so the
//! fuzzer exercises the code that serves requests, not a copy of it; its result is a public type (or a mirror of
//! a private one) so that the targets can check it.

pub mod abp;
pub mod jsonrpc;
pub mod mcp;
pub mod rap;
