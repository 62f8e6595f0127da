//! One run of table B: what a connection's close costs the others. Connection A holds many requests; connection B,
//! served by the same runtime, carries ordinary requests at a fixed rate; then A's client closes A.

use std::{
    io,
    sync::Arc,
    time::{Duration, Instant},
};

use tokio::runtime::Handle;

use super::open_loop::{read_replies, write_plan, Plan, Progress};
use crate::{
    client::{Client, Transport, HELD_MS},
    ours::LSP_STACK,
    workload::need_when_holding,
};

/// The start of B's run left out of its window before the close (the writer's start).
pub const WARM_UP: Duration = Duration::from_millis(100);
/// How long B runs on once A has returned, so that B's requests of A's last moments are answered in the open.
const AFTER: Duration = Duration::from_millis(100);
/// How long A's close may take.
const CLOSE_PATIENCE: Duration = Duration::from_secs(60);

/// What one run measured.
#[derive(Clone, Debug, Default)]
pub struct CloseRun {
    /// B's ordinary requests scheduled and answered before A's close (after [`WARM_UP`]): from the scheduled time to
    /// the reply read.
    pub before: Vec<Duration>,
    /// B's ordinary requests that overlap A's close: scheduled before A returned and answered after A's close began.
    pub during: Vec<Duration>,
    /// B's requests scheduled before A returned and never answered.
    pub missed: usize,
    /// From A's client closing A to A's serve future returned (every held request cancelled, the server gone).
    pub close_took: Duration,
    /// Whether A returned within `CLOSE_PATIENCE`.
    pub returned: bool,
}

/// Hold `held` requests on A, run B at `rate` requests per second, close A `before` after B starts (B's window
/// without a close: that time, [`WARM_UP`] left out); both connections are `CancelStack::lsp()` over the in-memory
/// duplex, on the runtime this runs on.
pub async fn run(held: u64, rate: f64, before: Duration) -> io::Result<CloseRun> {
    let mut a = Client::connect(&LSP_STACK, Transport::Duplex, need_when_holding(held))?;
    a.handshake().await?;
    for id in 1..=held {
        // One tag for all: the probe's record of stopped handlers (a map behind a lock) stays one entry instead of
        // growing to a million, with rehashes, inside A's close; the harness's cost, not the server's.
        a.queue_work_tagged(id, HELD_MS, 0);
        if a.queued() > 32 * 1024 {
            a.flush().await?;
        }
    }
    a.barrier(held + 1).await?;

    let mut b = Client::connect(&LSP_STACK, Transport::Duplex, 1)?;
    b.handshake().await?;
    let progress = Arc::new(Progress::new(true));
    let reader = tokio::spawn(read_replies(b.take_replies(), progress.clone()));
    let plan = Plan {
        ordinary_rate: rate,
        storm_rate: 0.0,
        // Ends when told to ([`Progress::stop`]), after A has returned.
        duration: before + CLOSE_PATIENCE + AFTER,
        grace: Duration::from_secs(1),
    };
    let handle = Handle::current();
    let start = Instant::now() + Duration::from_millis(5);
    let writer_progress = progress.clone();
    let writer = tokio::task::spawn_blocking(move || {
        let sent = write_plan(&mut b, &handle, &plan, start, &writer_progress);
        (b, sent)
    });

    tokio::time::sleep_until((start + before).into()).await;
    let close_began = Instant::now();
    let returned = a.close(CLOSE_PATIENCE).await;
    let close_ended = Instant::now();
    tokio::time::sleep(AFTER).await;
    progress.stop();
    let (b, sent) = writer.await.map_err(io::Error::other)?;
    let read = reader.await.map_err(io::Error::other)?;
    b.close(Duration::from_secs(2)).await;

    let mut answered = vec![None; sent.ordinary as usize];
    for (id, at) in read {
        if let Some(slot) = answered.get_mut((id as usize).wrapping_sub(1)) {
            *slot = Some(at);
        }
    }
    let mut result = CloseRun {
        close_took: close_ended - close_began,
        returned,
        ..CloseRun::default()
    };
    for (index, at) in answered.into_iter().enumerate() {
        let scheduled = plan.ordinary_at(start, index as u64);
        if scheduled >= close_ended {
            continue;
        }
        match at {
            Some(at)
                if scheduled >= start + WARM_UP && scheduled < close_began && at < close_began =>
            {
                result.before.push(at - scheduled);
            }
            Some(at) if at >= close_began => result.during.push(at - scheduled),
            Some(_) => {}
            None => result.missed += 1,
        }
    }
    Ok(result)
}
