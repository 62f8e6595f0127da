//! The runtime every end-to-end workload runs on.

use std::future::Future;

/// Run `work` on a fresh multi-thread runtime with 2 workers, so that no run inherits another's tasks.
pub fn on_fresh_runtime<F: Future + Send + 'static>(work: F) -> F::Output
where
    F::Output: Send + 'static,
{
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        tokio::spawn(work)
            .await
            .expect("the workload does not panic")
    })
}
