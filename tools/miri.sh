#!/usr/bin/env bash
# Run the unsafe shared-memory code's tests under Miri (undefined behaviour, data races,
# Stacked Borrows and Tree Borrows aliasing rules): the journal's commit protocol
# (src/journal/{shared,record,segment,recovery}.rs), the output streams (src/stream.rs) and the
# token tables' slot-array images, their loans to the snapshot writer's thread
# (src/exchange/slots.rs) and page population (src/exchange/tokens.rs, with the
# memory hints and start-up helpers of src/memory.rs it calls: prefetch, huge-page advice and
# population skipped there, work on the cores run on one thread).
#
# Miri cannot map files, so these tests run the same code over heap buffers or anonymous
# mappings (SharedBytes views); the file-mapping glue in reader.rs / writer.rs only builds
# such views from memmap2's raw mappings and is covered by the ordinary test suite, as are the
# message stores' file glue (src/stream.rs: create/open of the sparse file, the keeper's
# madvise calls), whose tests are ignored under Miri.
#
# Needs a nightly toolchain with the miri component (`rustup component add --toolchain
# nightly miri rust-src`). Usage: tools/miri.sh   (about 2 minutes on 2 cores, warm)
set -euo pipefail
cd "$(dirname "$0")/.."

filters=(journal::shared journal::record journal::segment journal::recovery::tests stream:: exchange::tokens memory::)

echo "== miri (stacked borrows)"
cargo +nightly miri test -p bourse --lib -- "${filters[@]}"
echo "== miri (tree borrows)"
MIRIFLAGS="${MIRIFLAGS:-} -Zmiri-tree-borrows" cargo +nightly miri test -p bourse --lib -- "${filters[@]}"
