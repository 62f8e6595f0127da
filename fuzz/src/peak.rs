//! How much memory a parser holds at most, for targets that check it allocates in proportion to its input.
//!
//! libFuzzer's `-malloc_limit_mb` cannot tell: without a sanitizer it has no malloc hooks (see the README), and
//! `-rss_limit_mb` only catches the process as a whole past 512 MB. So a target that checks installs [`Counting`]
//! as its global allocator; it counts the bytes live around the system allocator, and [`peak_bytes`] reads the
//! most held during one call. libFuzzer's own allocations are C++'s and are not counted; the targets run on one
//! thread, so nothing else is.
//!
//! This is the fuzz crate's only unsafe code: implementing `GlobalAlloc` is unsafe, and each method does nothing
//! but call the system allocator's with the caller's own arguments, and count.

#![allow(unsafe_code)]

use std::{
    alloc::{GlobalAlloc, Layout, System},
    sync::atomic::{AtomicUsize, Ordering::Relaxed},
};

/// The system allocator, counting. Install it with
/// `#[global_allocator] static ALLOCATOR: Counting = Counting;` in the target.
#[derive(Debug)]
pub struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(bytes: usize) {
    let live = LIVE.fetch_add(bytes, Relaxed) + bytes;
    PEAK.fetch_max(live, Relaxed);
}

fn shrank(bytes: usize) {
    LIVE.fetch_sub(bytes, Relaxed);
}

// SAFETY: every method forwards its arguments unchanged to `System`, whose contract is the same, and returns what
// it returned; the counting touches only two atomics.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller keeps `alloc`'s contract, which is `System.alloc`'s.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            grew(layout.size());
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            grew(layout.size());
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, that is from `System`, with `layout`.
        unsafe { System.dealloc(ptr, layout) };
        shrank(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from `System` with `layout`; the caller keeps `realloc`'s contract on `new_size`.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            if new_size >= layout.size() {
                grew(new_size - layout.size());
            } else {
                shrank(layout.size() - new_size);
            }
        }
        new
    }
}

/// Run `f`; return what it returned and the most bytes it held at once, beyond what was held when it began.
///
/// Panics if [`Counting`] is not the global allocator (every count would be 0, and every check would pass).
pub fn peak_bytes<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let before = LIVE.load(Relaxed);
    let probe = std::hint::black_box(Box::new(0u64));
    assert!(
        LIVE.load(Relaxed) > before,
        "install tower_cancel_fuzz::peak::Counting as the #[global_allocator]"
    );
    drop(probe);
    let before = LIVE.load(Relaxed);
    PEAK.store(before, Relaxed);
    let result = f();
    (result, PEAK.load(Relaxed).saturating_sub(before))
}

/// What a parser may hold at most for `input_len` bytes of input: 256 bytes a byte, and 64 KiB.
///
/// Generous, because a JSON value costs far more than its text: `{"":0}` is 6 bytes and a map node of hundreds,
/// and a typed struct read through a `Value` holds both for a moment. What it catches is a parser whose memory
/// grows faster than its input, or is sized by a number in the input.
pub fn allocation_bound(input_len: usize) -> usize {
    256 * input_len + 64 * 1024
}

/// Run the parse `f` on `input_len` bytes of input; panic if it held more than [`allocation_bound`].
pub fn bounded<R>(input_len: usize, f: impl FnOnce() -> R) -> R {
    let (result, peak) = peak_bytes(f);
    assert!(
        peak <= allocation_bound(input_len),
        "{peak} bytes held at once for {input_len} bytes of input"
    );
    result
}
