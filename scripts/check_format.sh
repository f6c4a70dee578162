#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Fails when a C++ file under src, include, tests/unit, fuzz or examples is not
# as clang-format (Debian's, .clang-format at the top) would write it.
#   scripts/check_format.sh          check, print what differs
#   scripts/check_format.sh --fix    rewrite the files in place
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files 'src/*.cpp' 'src/*.hpp' 'include/*.hpp' 'tests/unit/*.cpp' \
  'tests/unit/*.hpp' 'fuzz/*.cpp' 'fuzz/*.hpp' 'examples/*.cpp')
if [ "${1:-}" = --fix ]; then
  clang-format -i "${files[@]}"
else
  clang-format --dry-run --Werror "${files[@]}"
fi
