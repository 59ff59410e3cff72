#!/usr/bin/env bash
# Capacity of the whole venue (issue 14 item 6), before and after in one run, for
# BENCHMARKS.md "End to end": the TCP echo floor, then for each build in BINS (directories
# holding bourse, bourse-loadgen, bourse-echo; interleaved round by round so a busy machine
# hurts both alike): open loop at each rate, closed loop at each window and session count.
# Every figure comes with `uptime` and the venue's CPU time (user, system) over the run,
# divided by the inputs it took: the cost per input, which moves less than throughput on a
# shared machine.
#
#   BINS="/tmp/base target/release" tools/bench/capacity.sh
#
# Environment: ROUNDS=2, RATES="10000 100000", WINDOWS="2000:4 8000:16" (window:sessions; more
# than 4 sessions adds accounts to the config), OPEN_SESSIONS=4 (the open-loop runs' sessions,
# and the echo floor's connections beside its one-connection floor), SECS=5, SETTLE=4,
# OUT=/tmp/bourse-capacity.
set -euo pipefail
cd "$(dirname "$0")/../.."
BINS=${BINS:-target/release}
ROUNDS=${ROUNDS:-2}
RATES=${RATES:-"10000 100000"}
WINDOWS=${WINDOWS:-"2000:4 8000:16"}
SECS=${SECS:-5}
OPEN_SESSIONS=${OPEN_SESSIONS:-4}
OUT=${OUT:-/tmp/bourse-capacity}
mkdir -p "$OUT"
ECHO_BIN=$(echo "$BINS" | awk '{print $1}')

config() { # config NAME SESSIONS -> path of a filled-in bench config with SESSIONS accounts
  local file="$OUT/$1.toml"
  sed -e "s|@JOURNAL@|$OUT/journal-$1|" -e "s|@DURABILITY@|async|" -e "s|@WAIT@|park|" \
    tools/bench/bench.toml > "$file"
  for n in $(seq 5 "$2"); do
    printf '\n[[accounts]]\nusername = "LG%02d"\npassword = "pw"\nfirm = "L%03d"\n' "$n" "$n" >> "$file"
  done
  echo "$file"
}

# The event loop's thread only (the main thread): the journal helper pre-faulting the next
# segment and the servers' threads are not per-input costs. Ticks: total user sys; page faults.
venue_cpu() { awk '{print $14 + $15, $14, $15, $10}' "/proc/$1/task/$1/stat"; }

run() { # run BIN NAME SESSIONS LOADGEN-ARGS...
  local bin=$1 name=$2 sessions=$3; shift 3
  rm -rf "$OUT/journal-$name"
  local cfg; cfg=$(config "$name" "$sessions")
  "$bin/bourse" run --config "$cfg" > "$OUT/$name.addr" 2> "$OUT/$name.log" &
  local venue=$!
  for _ in $(seq 100); do grep -q listening "$OUT/$name.addr" && break; sleep 0.1; done
  sleep "${SETTLE:-4}"
  local gw; gw=$(sed 's/.*gateway=\([^ ]*\).*/\1/' "$OUT/$name.addr")
  read -r t0 u0 s0 f0 < <(venue_cpu "$venue")
  echo "-- $bin: $name ($sessions sessions) $(uptime | sed 's/.*load/load/')"
  "$bin/bourse-loadgen" --config "$cfg" --gateway "$gw" --accounts "$sessions" --duration "$SECS" \
    --quiet "$@" > "$OUT/$name.out" 2>&1 || true
  read -r t1 u1 s1 f1 < <(venue_cpu "$venue")
  kill "$venue"; wait "$venue" 2>/dev/null || true
  grep -E '^sent|enter -> Accepted|unanswered' "$OUT/$name.out"
  local ops; ops=$(awk '/^sent/ {print $2}' "$OUT/$name.out")
  awk -v u=$((u1 - u0)) -v s=$((s1 - s0)) -v f=$((f1 - f0)) -v n="${ops:-0}" 'BEGIN {
    if (n > 0) printf "event loop cpu: user %.2f s + sys %.2f s = %.2f us per input; %.3f page faults per input\n",
      u/100, s/100, (u+s)/100/n*1e6, f/n }'
  rm -rf "$OUT/journal-$name"
}

for round in $(seq "$ROUNDS"); do
  echo "== round $round: echo floor (blocking server, same pacing and receive loop)"
  "$ECHO_BIN/bourse-echo" server --listen 127.0.0.1:0 --mode blocking > "$OUT/echo.addr" &
  ECHO=$!
  sleep 0.3
  ADDR=$(sed 's/.*echo=//' "$OUT/echo.addr")
  for rate in $RATES; do
    # One connection (the floor of earlier stops), and as many as the venue's open-loop run
    # has sessions (each connection a batch touches is a read and a write on both sides):
    # the latter is the like-for-like floor. Its line is `echoN round trip`.
    for conns in 1 "$OPEN_SESSIONS"; do
      echo "-- echo rate $rate, $conns connection(s) $(uptime | sed 's/.*load/load/')"
      label=echo; [ "$conns" = 1 ] || label="echo$conns"
      "$ECHO_BIN/bourse-echo" client --connect "$ADDR" --rate "$rate" --duration "$SECS" \
        --connections "$conns" 2>&1 | grep -E '^echo|round trip' | sed "s/^echo round trip/$label round trip/" || true
    done
  done
  kill "$ECHO"; wait "$ECHO" 2>/dev/null || true
  for bin in $BINS; do
    for rate in $RATES; do
      run "$bin" "open-$rate" "$OPEN_SESSIONS" --rate "$rate"
    done
    for spec in $WINDOWS; do
      run "$bin" "closed-${spec%%:*}" "${spec##*:}" --window "${spec%%:*}"
    done
  done
done
