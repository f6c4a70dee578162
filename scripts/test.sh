#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The whole test suite, from a fresh Debian 12 machine: install what is
# missing, build, run every test (GoogleTest units and real FUSE mounts),
# then build again under AddressSanitizer and UBSan and run the suite again.
# ctest runs the entries side by side, one per CPU: each unit test and each
# mount test file is its own entry; those that need the machine to
# themselves are RUN_SERIAL (tests/CMakeLists.txt).
#   scripts/test.sh            both passes
#   MODELFS_SANITIZE=0 scripts/test.sh    the plain pass only
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/deps.sh
# ctest reports a mount file whose tests were only partly skipped as
# passed: after each run, the skipped tests with pytest's reasons (-rs),
# from ctest's log. Never fails the run.
list_skips() {
  local log="$1/Testing/Temporary/LastTest.log"
  [ -f "$log" ] || return 0
  awk '/^[0-9]+\/[0-9]+ Test: / { name = $3 }
       /^SKIPPED \[/ { if (!n++) print "skipped tests (pytest -rs):"; print "  " name ": " $0 }' "$log" || true
}

# Runs ctest on a build folder, lists what it skipped, returns its status.
run_ctest() {
  local status=0
  ctest --test-dir "$1" --output-on-failure -j"$(nproc)" || status=$?
  list_skips "$1"
  return "$status"
}

BUILD=${BUILD_DIR:-build}
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMODELFS_BUILD_TESTS=ON >/dev/null
cmake --build "$BUILD" -j"$(nproc)"
run_ctest "$BUILD"

[ "${MODELFS_SANITIZE:-1}" = 0 ] && exit 0

# Second pass: ASan + UBSan. Daemons detach, so their reports go to files,
# and any report fails the run.
SAN_BUILD=${SAN_BUILD_DIR:-build-sanitize}
cmake -S . -B "$SAN_BUILD" -DCMAKE_BUILD_TYPE=Debug -DMODELFS_SANITIZE=ON >/dev/null
cmake --build "$SAN_BUILD" -j"$(nproc)"
LOGS=$(mktemp -d /tmp/modelfs-sanitizer-XXXXXX)
export ASAN_OPTIONS="log_path=$LOGS/asan:detect_leaks=1:abort_on_error=0"
export UBSAN_OPTIONS="log_path=$LOGS/ubsan:print_stacktrace=1:halt_on_error=1"
export MODELFS_SANITIZED=1
run_ctest "$SAN_BUILD"
if compgen -G "$LOGS/*" >/dev/null; then
  echo "sanitizer reports:" >&2
  cat "$LOGS"/* >&2
  exit 1
fi
rm -rf "$LOGS"
echo "sanitizer pass: no reports"
