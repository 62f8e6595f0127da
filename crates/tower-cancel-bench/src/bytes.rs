//! Heap bytes per request held, measured in a process of their own.
//!
//! Counting every allocation makes each one dearer, so the harness does not count: its throughput and latency
//! figures run on the plain system allocator. Each bytes figure is measured by the `heap_bytes` binary
//! (`src/bin/heap_bytes.rs`), which installs the counting allocator ([`crate::memory`]) and does nothing but the one
//! measurement it is asked for: the harness runs it ([`measure`]) and reads the number it prints. A global
//! allocator is chosen per binary, so two binaries are the way to have both without unsafe code.
//!
//! `bash crates/tower-cancel-bench/run.sh` builds both binaries before it runs the harness.

use std::{io, path::PathBuf, process::Command};

use crate::{client::Transport, connections, peer_side, scale, target, workload};

/// The name of the binary that counts.
pub const BINARY: &str = "heap_bytes";

/// What to measure.
#[derive(Clone, Copy, Debug)]
pub enum Held<'a> {
    /// Requests held by their handlers over one connection to the target of this name ([`workload::held_bytes`]).
    OverConnection(&'a str, Transport, u64),
    /// Requests held in process, through `CancelStack::lsp()` (true) or the bare service ([`scale::bytes_per_request`]).
    InProcess(bool, usize),
    /// Idle connections to the target of this name, per connection ([`connections::idle_bytes`]).
    IdleConnections(&'a str, usize),
    /// Outgoing calls of our `Peer` waiting for replies, per call ([`peer_side::pending_bytes`]), with the
    /// peer's default timeout (true) or none.
    PendingCalls(u64, bool),
}

impl Held<'_> {
    fn args(self) -> Vec<String> {
        match self {
            Held::OverConnection(name, transport, count) => vec![
                "connection".to_owned(),
                name.to_owned(),
                transport_arg(transport).to_owned(),
                count.to_string(),
            ],
            Held::InProcess(stack, count) => vec![
                "in-process".to_owned(),
                if stack { "stack" } else { "bare" }.to_owned(),
                count.to_string(),
            ],
            Held::IdleConnections(name, count) => {
                vec!["idle".to_owned(), name.to_owned(), count.to_string()]
            }
            Held::PendingCalls(count, timeout) => vec![
                "pending-calls".to_owned(),
                count.to_string(),
                if timeout { "timeout" } else { "no-timeout" }.to_owned(),
            ],
        }
    }
}

/// Heap bytes per request held, from a run of the `heap_bytes` binary beside the running one.
pub fn measure(what: Held<'_>) -> io::Result<f64> {
    let binary = sibling()?;
    let output = Command::new(&binary).args(what.args()).output()?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(io::Error::other(format!(
            "{} {:?} failed: {}",
            binary.display(),
            what.args(),
            String::from_utf8_lossy(&output.stderr)
        )));
    }
    stdout
        .trim()
        .parse()
        .map_err(|_| io::Error::other(format!("{} printed {stdout:?}", binary.display())))
}

fn sibling() -> io::Result<PathBuf> {
    let binary = std::env::current_exe()?
        .with_file_name(format!("{BINARY}{}", std::env::consts::EXE_SUFFIX));
    if binary.exists() {
        Ok(binary)
    } else {
        Err(io::Error::other(format!(
            "{} is missing: build it with `cargo build [--release] -p tower-cancel-bench --bins` (run.sh does)",
            binary.display()
        )))
    }
}

/// The `heap_bytes` binary's work: measure what `args` name (as [`Held`] writes them) and give the bytes. Call it
/// only in a process whose allocator counts.
pub fn run_measurement(args: &[String]) -> Result<f64, String> {
    let number = |arg: Option<&String>| -> Result<u64, String> {
        arg.ok_or("a count is missing")?
            .parse()
            .map_err(|e| format!("a count: {e}"))
    };
    match args.first().map(String::as_str) {
        Some("connection") => {
            let name = args.get(1).ok_or("a target's name is missing")?;
            let target = target::by_name(name).ok_or(format!("no target {name}"))?;
            let transport = match args.get(2).map(String::as_str) {
                Some("duplex") => Transport::Duplex,
                Some("unix") => Transport::Unix,
                other => return Err(format!("transport {other:?}: duplex or unix")),
            };
            let count = number(args.get(3))?;
            crate::run::on_fresh_runtime(async move {
                workload::held_bytes(&target, transport, count).await
            })
            .map_err(|e| e.to_string())
        }
        Some("in-process") => {
            let stack = args.get(1).is_some_and(|kind| kind == "stack");
            let count = number(args.get(2))? as usize;
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            let _entered = runtime.enter();
            Ok(scale::bytes_per_request(stack, count))
        }
        Some("idle") => {
            let name = args.get(1).ok_or("a target's name is missing")?;
            let target = target::by_name(name).ok_or(format!("no target {name}"))?;
            let count = number(args.get(2))? as usize;
            crate::run::on_fresh_runtime(async move {
                connections::idle_bytes(&target, count).await
            })
            .map_err(|e| e.to_string())
        }
        Some("pending-calls") => {
            let count = number(args.get(1))?;
            let timeout = args.get(2).map(String::as_str) != Some("no-timeout");
            crate::run::on_fresh_runtime(async move {
                peer_side::pending_bytes(count, timeout).await
            })
            .map_err(|e| e.to_string())
        }
        _ => Err(
            "usage: heap_bytes connection NAME duplex|unix COUNT | in-process bare|stack COUNT | idle NAME COUNT \
             | pending-calls COUNT [timeout|no-timeout]"
                .to_owned(),
        ),
    }
}

fn transport_arg(transport: Transport) -> &'static str {
    match transport {
        Transport::Duplex => "duplex",
        Transport::Unix => "unix",
    }
}
