//! One run of table A: ordinary requests at a fixed rate on one connection, with or without a storm of requests
//! that are held and cancelled on the same connection.

use std::{
    collections::HashMap,
    io,
    sync::Arc,
    time::{Duration, Instant},
};

use tokio::runtime::Handle;

use super::open_loop::{read_replies, write_plan, Plan, Progress, STORM_IDS};
use crate::{
    client::{Client, Transport},
    probe,
    target::{Protocol, Target},
};

/// The concurrency limit a peer configured for the work's need gets: far above what the storm holds at once (its
/// rate times the cancel's lag, a handful) with the ordinary requests in flight, so that only the peers at their
/// defaults are limited.
pub const NEED: usize = 1024;

/// What one run measured.
#[derive(Clone, Debug, Default)]
pub struct StormRun {
    /// Each ordinary request answered: from its scheduled send time to its reply read.
    pub ordinary: Vec<Duration>,
    /// Ordinary requests scheduled and never answered (within the grace after the last write), sent or not.
    pub ordinary_missed: usize,
    /// Each storm cancel answered: from just before its frame was written to the cancelled reply read (LSP), or to
    /// the handler's guard dropped (MCP).
    pub cancels: Vec<Duration>,
    /// Cancels written and never answered (their requests left held until the connection closed).
    pub cancels_missed: usize,
    /// MCP: cancels whose handler never began its work (the cancel reached the server before the handler's first
    /// poll, so its guard was never made and nothing marks when the cancel took effect). Not timed, not missed.
    pub cancelled_before_start: usize,
    /// How late after its scheduled time the writer wrote each ordinary request: the harness's own floor.
    pub lateness: Vec<Duration>,
    /// Whether the target returned within twice the plan's grace of the connection closing.
    pub closed_cleanly: bool,
}

/// Run `plan` against `target` on a new in-memory duplex connection.
pub async fn run(target: &Target, plan: Plan) -> io::Result<StormRun> {
    probe::clear();
    let mut client = Client::connect(target, Transport::Duplex, NEED)?;
    client.handshake().await?;
    let storm_replies = target.protocol == Protocol::Lsp;
    let progress = Arc::new(Progress::new(storm_replies));
    let reader = tokio::spawn(read_replies(client.take_replies(), progress.clone()));
    let handle = Handle::current();
    // A moment ahead, so that the first requests are not late for the thread's start.
    let start = Instant::now() + Duration::from_millis(5);
    let writer_progress = progress.clone();
    let (client, sent) = tokio::task::spawn_blocking(move || {
        let sent = write_plan(&mut client, &handle, &plan, start, &writer_progress);
        (client, sent)
    })
    .await
    .map_err(io::Error::other)?;
    let read = reader.await.map_err(io::Error::other)?;
    // A handler stopped after this was left held by its cancel: the close stopped it.
    let close_began = Instant::now();
    let closed_cleanly = client.close(2 * plan.grace).await;

    let read: HashMap<u64, Instant> = read.into_iter().collect();
    let mut result = StormRun {
        lateness: sent.lateness,
        closed_cleanly,
        ..StormRun::default()
    };
    for index in 0..plan.ordinary_count() {
        match read.get(&(index + 1)) {
            Some(&at) => result
                .ordinary
                .push(at.saturating_duration_since(plan.ordinary_at(start, index))),
            None => result.ordinary_missed += 1,
        }
    }
    for (index, written) in sent.cancels_written.iter().enumerate() {
        let Some(written) = *written else { continue };
        let id = STORM_IDS + index as u64;
        if storm_replies {
            match read.get(&id) {
                Some(at) => result.cancels.push(at.saturating_duration_since(written)),
                None => result.cancels_missed += 1,
            }
            continue;
        }
        match probe::take_stop(id) {
            Some(at) if at < close_began => {
                result.cancels.push(at.saturating_duration_since(written))
            }
            Some(_) => result.cancels_missed += 1,
            None => result.cancelled_before_start += 1,
        }
    }
    Ok(result)
}
