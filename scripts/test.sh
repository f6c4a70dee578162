#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine: install what is
# missing, build, run every test (GoogleTest units and real FUSE mounts).
#   scripts/test.sh            build in ./build and run everything
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/deps.sh
BUILD=${BUILD_DIR:-build}
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD" -j"$(nproc)"
ctest --test-dir "$BUILD" --output-on-failure -j1
