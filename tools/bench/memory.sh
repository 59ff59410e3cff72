#!/usr/bin/env bash
# Memory of the venue over a run: tools/bench/memory.sh RATE SECS
# Starts one bench venue (venue.sh NAME async park; BOURSE=path picks another daemon binary),
# drives it with bourse-loadgen at RATE orders/s for SECS, and samples /proc/PID/status
# (VmRSS, RssAnon, RssFile, VmPTE, in MB) every EVERY (10) s while the load runs; then
# stops the venue. TOKENS sets limits.tokens_per_account (a run must not run out of them: ~3.8M an
# account per 200 s at 100k/s).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/bourse-e2e}
rate=$1 secs=$2 every=${EVERY:-10} name=${NAME:-mem}
GW=$(tools/bench/venue.sh "$name" async park)
pid=$(cat "$OUT/$name.pid")
trap 'kill "$pid" 2>/dev/null || true' EXIT
# bourse-loadgen sends at most 20M orders a run: longer runs are chunks of CHUNK (200) s, each a
# new login of every account with fresh tokens (its run tag comes from the clock).
chunk=${CHUNK:-200}
(
  left=$secs
  while [ "$left" -gt 0 ]; do
    d=$(( left < chunk ? left : chunk ))
    target/release/bourse-loadgen --config "$OUT/$name.toml" --gateway "$GW" --rate "$rate" \
      --duration "$d" --quiet || true   # a chunk's report counts errors; the run goes on
    left=$(( left - d ))
  done
) > "$OUT/$name.loadgen" 2>&1 &
lg=$!
mb() { awk -v k="$1:" '$1 == k { printf "%.0f", $2 / 1024 }' "/proc/$pid/status"; }
printf '%6s %8s %8s %8s %6s\n' t_s VmRSS RssAnon RssFile VmPTE
start=$(date +%s)
while kill -0 "$lg" 2>/dev/null; do
  printf '%6s %8s %8s %8s %6s\n' $(( $(date +%s) - start )) "$(mb VmRSS)" "$(mb RssAnon)" "$(mb RssFile)" "$(mb VmPTE)"
  for _ in $(seq "$every"); do kill -0 "$lg" 2>/dev/null || break; sleep 1; done
done
printf '%6s %8s %8s %8s %6s  (after the load)\n' $(( $(date +%s) - start )) "$(mb VmRSS)" "$(mb RssAnon)" "$(mb RssFile)" "$(mb VmPTE)"
wait "$lg" || true
grep -E "^sent|rejected|Accepted " "$OUT/$name.loadgen"
du -sh --apparent-size "$OUT/journal-$name" | sed 's/^/apparent /'; du -sh "$OUT/journal-$name" | sed 's/^/on disk  /'
