#!/usr/bin/env bash
# End-to-end latency runs for BENCHMARKS.md "End to end": the TCP echo floor, then the venue
# (bourse run, release build) driven open loop by bourse-loadgen, for each durability and wait
# strategy asked. Prints `uptime` before every figure (the machine is shared).
#
#   tools/bench/e2e.sh [RATES] [DURABILITY...]      e.g.  tools/bench/e2e.sh "10000 100000" async flush
#
# Environment: WAITS="park spin" (engine.wait values), SECS=5 (seconds per run), PACE=sleep|spin,
# OUT=/tmp/bourse-e2e (journals, histograms, plots), EXTRA="--busy-poll" (loadgen and echo flags),
# SETTLE=4 (seconds between the venue's start and the load).
set -euo pipefail
cd "$(dirname "$0")/../.."
RATES=${1:-"10000 100000 500000"}
shift || true
DURABILITIES=${*:-"async flush"}
WAITS=${WAITS:-"park spin"}
SECS=${SECS:-5}
PACE=${PACE:-sleep}
OUT=${OUT:-/tmp/bourse-e2e}
EXTRA=${EXTRA:-}
BIN=target/release
mkdir -p "$OUT"

echo "== echo floor (blocking server), same pacing and receive loop as the load generator"
$BIN/bourse-echo server --listen 127.0.0.1:0 --mode blocking > "$OUT/echo.addr" &
ECHO=$!
sleep 0.3
ADDR=$(sed 's/.*echo=//' "$OUT/echo.addr")
for rate in $RATES; do
  uptime
  echo "-- echo rate $rate"
  $BIN/bourse-echo client --connect "$ADDR" --rate "$rate" --duration "$SECS" --pace "$PACE" $EXTRA \
    --hist "$OUT/echo-$rate.hgrm"
done
kill "$ECHO"; wait "$ECHO" 2>/dev/null || true

for durability in $DURABILITIES; do
  for wait in $WAITS; do
    for rate in $RATES; do
      run="$durability-$wait-$rate"
      rm -rf "$OUT/journal-$run"
      sed -e "s|@JOURNAL@|$OUT/journal-$run|" -e "s|@DURABILITY@|$durability|" -e "s|@WAIT@|$wait|" \
        tools/bench/bench.toml > "$OUT/$run.toml"
      $BIN/bourse run --config "$OUT/$run.toml" > "$OUT/$run.addr" 2> "$OUT/$run.log" &
      VENUE=$!
      for _ in $(seq 50); do grep -q listening "$OUT/$run.addr" && break; sleep 0.1; done
      GW=$(sed 's/.*gateway=\([^ ]*\).*/\1/' "$OUT/$run.addr")
      # Let the journal helper finish pre-faulting the next segment (a 512 MB memset that
      # would otherwise compete with the run for the two cores).
      sleep "${SETTLE:-4}"
      uptime
      echo "-- bourse durability=$durability wait=$wait rate $rate"
      $BIN/bourse-loadgen --config "$OUT/$run.toml" --gateway "$GW" --rate "$rate" --duration "$SECS" \
        --pace "$PACE" --quiet $EXTRA --hist "$OUT/$run.hgrm" --plot "$OUT/$run.svg" || true
      kill "$VENUE"; wait "$VENUE" 2>/dev/null || true
      rm -rf "$OUT/journal-$run"
    done
  done
done
