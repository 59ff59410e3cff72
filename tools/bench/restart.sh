#!/usr/bin/env bash
# Restart time of a venue from its journal and newest state snapshot (issue 14 item 4), for
# BENCHMARKS.md §7: each build in BINS (directories holding `bourse`; interleaved round by
# round) starts `bourse run --config CONFIG` on the same day, is timed from its start to its
# `listening` line, then killed with SIGKILL (the restart after a crash). Each timed start is
# "cold" (after `sync` and IDLE_S seconds idle: on a VM with free page reporting the memory
# the last run freed has gone back to the host, and every fresh page costs a hypervisor
# fault) and then "warm" (at once again). Prints wall time, the daemon's CPU (user + system
# from /proc) and the load average.
#
#   CONFIG=/data/ec100m16.toml BINS="/tmp/base target/release" tools/bench/restart.sh
#
# CONFIG names a day that restarts from a snapshot (see BENCHMARKS §7 for the 100M-input day:
# `bourse-journal synth`, `bourse replay --write-snapshots-every`, one full `bourse run` to
# create the message stores). Environment: ROUNDS=3, IDLE_S=25, WAIT_S=120 (longest start).
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${CONFIG:?CONFIG=the path of a venue config}"
BINS=${BINS:-target/release}
ROUNDS=${ROUNDS:-3}
IDLE_S=${IDLE_S:-25}
WAIT_S=${WAIT_S:-120}
TICKS=$(getconf CLK_TCK)
. tools/bench/lib.sh

# phases LOG STARTED -> when the state was restored and the journal recovered (seconds
# after the start), from the log lines' timestamps.
phases() {
  local at state recovered
  at() { grep -m1 "$1" "$2" | cut -d' ' -f1 | xargs -r date +%s.%N -d; }
  state=$(at "restarting from a state snapshot" "$1")
  recovered=$(at "journal recovered" "$1")
  printf 'state %.2f s, journal %.2f s' "$(echo "${state:-0} - $2" | bc)" \
    "$(echo "${recovered:-0} - $2" | bc)"
}

start_once() { # start_once BIN LABEL -> one line: seconds to listening, CPU, load
  local log pid started ended cpu
  log=$(mktemp)
  started=$(date +%s.%N)
  local listening=yes
  start_until_listening "$1" "$CONFIG" "$log" "$WAIT_S" || listening=no
  pid=$VENUE_PID
  ended=$(date +%s.%N)
  if [ "$listening" = no ]; then
    echo "$2: no 'listening' line; the log ends:" && tail -3 "$log"
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$log"
    return
  fi
  cpu=$(awk -v t="$TICKS" '{printf "%.2f user + %.2f sys", $14 / t, $15 / t}' "/proc/$pid/stat")
  kill -9 "$pid"
  wait "$pid" 2>/dev/null || true
  local from="full replay"
  grep -q "restarting from a state snapshot" "$log" && from="snapshot"
  printf '%s: %.2f s to listening (%s; %s); CPU %s; load %s\n' "$2" \
    "$(echo "$ended - $started" | bc)" "$from" "$(phases "$log" "$started")" "$cpu" \
    "$(cut -d' ' -f1 /proc/loadavg)"
  rm -f "$log"
}

for round in $(seq 1 "$ROUNDS"); do
  for bin in $BINS; do
    sync
    sleep "$IDLE_S"
    start_once "$bin" "round $round $bin cold"
    sync
    start_once "$bin" "round $round $bin warm"
  done
done
