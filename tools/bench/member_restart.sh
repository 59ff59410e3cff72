#!/usr/bin/env bash
# Restart of a cluster member (issue 14 item 4 for the cluster layout): three members
# (`quorum`, `[snapshot] every_inputs = EVERY`), closed-loop load on the leader for SECS
# seconds, then a follower killed with -9 and started again ROUNDS times, alternately with its
# snapshots moved aside (a full replay) and in place (newest snapshot + the committed tail).
# Prints, per restart, the seconds from `bourse run` to its "cluster member recovered its
# journal" line (the state rebuilt) and to `listening`, and the process's CPU time then.
# With BIN_B=dir the restarts alternate between two builds instead, both from the snapshots
# (an A/B of the restart path; the load and the other members run BIN).
#   tools/bench/member_restart.sh        SECS=20 EVERY=1000000 ROUNDS=3 BIN=target/release
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/bourse-member-restart}
SECS=${SECS:-20}
EVERY=${EVERY:-1000000}
ROUNDS=${ROUNDS:-3}
BIN=${BIN:-target/release}
BASE=${BASE:-24200}   # members on BASE+1..3, gateways +11..13, re-request +21..23, GLIMPSE +31..33, admin +41..43
pkill_ours() { for f in "$OUT"/*.pid; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null; done; sleep 1; }
pkill_ours; rm -rf "$OUT"; mkdir -p "$OUT"
for i in 1 2 3; do
  sed -e "s|@JOURNAL@|$OUT/journal-m$i|" -e "s|@DURABILITY@|quorum|" -e "s|@WAIT@|park|" \
      -e "s|^segment_bytes = .*|segment_bytes = 134217728|" tools/bench/bench.toml \
    | sed -e "0,/^listen = /s|^listen = .*|listen = \"127.0.0.1:$((BASE + 10 + i))\"|" \
          -e "/^\[admin\]/{n;s|^listen = .*|listen = \"127.0.0.1:$((BASE + 40 + i))\"|}" \
          -e "s|^rerequest = .*|rerequest = \"127.0.0.1:$((BASE + 20 + i))\"|" \
          -e "s|^snapshot = .*|snapshot = \"127.0.0.1:$((BASE + 30 + i))\"|" \
          -e "s|^group = .*|group = \"239.195.0.3:26502\"|" > "$OUT/m$i.toml"
  cat >> "$OUT/m$i.toml" <<EOF

[snapshot]
every_inputs = $EVERY
keep = 2

[cluster]
id = $i
members = ["127.0.0.1:$((BASE + 1))", "127.0.0.1:$((BASE + 2))", "127.0.0.1:$((BASE + 3))"]
secret = "the benchmark cluster's secret"
EOF
done
start() { # I [BIN]: start member I (with BIN's bourse)
  ${2:-$BIN}/bourse run --config "$OUT/m$1.toml" > "$OUT/m$1.addr" 2> "$OUT/m$1.log" &
  echo $! > "$OUT/m$1.pid"
}
status() { $BIN/bourse admin --config "$OUT/m$1.toml" status 2>/dev/null; }
for i in 1 2 3; do start $i; done
sleep 4
LEADER=""
for _ in $(seq 100); do
  for i in 1 2 3; do status $i | grep -q "role=leader.*serving=yes" && LEADER=$i; done
  [ -n "$LEADER" ] && break; sleep 0.1
done
[ -n "$LEADER" ] || { echo "no leader"; pkill_ours; exit 1; }
VICTIM=$((LEADER % 3 + 1))
echo "leader: member $LEADER; the restarted follower: member $VICTIM"
$BIN/bourse-loadgen --config "$OUT/m$LEADER.toml" --gateway "127.0.0.1:$((BASE + 10 + LEADER))" \
  --window 2000 --accounts 4 --duration "$SECS" --quiet > "$OUT/lg.out" 2>&1
grep -E "^sent" "$OUT/lg.out"
commit() { status "$1" | sed 's/.*commit=\([0-9]*\).*/\1/'; }
for _ in $(seq 600); do [ "$(commit $VICTIM)" = "$(commit $LEADER)" ] && break; sleep 0.1; done
echo "commit index: $(commit $LEADER); snapshots of member $VICTIM: $(ls "$OUT/journal-m$VICTIM/snapshots" | tr '\n' ' ')"
SNAPS="$OUT/journal-m$VICTIM/snapshots"
for round in $(seq "$ROUNDS"); do
  HOWS="full snapshot"; [ -n "${BIN_B:-}" ] && HOWS="snapshot snapshot-B"
  for how in $HOWS; do
    kill -9 "$(cat "$OUT/m$VICTIM.pid")"; sleep 1
    if [ $how = full ]; then mv "$SNAPS" "$OUT/snapshots-aside"; fi
    t0=$(date +%s.%N)
    if [ $how = snapshot-B ]; then start $VICTIM "$BIN_B"; else start $VICTIM; fi
    pid=$(cat "$OUT/m$VICTIM.pid")
    recovered=""
    for _ in $(seq 3000); do
      if [ -z "$recovered" ] && grep -q "cluster member recovered its journal" "$OUT/m$VICTIM.log"; then
        recovered=$(echo "$(date +%s.%N) - $t0" | bc)
        cpu=$(awk '{printf "%.2f + %.2f", $14 / 100, $15 / 100}' /proc/$pid/stat)
      fi
      grep -q listening "$OUT/m$VICTIM.addr" && break; sleep 0.01
    done
    listening=$(echo "$(date +%s.%N) - $t0" | bc)
    from=$(grep -o "restarting from a state snapshot last_seq=[0-9]*" "$OUT/m$VICTIM.log" | head -1)
    echo "round $round, $how: state rebuilt in ${recovered:-?} s (cpu user + sys ${cpu:-?} s), listening in $listening s; ${from:-full replay} (load $(cut -d' ' -f1 /proc/loadavg))"
    if [ $how = full ]; then
      for _ in $(seq 600); do [ "$(commit $VICTIM)" = "$(commit $LEADER)" ] && break; sleep 0.1; done
      mv "$OUT/snapshots-aside" "$SNAPS"
      # A full replay leaves the snapshots it finds in place; those moved aside come back.
    fi
  done
done
[ -n "${KEEP:-}" ] || pkill_ours
