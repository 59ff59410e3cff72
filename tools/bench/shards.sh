#!/usr/bin/env bash
# Closed-loop capacity of the two layouts on three symbols (BENCHMARKS.md §9): the venue with
# `compact`, then with `sharded` and 3 shards, each driven by three bourse-loadgen processes
# at once (one per symbol, two sessions each, closed loop). Prints `uptime` and every
# loadgen's report line. The figure is the venue's own count: its sequence number (`bourse
# admin status`) over MEASURE seconds that start once all three generators are sending (each
# first makes its orders, ~1 s, so their 5-s windows do not line up; the sum of their own
# achieved rates is printed too, and overstates the venue by the part of each window in which
# another generator was still making orders).
#
#   tools/bench/shards.sh [ROUNDS]        e.g. tools/bench/shards.sh 3
#
# Environment: SECS=5 (seconds of load), MEASURE=3 (seconds counted, within SECS), WINDOW=2000
# (Enters in flight per loadgen),
# DURABILITY=async, WAIT=park, OUT=/tmp/bourse-shards. Layouts alternate round by round so
# a change of the machine's load hits both.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${1:-3}
SECS=${SECS:-5}
MEASURE=${MEASURE:-3}
WINDOW=${WINDOW:-2000}
DURABILITY=${DURABILITY:-async}
WAIT=${WAIT:-park}
OUT=${OUT:-/tmp/bourse-shards}
BIN=target/release
SYMBOLS=(AAPL MSFT NVDA)
mkdir -p "$OUT"

accounts() { # accounts FIRST LAST: [[accounts]] LG0FIRST..LG0LAST
  local i
  for i in $(seq "$1" "$2"); do
    printf '[[accounts]]\nusername = "LG0%s"\npassword = "pw"\nfirm = "LG%s"\n\n' "$i" "$i"
  done
}

venue_config() { # venue_config LAYOUT SHARDS
  cat <<EOF
[gateway]
listen = "127.0.0.1:0"
session = "BENCH00001"
outbound_buffer_bytes = 16777216

[journal]
dir = "$OUT/journal-$1"
durability = "$DURABILITY"
segment_bytes = 536870912

[feed]
group = "239.195.0.2:26501"
interface = "127.0.0.1"
session = "BENCH00001"
rerequest = "127.0.0.1:0"
snapshot = "127.0.0.1:0"

[admin]
listen = "127.0.0.1:0"

[engine]
wait = "$WAIT"
layout = "$1"
shards = $2

[limits]
orders_per_symbol = 262144
levels_per_side = 8192
tokens_per_account = 1048576

$(accounts 1 6)
EOF
  for s in "${SYMBOLS[@]}"; do printf '[[symbols]]\nsymbol = "%s"\ntick = 100\n\n' "$s"; done
}

loadgen_config() { # loadgen_config INDEX: the venue's gateway, two accounts, one symbol
  local first=$((2 * $1 + 1))
  printf '[gateway]\nlisten = "127.0.0.1:1"\nsession = "BENCH00001"\n\n[journal]\ndir = "%s/unused"\n\n' "$OUT"
  printf '[feed]\ngroup = "239.195.0.2:26501"\ninterface = "127.0.0.1"\nsession = "BENCH00001"\n\n'
  accounts "$first" $((first + 1))
  printf '[[symbols]]\nsymbol = "%s"\ntick = 100\n' "${SYMBOLS[$1]}"
}

thread_ticks() { # thread_ticks PID: "thread user system" (clock ticks) of each of its threads
  cat /proc/"$1"/task/*/stat 2>/dev/null | awk '{print $2, $14, $15}'
}

venue_seq() { # venue_seq NAME: the venue's last sequence number
  $BIN/bourse admin --config "$OUT/$1-admin.toml" status | sed -n 's/^ok seq=\([0-9]*\).*/\1/p'
}

run_layout() { # run_layout LAYOUT SHARDS ROUND
  local name="$1-r$3"
  rm -rf "$OUT/journal-$1"
  venue_config "$1" "$2" > "$OUT/$name.toml"
  $BIN/bourse run --config "$OUT/$name.toml" > "$OUT/$name.addr" 2> "$OUT/$name.log" &
  local venue=$!
  for _ in $(seq 100); do grep -q listening "$OUT/$name.addr" && break; sleep 0.1; done
  sleep "${SETTLE:-4}"
  local gateway
  gateway=$(sed 's/.*gateway=\([^ ]*\).*/\1/' "$OUT/$name.addr")
  # `bourse admin` finds the daemon by its config: the admin port it bound, not port 0.
  local admin
  admin=$(sed 's/.*admin=\([^ ]*\).*/\1/' "$OUT/$name.addr")
  awk -v a="$admin" '/^\[admin\]/ {s=1} s && /^listen/ {$0="listen = \"" a "\""; s=0} {print}' \
    "$OUT/$name.toml" > "$OUT/$name-admin.toml"
  uptime
  local pids=()
  for i in 0 1 2; do
    loadgen_config "$i" > "$OUT/lg$i.toml"
    $BIN/bourse-loadgen --config "$OUT/lg$i.toml" --gateway "$gateway" --symbol "${SYMBOLS[$i]}" \
      --window "$WINDOW" --duration "$SECS" --seed $((i + 1)) --quiet \
      > "$OUT/$name-lg$i.txt" 2> "$OUT/$name-lg$i.err" &
    pids+=($!)
  done
  local measured="not measured (a generator never said it was sending)"
  for _ in $(seq 200); do
    [ "$(cat "$OUT/$name"-lg?.err 2>/dev/null | grep -c sending)" = 3 ] && break
    sleep 0.05
  done
  if [ "$(cat "$OUT/$name"-lg?.err | grep -c sending)" = 3 ]; then
    local seq0 seq1 t0 t1
    t0=$(date +%s.%N); seq0=$(venue_seq "$name")
    thread_ticks "$venue" > "$OUT/$name.ticks0"
    sleep "$MEASURE"
    t1=$(date +%s.%N); seq1=$(venue_seq "$name")
    thread_ticks "$venue" > "$OUT/$name.ticks1"
    measured=$(awk -v a="$seq0" -v b="$seq1" -v t0="$t0" -v t1="$t1" \
      'BEGIN {printf "%.0f inputs/s (venue, %d inputs in %.2f s, all three sending)", (b-a)/(t1-t0), b-a, t1-t0}')
  fi
  for p in "${pids[@]}"; do wait "$p" || echo "loadgen $p failed (see $OUT/$name-lg*.txt)"; done
  kill "$venue"; wait "$venue" 2>/dev/null || true
  local total=0
  for i in 0 1 2; do
    local line
    line=$(grep -m1 'achieved' "$OUT/$name-lg$i.txt" || echo "no report")
    echo "  $name ${SYMBOLS[$i]}: $line"
    total=$((total + $(echo "$line" | sed -n 's/.*achieved \([0-9]*\) ops\/s.*/\1/p')))
  done
  echo "== $1 ($2 shard(s)), round $3: $measured; generators' own rates summed: $total ops/s"
  # The venue's CPU over the measured seconds by thread (threads of one name summed, % of
  # one vCPU): what each layout spends, not only the rate it reaches.
  if [ -s "$OUT/$name.ticks1" ]; then
    awk -v secs="$MEASURE" -v hz="$(getconf CLK_TCK)" '
      NR == FNR {u0[$1] += $2; s0[$1] += $3; next}
      {u1[$1] += $2; s1[$1] += $3}
      END {
        line = "  venue cpu, % of a vCPU (user+sys):"
        for (t in u1) {
          u = (u1[t] - u0[t]) / hz / secs * 100; s = (s1[t] - s0[t]) / hz / secs * 100
          if (u + s >= 1) { line = line sprintf(" %s %.0f+%.0f", t, u, s); all += u + s }
        }
        printf "%s; all %.0f\n", line, all
      }' "$OUT/$name.ticks0" "$OUT/$name.ticks1"
  fi
}

for round in $(seq "$ROUNDS"); do
  run_layout compact 1 "$round"
  run_layout sharded 3 "$round"
done
