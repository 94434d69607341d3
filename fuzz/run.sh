#!/usr/bin/env bash
# Runs every fuzz target for SECONDS each (default 60) with libFuzzer through cargo-fuzz
# (nightly toolchain; `cargo install cargo-fuzz` once). Prints, per target, the time, the
# executions and whether it found a crash. Crashing inputs are copied to
# tests/fuzz-regressions/<target>/, where `cargo test --test fuzz_regressions` (stable)
# replays them. No AddressSanitizer (-s none): the guest kernels that exitlab-lab embeds are
# freestanding C, which cannot link against ASan; the fuzzed code is safe Rust, where
# libFuzzer with debug assertions catches panics, overflows and OOMs.
set -uo pipefail
cd "$(dirname "$0")"
secs=${1:-60}
targets=$(cargo +nightly fuzz list)
mkdir -p corpus artifacts
printf '%-18s %8s %12s %s\n' target seconds executions result
for t in $targets; do
    mkdir -p "corpus/$t"
    start=$(date +%s)
    log=$(mktemp)
    cargo +nightly fuzz run -s none "$t" "corpus/$t" -- -max_total_time="$secs" -rss_limit_mb=4096 \
        -print_final_stats=1 >"$log" 2>&1
    rc=$?
    took=$(( $(date +%s) - start ))
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    if [ $rc -eq 0 ]; then
        result="no crash"
    else
        result="CRASH (exit $rc): $(grep -m1 -E 'panicked|ERROR: libFuzzer|SUMMARY' "$log")"
        mkdir -p "../tests/fuzz-regressions/$t"
        for a in artifacts/"$t"/crash-* artifacts/"$t"/oom-* artifacts/"$t"/timeout-*; do
            [ -f "$a" ] && cp "$a" "../tests/fuzz-regressions/$t/"
        done
        cp "$log" "artifacts/$t.log"
    fi
    printf '%-18s %8s %12s %s\n' "$t" "$took" "${execs:-?}" "$result"
    rm -f "$log"
done
