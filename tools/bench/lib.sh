# Shared by the bench scripts (sourced, not run).

# start_until_listening BIN CONFIG LOG WAIT_S: start `BIN/bourse run --config CONFIG` in the
# background with its output in LOG (its pid in VENUE_PID) and wait up to WAIT_S seconds, in
# 50 ms steps, for its `listening` line. Returns non-zero without one (the process is left to
# the caller: it may have exited).
start_until_listening() {
  "$1/bourse" run --config "$2" >"$3" 2>&1 &
  VENUE_PID=$!
  local _
  for _ in $(seq 1 $(($4 * 20))); do
    grep -q '^listening' "$3" && return 0
    kill -0 "$VENUE_PID" 2>/dev/null || break
    sleep 0.05
  done
  grep -q '^listening' "$3"
}
