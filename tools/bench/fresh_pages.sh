#!/usr/bin/env bash
# What a new page of a file costs this machine on first touch (BENCHMARKS.md "Where the
# closed loop's CPU goes"): map a sparse file shared, reserve its blocks (`fallocate`, as the
# message stores do) and `MADV_POPULATE_WRITE` it in 256 KiB steps, as the stores' keeper
# thread does ahead of each writer; twice, so the second run gets the memory the first freed.
# On a VM whose balloon reports free pages to the host, memory the guest has not touched
# lately costs host faults: the first line is that cost, the second the kernel's own.
#   tools/bench/fresh_pages.sh [MiB, default 2000]
set -euo pipefail
MIB=${1:-2000}
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
cat > "$DIR/fresh.c" <<'C'
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
static double cpu(void) { return (double)clock() / CLOCKS_PER_SEC; }
int main(int argc, char **argv) {
  size_t total = (size_t)atol(argv[2]) << 20, step = 256 << 10, span = (size_t)1 << 40;
  int fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0644);
  if (fd < 0 || ftruncate(fd, (off_t)span) || fallocate(fd, 0, 0, (off_t)total)) return 1;
  char *p = mmap(0, span, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return 1;
  double c0 = cpu();
  for (size_t o = 0; o < total; o += step)
    if (madvise(p + o, step, MADV_POPULATE_WRITE)) return 1;
  double us_per_page = (cpu() - c0) * 1e6 / (double)(total / 4096);
  printf("%zu MiB populated: %.2f us of CPU a 4 KiB page\n", total >> 20, us_per_page);
  unlink(argv[1]);
  return 0;
}
C
gcc -O2 -o "$DIR/fresh" "$DIR/fresh.c"
grep -E '^(MemFree|Cached)' /proc/meminfo | tr -s ' ' | paste -sd ' '
echo -n "first run:  "; "$DIR/fresh" "$DIR/store" "$MIB"
echo -n "second run: "; "$DIR/fresh" "$DIR/store" "$MIB"
