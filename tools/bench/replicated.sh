#!/usr/bin/env bash
# Primary (replicated by default; DUR=flush|async to compare) + a standby, then the load
# generator open loop at RATE (default 100000) for 5 s; prints latencies and the standby lag.
set -u
cd "$(dirname "$0")/../.."
OUT=/tmp/repl-bench; rm -rf $OUT; mkdir -p $OUT
RATE=${1:-100000}
sed -e "s|@JOURNAL@|$OUT/journal-p|" -e "s|@DURABILITY@|${DUR:-replicated}|" -e "s|@WAIT@|park|" tools/bench/bench.toml > $OUT/p.toml
./target/release/bourse run --config $OUT/p.toml > $OUT/p.addr 2> $OUT/p.log & echo $! > $OUT/p.pid
for _ in $(seq 100); do grep -q listening $OUT/p.addr && break; sleep 0.1; done
REPL=$(sed 's/.*replication=\([^ ]*\).*/\1/' $OUT/p.addr); ADMIN=$(sed 's/.*admin=\([^ ]*\).*/\1/' $OUT/p.addr); GW=$(sed 's/.*gateway=\([^ ]*\).*/\1/' $OUT/p.addr)
sed -e "s|@JOURNAL@|$OUT/journal-s|" -e "s|@DURABILITY@|flush|" -e "s|@WAIT@|park|" -e "s|^\[replication\]$|[replication]\nprimary = \"$REPL\"\nprimary_admin = \"$ADMIN\"|" tools/bench/bench.toml > $OUT/s.toml
./target/release/bourse standby --config $OUT/s.toml > $OUT/s.out 2> $OUT/s.log & echo $! > $OUT/s.pid
sleep 5
uptime
./target/release/bourse-loadgen --config $OUT/p.toml --gateway $GW --rate $RATE --duration 5 > $OUT/lg.out 2> $OUT/lg.err; tail -11 $OUT/lg.out; tail -3 $OUT/lg.err
sleep 6
grep "replication lag" $OUT/s.log | tail -3 | sed 's/\x1b\[[0-9;]*m//g'
kill $(cat $OUT/s.pid) $(cat $OUT/p.pid) 2>/dev/null
