//! One variant of figure 1 called many times, for an instruction profile of what a request costs:
//!
//! ```sh
//! cargo build --release -p tower-cancel-bench --bin call_profile
//! valgrind --tool=callgrind --callgrind-out-file=stack.out \
//!     target/release/call_profile "CancelStack::lsp() (full default stack)" 100000
//! callgrind_annotate --inclusive=yes stack.out | head -60
//! ```
//!
//! Run it twice with two counts (say 100 000 and 200 000) and divide the difference of the totals by the
//! difference of the counts: the instructions of one call, without the start-up's.

use std::hint::black_box;

use tower_cancel_bench::overhead;

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(name), Some(count)) = (args.next(), args.next()) else {
        eprintln!("usage: call_profile VARIANT COUNT (the variant's name as figure 1 gives it)");
        list_and_exit();
    };
    let Ok(count) = count.parse::<i64>() else {
        eprintln!("COUNT must be a whole number, not {count:?}");
        std::process::exit(2);
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let _entered = runtime.enter();
    let Some(mut variant) = overhead::variants().into_iter().find(|v| v.name == name) else {
        eprintln!("no variant named {name:?}");
        list_and_exit();
    };
    for id in 1..=count {
        (variant.call)(black_box(id));
    }
}

fn list_and_exit() -> ! {
    eprintln!("variants:");
    for variant in overhead::variants() {
        eprintln!("  {}", variant.name);
    }
    std::process::exit(2);
}
