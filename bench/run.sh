#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The benchmark of issue 7, in one command:
#   bench/run.sh [bench.py options: --rounds N, --models M..., --work DIR, --tag T]
# Installs what is missing (Debian), builds modelfs in Release into
# ./build-bench, generates the models into $BENCH_WORK (default
# /var/tmp/modelfs-bench; reused when complete), warms the page cache and
# runs bench/bench.py. Results: bench/results/<date>_<host>.{csv,md,png}.
# Mounts the models with FUSE; run as root so that modelfs can raise the
# mount's readahead (as it does for any root mount).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/deps.sh
bench/deps.sh

BUILD=build-bench
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DMODELFS_BUILD_TESTS=OFF >/dev/null
cmake --build "$BUILD" -j"$(nproc)" >/dev/null
g++ -O2 -std=c++20 -Wall -Wextra -pthread bench/randread.cpp -o "$BUILD/randread"

export BENCH_WORK=${BENCH_WORK:-/var/tmp/modelfs-bench}
/usr/bin/python3 bench/gen_models.py "$BENCH_WORK"
# Warm: the reference is the model file read from the page cache.
cat "$BENCH_WORK"/*.safetensors "$BENCH_WORK"/model.* >/dev/null

exec /usr/bin/python3 bench/bench.py --build "$BUILD" "$@"
