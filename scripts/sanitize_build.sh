#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The one clang build with AddressSanitizer and UBSan that serves both the
# sanitizer pass of scripts/test.sh and fuzz/run.sh: the tests, the program
# and the libFuzzer targets from the same objects (coverage-instrumented for
# the fuzzers), so CI compiles the project under the sanitizers once.
#   scripts/sanitize_build.sh [BUILD_DIR]     default: build-sanitize
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-sanitize}
if ! command -v clang++-14 >/dev/null || [ ! -e /usr/lib/llvm-14/lib/clang/14.0.6/lib/linux/libclang_rt.fuzzer-x86_64.a ]; then
  scripts/deps.sh clang-14 libclang-rt-14-dev
fi
CC=clang-14 CXX=clang++-14 cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DMODELFS_SANITIZE=ON -DMODELFS_FUZZ=ON -DMODELFS_BUILD_TESTS=ON >/dev/null
cmake --build "$BUILD" -j"$(nproc)" >"$BUILD/build.log" 2>&1 || { tail -80 "$BUILD/build.log" >&2; exit 1; }
