#!/usr/bin/env bash
# Whether giving file pages back behind a writer makes its next pages cheaper on this VM
# (BENCHMARKS.md "Stop 39: ... why fresh pages cannot be recycled"): a writer populates a
# fallocated file mapping 256 KiB ahead of itself (`MADV_POPULATE_WRITE`, as the message
# stores' keeper does) at RATE MB/s, and every step LAG MiB behind it is written back
# (`sync_file_range`), unmapped and dropped (`POSIX_FADV_DONTNEED`); prints the populates'
# CPU a 4 KiB page for each LAG (0: never given back), with a pause between runs so one
# run's freed memory is not the next one's.
#   tools/bench/recycled_pages.sh [MiB, default 800] [RATE MB/s, default 200] ["LAGS", default "0 32 8"]
set -euo pipefail
MIB=${1:-800}
RATE=${2:-200}
LAGS=${3:-"0 32 8"}
PAUSE_S=${PAUSE_S:-6}
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
cat > "$DIR/recycled.c" <<'C'
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
static double seconds(clockid_t clock) {
  struct timespec t;
  clock_gettime(clock, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}
int main(int argc, char **argv) {
  size_t total = (size_t)atol(argv[2]) << 20, step = 256 << 10, lag = (size_t)atol(argv[4]) << 20;
  double rate = atof(argv[3]) * 1e6;
  int fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0644);
  if (fd < 0 || ftruncate(fd, (off_t)total) || fallocate(fd, 0, 0, (off_t)total)) return 1;
  char *p = mmap(0, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return 1;
  double populate_s = 0, t0 = seconds(CLOCK_MONOTONIC);
  for (size_t o = 0; o < total; o += step) {
    double c = seconds(CLOCK_THREAD_CPUTIME_ID);
    if (madvise(p + o, step, MADV_POPULATE_WRITE)) return 1;
    populate_s += seconds(CLOCK_THREAD_CPUTIME_ID) - c;
    memset(p + o, 0x5a, step);
    if (lag && o >= lag) {
      size_t back = o - lag;
      sync_file_range(fd, (off_t)back, step, SYNC_FILE_RANGE_WRITE);
      if (back >= lag) {
        size_t drop = back - lag;
        sync_file_range(fd, (off_t)drop, step, SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
        madvise(p + drop, step, MADV_DONTNEED);
        posix_fadvise(fd, (off_t)drop, step, POSIX_FADV_DONTNEED);
      }
    }
    double due = t0 + (double)(o + step) / rate;
    while (seconds(CLOCK_MONOTONIC) < due) {
      struct timespec pause = {0, 200000};
      nanosleep(&pause, 0);
    }
  }
  printf("%zu MiB at %.0f MB/s, given back %zu MiB behind (0: never): %.2f us of CPU a 4 KiB page\n",
         total >> 20, rate / 1e6, lag >> 20, populate_s * 1e6 / (double)(total / 4096));
  unlink(argv[1]);
  return 0;
}
C
gcc -O2 -o "$DIR/recycled" "$DIR/recycled.c"
for lag in $LAGS; do
  sleep "$PAUSE_S"
  "$DIR/recycled" "$DIR/store" "$MIB" "$RATE" "$lag"
done
