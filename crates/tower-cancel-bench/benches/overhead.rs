//! Criterion benches of the in-process cost of each layer (the variants of `tower_cancel_bench::overhead`).
//!
//! Criterion's figure for each is its point estimate of the time per call (the slope of a linear regression of
//! time on iterations, as it prints it) with its 95% bootstrap interval; the harness copies them into
//! `bench-results/results.md` from `target/criterion/overhead/*/new/estimates.json`.
//!
//! `cargo bench -p tower-cancel-bench --bench overhead`

use std::{hint::black_box, time::Duration};

use criterion::{criterion_group, criterion_main, Criterion};
use tower_cancel_bench::overhead;

fn layers(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let _entered = runtime.enter();
    let mut group = c.benchmark_group("overhead");
    group.measurement_time(Duration::from_secs(3));
    group.warm_up_time(Duration::from_secs(1));
    for overhead::Variant { name, mut call, .. } in overhead::variants() {
        let mut id = 0;
        group.bench_function(name, |b| {
            b.iter(|| {
                id += 1;
                call(black_box(id));
            })
        });
    }
    group.finish();
}

criterion_group!(benches, layers);
criterion_main!(benches);
