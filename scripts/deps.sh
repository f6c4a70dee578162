#!/usr/bin/env bash
# Installs, from Debian's packages, what modelfs needs to build, run and be
# tested, plus any packages named as arguments (bench/deps.sh names its
# own). Calls apt-get only when something is missing, so a machine that has
# everything is not touched (and needs no network).
#   scripts/deps.sh [EXTRA_PACKAGE...]
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config git
  fuse3 libfuse3-dev zlib1g-dev libzip-dev nlohmann-json3-dev libspdlog-dev
  libgtest-dev googletest
  python3 python3-numpy python3-pytest python3-torch python3-onnx
  attr dpkg-dev bash-completion man-db
  time  # /usr/bin/time: peak RSS in tests/mount/test_hostile_corpus.py
  "$@"
)

missing=()
for package in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$package")
done
[ ${#missing[@]} -eq 0 ] && exit 0

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "modelfs: installing ${missing[*]}" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
