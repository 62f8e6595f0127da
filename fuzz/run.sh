#!/usr/bin/env bash
# Build the fuzz targets and run each for a fixed number of executions.
#
#   fuzz/run.sh [--smoke] [RUNS] [TARGET...]
#
# RUNS is the number of executions per target: the argument, else $FUZZ_RUNS, else 100000 (20000 with --smoke,
# the short run CI does). TARGETs default to all of them. Works from any directory.
#
# A run fails (and the script exits non-zero, after running the other targets) on a panic or failed check, on an
# input that takes longer than -timeout seconds (a hang), and when the process grows past -rss_limit_mb (an
# unbounded allocation). The crashing input is saved under fuzz/artifacts/TARGET/; replay it with
# `cargo fuzz run --sanitizer none -O -a TARGET fuzz/artifacts/TARGET/crash-...`.
#
# The committed seeds in fuzz/corpus/TARGET are only read: libFuzzer writes new inputs to the first corpus
# directory it is given, here fuzz/target/corpus/TARGET, emptied before each run so every run starts from the
# seeds alone.
#
# Stable Rust: cargo-fuzz builds with AddressSanitizer by default, which takes `-Zsanitizer=address`, a flag only
# nightly accepts. With `--sanitizer none` every flag it passes is stable (-Cpasses=sancov-module, the
# -Cllvm-args=-sanitizer-coverage-* options, --cfg fuzzing, -Cdebug-assertions), so no RUSTC_BOOTSTRAP is
# needed. The crates forbid unsafe code, which is what ASan would guard; without it libFuzzer's -malloc_limit_mb
# has no malloc hooks, so memory is bounded by -rss_limit_mb alone, and the codec targets check their buffers
# themselves.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cargo_fuzz_version=0.13.2
targets_all=(content_length ndjson message cancel_lsp cancel_acp cancel_acp_draft cancel_mcp server
    abp_app abp_agent rap_invocation rap_notice rap_ids mcp_headers jsonrpc_batch)

runs=${FUZZ_RUNS:-100000}
targets=()
for arg in "$@"; do
    case $arg in
        --smoke) runs=${FUZZ_RUNS:-20000} ;;
        -h | --help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        '' | *[!0-9]*) targets+=("$arg") ;;
        *) runs=$arg ;;
    esac
done
[ ${#targets[@]} -gt 0 ] || targets=("${targets_all[@]}")

# Longer inputs only where they reach more code: a header block is cut at 8 KiB.
max_len() {
    case $1 in
        content_length) echo 16384 ;;
        *) echo 4096 ;;
    esac
}

# The pinned cargo-fuzz: the installed one if it is that version, else one installed under fuzz/target.
cargo_fuzz=(cargo fuzz)
if [ "$(cargo fuzz --version 2>/dev/null)" != "cargo-fuzz $cargo_fuzz_version" ]; then
    tools=$here/target/tools
    if [ "$("$tools/bin/cargo-fuzz" fuzz --version 2>/dev/null)" != "cargo-fuzz $cargo_fuzz_version" ]; then
        cargo install cargo-fuzz --version "$cargo_fuzz_version" --locked --root "$tools"
    fi
    cargo_fuzz=("$tools/bin/cargo-fuzz" fuzz)
fi

flags=(--sanitizer none --release --debug-assertions)
cd "$here"
"${cargo_fuzz[@]}" build "${flags[@]}"

failed=()
for target in "${targets[@]}"; do
    scratch=$here/target/corpus/$target
    log=$here/target/logs/$target.log
    rm -rf "$scratch"
    mkdir -p "$scratch" "$(dirname "$log")"
    start=$SECONDS
    status=0
    "${cargo_fuzz[@]}" run "${flags[@]}" "$target" "$scratch" "$here/corpus/$target" -- \
        -runs="$runs" -max_len="$(max_len "$target")" -rss_limit_mb=512 -timeout=10 \
        >"$log" 2>&1 || status=$?
    # libFuzzer ends a completed run with "Done N runs in S second(s)".
    done_line=$(grep -E '^Done [0-9]+ runs' "$log" || true)
    if [ "$status" -eq 0 ] && [ -n "$done_line" ]; then
        printf '%-17s ok    %s (%ss with start-up)\n' "$target" "$done_line" "$((SECONDS - start))"
    else
        printf '%-17s FAIL  exit %s; the end of %s:\n' "$target" "$status" "$log"
        grep -E -A12 'panicked|ERROR: libFuzzer|SUMMARY' "$log" | head -40 || tail -40 "$log"
        failed+=("$target")
    fi
done

if [ ${#failed[@]} -gt 0 ]; then
    echo "failed: ${failed[*]}" >&2
    exit 1
fi
