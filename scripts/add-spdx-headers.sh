#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Puts "SPDX-License-Identifier: Apache-2.0" on the first line of every C++,
# CMake, Python and shell source that git tracks (after a #! line), in each
# language's comment syntax. Files that carry it already are left alone, so
# it can be run again after a merge; --check only lists the files without it
# (exit 1 if any).
#   scripts/add-spdx-headers.sh [--check]
set -euo pipefail
cd "$(dirname "$0")/.."
TAG="SPDX-License-Identifier: Apache-2.0"
check=0
[ "${1:-}" = --check ] && check=1

missing=0
while IFS= read -r -d '' file; do
  [ -f "$file" ] || continue
  case $file in
    fuzz/regressions/* | tests/fixtures/*) continue ;;
    *.cpp | *.hpp | *.h | *.cc | *.hpp.in) comment="//" ;;
    CMakeLists.txt | */CMakeLists.txt | *.cmake | *.cmake.in | *.py | *.sh) comment="#" ;;
    packaging/bash-completion/*) comment="#" ;;
    *)
      if head -n 1 "$file" | grep -qE '^#!.*[/ ](ba)?sh$'; then comment="#"; else continue; fi ;;
  esac
  head -n 2 "$file" | grep -qxF "$comment $TAG" && continue
  if [ "$check" = 1 ]; then
    echo "$file"
    missing=1
    continue
  fi
  if head -n 1 "$file" | grep -q '^#!'; then
    sed -i "1a $comment $TAG" "$file"
  else
    sed -i "1i $comment $TAG" "$file"
  fi
done < <(git ls-files -z)
exit "$missing"
