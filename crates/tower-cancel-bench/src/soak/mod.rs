//! The soak test's pieces (the `soak` binary drives them): a listening server that serves every connection with
//! the full stack and keeps a handle on each connection's registry ([`listen`]), the clients that load it
//! ([`drive`]), what a request may be answered ([`Plan::allows`]), a seeded random number generator and the
//! process's resident memory.

mod client;
mod server;

pub use self::{
    client::{drive, name, Counts, Run},
    server::{listen, Connections, Endpoint, Snapshot, Tables},
};

use tower_cancel::message::code;

use crate::target::Protocol;

/// The kind of a reply, from its error code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyKind {
    /// The handler's result.
    Ok,
    /// Cancelled by the peer (-32800, LSP).
    Cancelled,
    /// Timed out (-32802 for LSP's `bench/work`, -32001 for MCP).
    TimedOut,
    /// Any other error: never expected.
    Other(Option<i64>),
}

impl ReplyKind {
    /// Classify a reply of `protocol`.
    pub fn of(protocol: Protocol, is_error: bool, code: Option<i64>) -> Self {
        match (protocol, is_error, code) {
            (_, false, _) => ReplyKind::Ok,
            (Protocol::Lsp, true, Some(code::REQUEST_CANCELLED)) => ReplyKind::Cancelled,
            (Protocol::Lsp, true, Some(code::SERVER_CANCELLED)) => ReplyKind::TimedOut,
            (Protocol::Mcp, true, Some(code::REQUEST_TIMEOUT)) => ReplyKind::TimedOut,
            (_, true, code) => ReplyKind::Other(code),
        }
    }
}

/// When the client cancels a request, if it does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CancelAt {
    /// Never.
    Never,
    /// Before the request is sent: the server remembers the early cancel and the request starts out cancelled.
    Before,
    /// While it runs (or races its completion or its timeout).
    During,
    /// After its reply was read: the cancel is for an id no longer in flight and changes nothing.
    After,
}

/// What the client does with one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The handler sleeps longer than the server's timeout.
    pub slow: bool,
    /// When the client cancels it.
    pub cancel: CancelAt,
}

impl Plan {
    /// Whether a reply of `kind` is one that the request's possible outcomes allow. Any request may time out (a
    /// loaded machine may delay a fast one past the deadline); one cancelled before it was sent starts out
    /// cancelled, so nothing else can win; a slow one cannot complete; MCP answers nothing to a peer's cancel.
    pub fn allows(&self, protocol: Protocol, kind: ReplyKind) -> bool {
        match (protocol, self.cancel, kind) {
            (_, _, ReplyKind::Other(_)) => false,
            (Protocol::Lsp, CancelAt::Before, kind) => kind == ReplyKind::Cancelled,
            (Protocol::Mcp, CancelAt::Before, _) => false,
            (Protocol::Lsp, CancelAt::During, ReplyKind::Cancelled) => true,
            (_, _, ReplyKind::Cancelled) => false,
            (_, _, ReplyKind::TimedOut) => true,
            (_, _, ReplyKind::Ok) => !self.slow,
        }
    }
}

/// A small seeded random number generator (xorshift64*), so that a run's choices repeat with its seed.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed` and `stream` (one stream per client), mixed so that nearby seeds differ.
    pub fn new(seed: u64, stream: u64) -> Self {
        // splitmix64 of the two, never zero (xorshift's fixed point).
        let mut z = seed ^ stream.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Self((z ^ (z >> 31)) | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// A number in `low..=high`.
    pub fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.below(high - low + 1)
    }

    /// True `per_mille` times in a thousand.
    pub fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }
}

/// The process's resident set size (`VmRSS` in `/proc/self/status`), in bytes; `None` where there is no procfs.
pub fn rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Bytes as MiB, for the report.
pub fn mib(bytes: f64) -> f64 {
    bytes / (1024.0 * 1024.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generator_repeats_with_its_seed() {
        let (mut a, mut b) = (Rng::new(7, 1), Rng::new(7, 1));
        let mut c = Rng::new(7, 2);
        let xs: Vec<_> = (0..8).map(|_| a.next_u64()).collect();
        assert_eq!(xs, (0..8).map(|_| b.next_u64()).collect::<Vec<_>>());
        assert_ne!(xs, (0..8).map(|_| c.next_u64()).collect::<Vec<_>>());
        assert!((0..1000).all(|_| a.between(3, 5) >= 3 && b.between(3, 5) <= 5));
    }

    #[test]
    fn replies_are_checked_against_the_plan() {
        let before = Plan {
            slow: false,
            cancel: CancelAt::Before,
        };
        assert!(before.allows(Protocol::Lsp, ReplyKind::Cancelled));
        assert!(!before.allows(Protocol::Lsp, ReplyKind::Ok));
        assert!(!before.allows(Protocol::Mcp, ReplyKind::Ok));
        let slow = Plan {
            slow: true,
            cancel: CancelAt::Never,
        };
        assert!(slow.allows(Protocol::Mcp, ReplyKind::TimedOut));
        assert!(!slow.allows(Protocol::Lsp, ReplyKind::Ok));
        assert!(!slow.allows(Protocol::Lsp, ReplyKind::Cancelled));
        let during = Plan {
            slow: false,
            cancel: CancelAt::During,
        };
        assert!(during.allows(Protocol::Lsp, ReplyKind::Cancelled));
        assert!(!during.allows(Protocol::Mcp, ReplyKind::Cancelled));
        assert!(!during.allows(Protocol::Lsp, ReplyKind::Other(Some(-32603))));
        assert_eq!(
            ReplyKind::of(Protocol::Lsp, true, Some(-32802)),
            ReplyKind::TimedOut
        );
        assert_eq!(
            ReplyKind::of(Protocol::Mcp, true, Some(-32800)),
            ReplyKind::Other(Some(-32800))
        );
    }
}
