#!/usr/bin/env bash
# Start one bench venue in the background: tools/bench/venue.sh NAME DURABILITY WAIT
# Writes $OUT/NAME.toml, $OUT/NAME.pid; prints the gateway address once it listens.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/bourse-e2e}
name=$1 durability=$2 wait=$3
mkdir -p "$OUT"; rm -rf "$OUT/journal-$name"; : > "$OUT/$name.addr"
sed -e "s|@JOURNAL@|$OUT/journal-$name|" -e "s|@DURABILITY@|$durability|" -e "s|@WAIT@|$wait|" \
  -e "s|^tokens_per_account = .*|tokens_per_account = ${TOKENS:-1048576}|" \
  tools/bench/bench.toml > "$OUT/$name.toml"
"${BOURSE:-target/release/bourse}" run --config "$OUT/$name.toml" > "$OUT/$name.addr" 2> "$OUT/$name.log" &
echo $! > "$OUT/$name.pid"
for _ in $(seq 600); do grep -q listening "$OUT/$name.addr" && break; sleep 0.1; done
sleep "${SETTLE:-4}"   # the journal helper pre-faults the next segment first
sed 's/.*gateway=\([^ ]*\).*/\1/' "$OUT/$name.addr"
