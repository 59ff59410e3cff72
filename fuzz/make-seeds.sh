#!/usr/bin/env bash
# (Re)make the seed corpora of every target in fuzz/corpus/ from replay-logs/ and shared/data.
#   fuzz/make-seeds.sh [SHARED_DATA_DIR]     (default: ../shared/data next to the repository)
set -euo pipefail
cd "$(dirname "$0")/.."
data=${1:-../shared/data}
cargo run --quiet --manifest-path fuzz/Cargo.toml --bin make-seeds -- fuzz/corpus "$data"
