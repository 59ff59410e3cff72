#!/usr/bin/env bash
# How often an idle venue's threads wake: voluntary context switches per second of each
# thread of `bourse run` over SECS seconds, no client connected (BENCHMARKS.md "Stop 29").
#   tools/bench/idle.sh                      # the embedded default config
#   CONFIG=my.toml BIN=/tmp/A/bourse tools/bench/idle.sh
set -euo pipefail
BIN=$(realpath "${BIN:-target/release/bourse}")
CONFIG=${CONFIG:+$(realpath "$CONFIG")}
SECS=${SECS:-5}
DIR=$(mktemp -d)
trap 'kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; rm -rf "$DIR"' EXIT
cd "$DIR"
"$BIN" run ${CONFIG:+--config "$CONFIG"} > addr 2> log &
PID=$!
for _ in $(seq 100); do grep -q listening addr 2>/dev/null && break; sleep 0.1; done
sleep 2 # start-up work (prefault, first segment) is not idleness
snap() { # "tid comm switches" per thread
  for t in /proc/"$PID"/task/*; do
    echo "$(basename "$t") $(cat "$t/comm") $(awk '/^voluntary_ctxt_switches/{print $2}' "$t/status")"
  done | sort
}
snap > a; sleep "$SECS"; snap > b
join a b | awk -v s="$SECS" '{d = $5 - $3; total += d; printf "%-22s %8.1f/s\n", $2, d / s}
  END {printf "%-22s %8.1f/s\n", "TOTAL", total / s}'
