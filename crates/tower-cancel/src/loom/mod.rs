//! The synchronisation types the lifecycle, the registry and the peer's pending table are built on: `std`'s (and
//! `futures`'), or, in the model-checking build, `loom`'s, so that loom can explore every interleaving of them
//! (tokio-util's `src/loom.rs` is the model).
//!
//! The model-checking build is `--cfg loom` on this crate only (a global `RUSTFLAGS` would switch tokio to its
//! own loom build, which needs loom as a dependency it lacks outside its own tests):
//!
//! ```text
//! RUSTC_WORKSPACE_WRAPPER=$PWD/.ci/loom-rustc cargo test -p tower-cancel --lib --release loom -- --nocapture
//! ```
//!
//! The models themselves are in `model_test.rs` (test code: it builds only under `cfg(all(test, loom))`).

#[cfg(not(loom))]
pub(crate) use std::sync::{
    atomic::{fence, AtomicU8},
    Mutex, MutexGuard, OnceLock,
};

#[cfg(not(loom))]
pub(crate) use futures_util::task::AtomicWaker;

#[cfg(not(loom))]
pub(crate) use once_cell::race::OnceBox;

#[cfg(not(loom))]
pub(crate) use std::thread::yield_now;

#[cfg(loom)]
pub(crate) use loom::thread::yield_now;

#[cfg(loom)]
mod mocked;

#[cfg(loom)]
pub(crate) use mocked::{AtomicWaker, OnceBox, OnceLock};

#[cfg(loom)]
pub(crate) use loom::sync::{
    atomic::{fence, AtomicU8},
    Mutex, MutexGuard,
};

#[cfg(all(test, loom))]
mod model_test;
