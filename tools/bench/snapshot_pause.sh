#!/usr/bin/env bash
# The engine's pause at state snapshots under load (issue 14 item 4: snapshots "written off
# the hot path"), for BENCHMARKS.md section 7. Each build in BINS (directories holding `bourse`
# and `bourse-loadgen`; interleaved round by round) starts `bourse run --config CONFIG` on a
# fresh copy of the day in SOURCE (so every run restarts from the same files), waits for
# `listening`, runs `bourse-loadgen` closed loop for SECS seconds, reads the daemon's peak RSS,
# stops it with SIGTERM and prints its "snapshot written" lines (`pause_us`, the file's `bytes`,
# `encoded_bytes` where the build logs it, `write_ms`) and the generator's rate.
#
#   SOURCE=/tmp/ec20m16.base CONFIG=/tmp/ec20m16-snap.toml BINS="/tmp/before /tmp/after" \
#     tools/bench/snapshot_pause.sh
#
# CONFIG's `journal.dir` is where each run's copy goes (it is replaced); it needs `[snapshot]
# every_inputs` set. The day of section 7 (a 20M-input exchange-core day on 16 accounts):
#   bourse-journal synth /tmp/ec20m16 --workload exchange-core --ops 20000000 --accounts 16
#   bourse replay --journal /tmp/ec20m16 --write-snapshots-every 19000000
#   bourse run --config /tmp/ec20m16.toml        # once, until `listening`: creates the stores
#   cp -a --sparse=always /tmp/ec20m16 /tmp/ec20m16.base
#   sed 's/^every_inputs = 0/every_inputs = 400000/' /tmp/ec20m16.toml > /tmp/ec20m16-snap.toml
# Environment: ROUNDS=2, SECS=10, WINDOW=2000, ACCOUNTS=4, WAIT_S=120 (longest start).
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${SOURCE:?SOURCE=a copy of the day to start every run from}"
: "${CONFIG:?CONFIG=the path of a venue config with [snapshot] every_inputs}"
BINS=${BINS:-target/release}
ROUNDS=${ROUNDS:-2}
SECS=${SECS:-10}
WINDOW=${WINDOW:-2000}
ACCOUNTS=${ACCOUNTS:-4}
WAIT_S=${WAIT_S:-120}
. tools/bench/lib.sh
DAY=$(sed -n 's/^dir = "\(.*\)"$/\1/p' "$CONFIG" | head -1)
[ -n "$DAY" ] && [ "$DAY" != "$SOURCE" ] || { echo "journal.dir of $CONFIG must differ from SOURCE"; exit 2; }

run_once() { # run_once BIN LABEL
  local log lg pid port
  log=$(mktemp)
  lg=$(mktemp)
  rm -rf "$DAY" && cp -a --sparse=always "$SOURCE" "$DAY" && sync
  sleep 3
  local listening=yes
  start_until_listening "$1" "$CONFIG" "$log" "$WAIT_S" || listening=no
  pid=$VENUE_PID
  if [ "$listening" = no ]; then
    echo "$2: no 'listening' line; the log ends:" && tail -3 "$log"
    kill -9 "$pid" 2>/dev/null || true
    return
  fi
  port=$(grep -m1 '^listening' "$log" | sed 's/.*gateway=127.0.0.1:\([0-9]*\).*/\1/')
  "$1/bourse-loadgen" --config "$CONFIG" --gateway "127.0.0.1:$port" --window "$WINDOW" \
    --accounts "$ACCOUNTS" --duration "$SECS" --workload exchange-core >"$lg" 2>&1 || true
  sleep 3
  local peak
  peak=$(awk '/VmHWM/ {print $2 " kB"}' "/proc/$pid/status")
  kill -TERM "$pid"
  wait "$pid" 2>/dev/null || true
  echo "== $2 $(date +%T), load $(cut -d' ' -f1-3 /proc/loadavg), peak RSS $peak"
  grep -o 'restarting from a state snapshot last_seq=[0-9]*' "$log" | head -1 || true
  grep 'snapshot written' "$log" \
    | grep -oE '(last_seq|bytes|encoded_bytes|pause_us|write_ms)=[0-9]+' | paste -sd' ' \
    | sed 's/ last_seq=/\nlast_seq=/g' || true
  grep -E 'achieved' "$lg" || tail -2 "$lg"
  rm -f "$log" "$lg"
}

for round in $(seq 1 "$ROUNDS"); do
  for bin in $BINS; do
    run_once "$bin" "$bin, round $round"
  done
done
