#!/usr/bin/env bash
# What the metrics endpoint costs the daemon (BENCHMARKS.md "Metrics"): the same open-loop
# load with [admin] metrics_listen off and on, alternated in one run so that the shared
# machine's drift hits both alike. With metrics on, the endpoint is scraped every second.
#
#   tools/bench/metrics.sh [RATES] [ROUNDS]      e.g.  tools/bench/metrics.sh "10000 100000" 3
#
# Environment: DURABILITY=async, WAIT=park, SECS=5, OUT=/tmp/bourse-metrics, SETTLE=4.
set -euo pipefail
cd "$(dirname "$0")/../.."
RATES=${1:-"10000 100000"}
ROUNDS=${2:-3}
DURABILITY=${DURABILITY:-async}
WAIT=${WAIT:-park}
SECS=${SECS:-5}
OUT=${OUT:-/tmp/bourse-metrics}
BIN=target/release
mkdir -p "$OUT"

for round in $(seq "$ROUNDS"); do
  for rate in $RATES; do
    for metrics in off on; do
      run="$metrics-$rate-$round"
      rm -rf "$OUT/journal-$run"
      sed -e "s|@JOURNAL@|$OUT/journal-$run|" -e "s|@DURABILITY@|$DURABILITY|" -e "s|@WAIT@|$WAIT|" \
        tools/bench/bench.toml > "$OUT/$run.toml"
      if [ "$metrics" = on ]; then
        sed -i 's|^\[admin\]$|[admin]\nmetrics_listen = "127.0.0.1:0"|' "$OUT/$run.toml"
      fi
      $BIN/bourse run --config "$OUT/$run.toml" > "$OUT/$run.addr" 2> "$OUT/$run.log" &
      VENUE=$!
      for _ in $(seq 200); do grep -q listening "$OUT/$run.addr" && break; sleep 0.1; done
      GW=$(sed 's/.*gateway=\([^ ]*\).*/\1/' "$OUT/$run.addr")
      SCRAPER=
      if [ "$metrics" = on ]; then
        M=$(sed 's/.*metrics=\([^ ]*\).*/\1/' "$OUT/$run.addr")
        ( while kill -0 "$VENUE" 2>/dev/null; do
            curl -s --max-time 2 "http://$M/metrics" > "$OUT/$run.prom" || true; sleep 1
          done ) &
        SCRAPER=$!
      fi
      sleep "${SETTLE:-4}"
      echo "-- metrics=$metrics rate=$rate round=$round load $(cut -d' ' -f1 /proc/loadavg)"
      $BIN/bourse-loadgen --config "$OUT/$run.toml" --gateway "$GW" --rate "$rate" \
        --duration "$SECS" --quiet --hist "$OUT/$run.hgrm" | grep -E "achieved|enter -> Accepted" || true
      # CPU seconds (user + system) of the venue's threads during its life, by thread name.
      TICKS=$(getconf CLK_TCK)
      for task in /proc/"$VENUE"/task/*; do
        echo "$(cat "$task/comm") $(awk -v t="$TICKS" '{printf "%.2f", ($14 + $15) / t}' "$task/stat")"
      done | awk '{cpu[$1] += $2} END {for (n in cpu) printf "cpu %s %.2f s\n", n, cpu[n]}' | sort
      kill "$VENUE"; wait "$VENUE" 2>/dev/null || true
      [ -n "$SCRAPER" ] && { kill "$SCRAPER" 2>/dev/null || true; wait "$SCRAPER" 2>/dev/null || true; }
      rm -rf "$OUT/journal-$run"
    done
  done
done
