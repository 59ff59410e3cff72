#!/usr/bin/env bash
# Three cluster members (`quorum`) and one venue alone (`async`) on this machine, then
# bourse-loadgen open loop against each in turn at every RATE (default "10000 100000"), the two
# interleaved so both see the same machine; prints each run's latency table.
#   tools/bench/cluster.sh ["10000 100000"]        SECS=5 (seconds per run), ROUNDS=1
# MINORITY_DELAY_US=N sets the members' `cluster.minority_append_delay_us` (0: raft's own sends).
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/bourse-cluster-bench}
RATES=${1:-"10000 100000"}
SECS=${SECS:-5}
ROUNDS=${ROUNDS:-1}
BIN=${BIN:-target/release}
BASE=${BASE:-24100}   # members on BASE+1..3, gateways BASE+11..13, re-request +21..23, snapshot +31..33, admin +41..43
pkill_ours() { for f in "$OUT"/*.pid; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null; done; sleep 1; }
pkill_ours; rm -rf "$OUT"; mkdir -p "$OUT"

template() { # NAME DURABILITY
  sed -e "s|@JOURNAL@|$OUT/journal-$1|" -e "s|@DURABILITY@|$2|" -e "s|@WAIT@|park|" \
      -e "s|^segment_bytes = .*|segment_bytes = 134217728|" tools/bench/bench.toml
}

template alone async > "$OUT/alone.toml"
for i in 1 2 3; do
  template m$i quorum \
    | sed -e "0,/^listen = /s|^listen = .*|listen = \"127.0.0.1:$((BASE + 10 + i))\"|" \
          -e "/^\[admin\]/{n;s|^listen = .*|listen = \"127.0.0.1:$((BASE + 40 + i))\"|}" \
          -e "s|^rerequest = .*|rerequest = \"127.0.0.1:$((BASE + 20 + i))\"|" \
          -e "s|^snapshot = .*|snapshot = \"127.0.0.1:$((BASE + 30 + i))\"|" \
          -e "s|^group = .*|group = \"239.195.0.2:26501\"|" > "$OUT/m$i.toml"
  # The first `listen =` is the gateway's; `bourse admin --config` needs a fixed admin port.
  cat >> "$OUT/m$i.toml" <<EOF

[cluster]
id = $i
members = ["127.0.0.1:$((BASE + 1))", "127.0.0.1:$((BASE + 2))", "127.0.0.1:$((BASE + 3))"]
secret = "the benchmark cluster's secret"
EOF
  if [ -n "${MINORITY_DELAY_US:-}" ]; then echo "minority_append_delay_us = $MINORITY_DELAY_US" >> "$OUT/m$i.toml"; fi
done

for name in alone m1 m2 m3; do
  $BIN/bourse run --config "$OUT/$name.toml" > "$OUT/$name.addr" 2> "$OUT/$name.log" &
  echo $! > "$OUT/$name.pid"
done
for name in alone m1 m2 m3; do
  for _ in $(seq 100); do grep -q listening "$OUT/$name.addr" && break; sleep 0.1; done
done
sleep "${SETTLE:-4}"
LEADER=""
for _ in $(seq 100); do
  for i in 1 2 3; do
    if $BIN/bourse admin --config "$OUT/m$i.toml" status 2>/dev/null | grep -q "role=leader.*serving=yes"; then LEADER=$i; fi
  done
  [ -n "$LEADER" ] && break; sleep 0.1
done
[ -n "$LEADER" ] || { echo "no leader"; pkill_ours; exit 1; }
echo "leader: member $LEADER"
ALONE_GW=$(sed 's/.*gateway=\([^ ]*\).*/\1/' "$OUT/alone.addr")
cpu_ms() { # CPU time (user + system, ms) of each process so far
  for name in alone m1 m2 m3; do echo -n "$name=$(awk '{print ($14 + $15) * 10}' "/proc/$(cat "$OUT/$name.pid")/stat") "; done
}
run() { # LABEL CONFIG GATEWAY RATE TAG
  echo "== $1 rate $4 (load $(cut -d' ' -f1 /proc/loadavg))"
  before=$(cpu_ms)
  $BIN/bourse-loadgen --config "$2" --gateway "$3" --rate "$4" --duration "$SECS" --run-tag "$5" \
      --quiet --hist "$OUT/$1-$4-$5.hgrm" > "$OUT/lg.out" 2> "$OUT/lg.err"
  grep -E "^sent|latency|enter -> Accepted|^rejected" "$OUT/lg.out"; tail -2 "$OUT/lg.err"
  echo "cpu ms before: $before"; echo "cpu ms after:  $(cpu_ms)"
}
n=0
for round in $(seq "$ROUNDS"); do
  for rate in $RATES; do
    n=$((n + 1))
    run async "$OUT/alone.toml" "$ALONE_GW" "$rate" "A$(printf %03d $n)"
    run quorum "$OUT/m$LEADER.toml" "127.0.0.1:$((BASE + 10 + LEADER))" "$rate" "Q$(printf %03d $n)"
  done
done
for i in 1 2 3; do $BIN/bourse admin --config "$OUT/m$i.toml" status; done
pkill_ours
