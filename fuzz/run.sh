#!/usr/bin/env bash
# Run one fuzz target for a bounded number of executions and time, then print one summary
# line: target, executions, executions/s, and whether libFuzzer found a crash.
#
#   fuzz/run.sh TARGET [RUNS] [MAX_SECONDS]      e.g. fuzz/run.sh ouch 10000000 1800
#
# SANITIZER=none runs without AddressSanitizer (cargo fuzz -s none; coverage-guided all the
# same, panics and assertion failures are still crashes): ~10x the executions per second on
# targets that do file I/O, for safe code (the unsafe modules have Miri runs, tools/miri.sh).
#
# Needs nightly and cargo-fuzz (`cargo install cargo-fuzz`). Seeds: `fuzz/make-seeds.sh`.
# The corpus grows in fuzz/corpus/TARGET; crashes land in fuzz/artifacts/TARGET; the full
# libFuzzer output in fuzz/logs/TARGET.log. Run targets one after another on a shared machine.
set -euo pipefail
cd "$(dirname "$0")/.."
target=$1
runs=${2:-10000000}
max_seconds=${3:-3600}
max_len=4096
case $target in journal_*) max_len=10300 ;; esac
mkdir -p fuzz/logs "fuzz/corpus/$target"
log=fuzz/logs/$target.log
status=0
cargo +nightly fuzz run ${SANITIZER:+-s "$SANITIZER"} "$target" "fuzz/corpus/$target" -- \
    -runs="$runs" -max_total_time="$max_seconds" -max_len="$max_len" \
    -print_final_stats=1 >"$log" 2>&1 || status=$?
executions=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
per_second=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
crash=$(grep -m1 -oE 'deadly signal|panicked at [^ ]*|ERROR: libFuzzer: [a-z-]*|SUMMARY: [A-Za-z]*Sanitizer: [a-z-]*' "$log" || true)
echo "$target executions=${executions:-?} exec_per_s=${per_second:-?} exit=$status crash=${crash:-none}"
