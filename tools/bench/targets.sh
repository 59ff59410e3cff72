#!/usr/bin/env bash
# Every open speed target of issues 10, 11 and 14 measured in one sitting, for BENCHMARKS.md
# "Where the open targets stand": each figure beside the peer or floor it is judged against,
# measured by the same command in the same minutes (this machine's rates swing between
# sittings, so only ratios within one run mean anything). Raw output of each step in OUT;
# the summary at the end. About 2 minutes on 2 vCPUs, after a release build of the workspace
# (`cargo build --release --workspace --bins`).
#
#   tools/bench/targets.sh
#
# Environment: OUT=/tmp/bourse-targets, OPS=3000000 (inputs of the replayed day).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/bourse-targets}
OPS=${OPS:-3000000}
BIN=target/release
mkdir -p "$OUT"
for tool in bourse bourse-loadgen bourse-echo bourse-journal instr kernelcost; do
  [ -x "$BIN/$tool" ] || { echo "no $BIN/$tool: cargo build --release --workspace --bins"; exit 1; }
done
command -v valgrind > /dev/null || { echo "valgrind is needed for the instruction counts"; exit 1; }
step() { echo "== $1 ($(date +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg))"; }

step "the machine: what its kernel charges for the operations the end-to-end figures pay"
"$BIN/kernelcost" > "$OUT/kernelcost.txt" 2>&1
step "issue 10: compact vs sharded (3 shards), closed loop on three symbols"
tools/bench/shards.sh 2 > "$OUT/shards.txt" 2>&1
step "issue 11: quorum vs async, open loop at 10k and 100k orders/s"
ROUNDS=1 tools/bench/cluster.sh "10000 100000" > "$OUT/cluster.txt" 2>&1
step "issue 14.1: instructions of the exchange and of the book on the exchange-core mix"
for mode in exchange book; do
  valgrind --tool=callgrind --callgrind-out-file=/dev/null --collect-atstart=no \
    --toggle-collect='*instr::measure*' "$BIN/instr" exchange-core "$mode" > /dev/null \
    2> "$OUT/instr-$mode.txt"
done
step "issue 14.3: replay of a ${OPS}-input exchange-core day"
rm -rf "$OUT/day" "$OUT/day.toml"
"$BIN/bourse-journal" synth "$OUT/day" --workload exchange-core --ops "$OPS" > /dev/null
: > "$OUT/replay.txt"
for _ in 1 2 3; do
  for digest in "" --no-digest; do
    # shellcheck disable=SC2086 # the flag is one word or none
    "$BIN/bourse" replay --journal "$OUT/day" $digest 2>&1 | grep '^replayed' \
      | sed "s/^/${digest:-digests} /" >> "$OUT/replay.txt"
  done
done
rm -rf "$OUT/day" "$OUT/day.toml"
step "issue 14.6: closed loop, and open loop at 100k/s against the echo floor"
OUT="$OUT/capacity" ROUNDS=1 RATES=100000 WINDOWS="2000:4" tools/bench/capacity.sh \
  > "$OUT/capacity.txt" 2>&1

echo
echo "== summary (raw output in $OUT)"
echo "the machine (ns; \`kernelcost\`):"
sed -n 's/^/  /; 2,$p' "$OUT/kernelcost.txt"
echo "issue 10, sharded beats compact (inputs/s by the venue's count):"
grep -E '^== (compact|sharded)' "$OUT/shards.txt" | sed 's/; generators.*//; s/^== /  /'
echo "issue 11, quorum p50 within 2x of async (order -> Accepted, us):"
awk '/^== (async|quorum) rate/ {label = $2 " " $4}
     /enter -> Accepted/ {print "  " label ": p50 " $5 ", p99 " $7}' "$OUT/cluster.txt"
echo "issue 14.1, exchange within 1.5x of the book (instructions):"
for mode in exchange book; do
  echo "  $mode: $(sed -n 's/.*I *refs: *//p' "$OUT/instr-$mode.txt")"
done
echo "issue 14.3, replay >= 5M/s with digests, >= 10M/s without:"
sed 's/^/  /' "$OUT/replay.txt"
echo "issue 14.6, >= 1M inputs/s closed loop; p50 at 100k/s within 1.5x of the echo floor:"
awk '/^echo round trip/ {print "  echo floor, 1 connection: p50 " $5 ", p99 " $7}
     /^echo[0-9]+ round trip/ {print "  echo floor, " substr($1, 5) " connections (as the venue'"'"'s sessions): p50 " $5 ", p99 " $7}
     /^-- .*: open-/ {label = "open 100k"} /^-- .*: closed-/ {label = "closed 2000:4"}
     /^sent/ && label != "" {print "  " label ": " $0}
     /enter -> Accepted/ && label != "" {print "  " label ": p50 " $5 ", p99 " $7}' \
  "$OUT/capacity.txt"
