#!/usr/bin/env bash
# Debian packages the benchmark needs on top of scripts/deps.sh: the peers
# (squashfuse, fuse-zip and the tools that make their images) and matplotlib
# for the chart. apt-get runs only when something is missing.
set -euo pipefail

PACKAGES=(squashfuse fuse-zip squashfs-tools zip python3-matplotlib)

missing=()
for package in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$package")
done
[ ${#missing[@]} -eq 0 ] && exit 0

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "bench: installing ${missing[*]}" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
