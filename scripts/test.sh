#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The whole test suite, from a fresh Debian 12 machine: install what is
# missing, build, run every test (GoogleTest units and real FUSE mounts),
# then build again under AddressSanitizer and UBSan (clang; the same build
# makes the fuzz targets, scripts/sanitize_build.sh) and run the suite again.
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

# Compilations go through ccache: the quick start's test builds a fresh copy
# of the project inside the build folder, and with the cache's base at the
# checkout (paths below it hashed relative to the build folder) each of its
# compilations is one the plain build made already.
if command -v ccache >/dev/null; then
  export CMAKE_CXX_COMPILER_LAUNCHER=${CMAKE_CXX_COMPILER_LAUNCHER-ccache}
  export CMAKE_C_COMPILER_LAUNCHER=${CMAKE_C_COMPILER_LAUNCHER-ccache}
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD} CCACHE_NOHASHDIR=1
fi
BUILD=${BUILD_DIR:-build}
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMODELFS_BUILD_TESTS=ON -DMODELFS_BUILD_CSI=ON >/dev/null
cmake --build "$BUILD" -j"$(nproc)"

# The sanitizer build compiles while the plain pass runs, at the lowest
# priority: mount tests wait on FUSE, servers and child processes much of
# the time, and the compiler takes the CPU they leave idle without slowing
# them (a nice 19 process gets a sliver of a CPU that is wanted).
SAN_BUILD=${SAN_BUILD_DIR:-build-sanitize}
if [ "${MODELFS_SANITIZE:-1}" != 0 ]; then
  setsid nice -n 19 scripts/sanitize_build.sh "$SAN_BUILD" &
  san_build=$!
  # A failed plain pass ends the script: the build ends with it.
  trap 'kill -- "-$san_build" 2>/dev/null || true' EXIT
fi
run_ctest "$BUILD"

[ "${MODELFS_SANITIZE:-1}" = 0 ] && exit 0

# Second pass: ASan + UBSan. Daemons detach, so their reports go to files,
# and any report fails the run.
wait "$san_build"
trap - EXIT
LOGS=$(mktemp -d /tmp/modelfs-sanitizer-XXXXXX)
# handle_sigbus=0: a SIGBUS is the program's to handle (its guard) or to die
# of (the death tests of a fault outside the guard), not a sanitizer report.
export ASAN_OPTIONS="log_path=$LOGS/asan:detect_leaks=1:abort_on_error=0:handle_sigbus=0"
export UBSAN_OPTIONS="log_path=$LOGS/ubsan:print_stacktrace=1:halt_on_error=1"
export MODELFS_SANITIZED=1
run_ctest "$SAN_BUILD"
# LeakSanitizer's tracer cannot attach to a process under the HDF5 child's
# seccomp filter: it writes that it could not look, which is no finding.
for report in "$LOGS"/*; do
  [ -e "$report" ] || continue
  grep -qv "Unable to get registers from thread" "$report" || rm -f "$report"
done
if compgen -G "$LOGS/*" >/dev/null; then
  echo "sanitizer reports:" >&2
  cat "$LOGS"/* >&2
  exit 1
fi
rm -rf "$LOGS"
echo "sanitizer pass: no reports"
