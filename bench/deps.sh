#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Debian packages the benchmark needs on top of the project's: the peers
# (squashfuse, fuse-zip and the tools that make their images) and matplotlib
# for the chart. apt-get runs only when something is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
exec scripts/deps.sh squashfuse fuse-zip squashfs-tools zip python3-matplotlib aria2
