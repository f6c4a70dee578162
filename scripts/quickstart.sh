#!/usr/bin/env bash
# Quick start: install what is missing (Debian packages), build, and mount
# the bundled sample model.
#   scripts/quickstart.sh [MOUNTPOINT]     default: ./mnt/sample
set -euo pipefail
cd "$(dirname "$0")/.."

# Only what building and running need: the test suite's packages (torch,
# onnx and what they bring) are scripts/test.sh's to install.
scripts/deps.sh --build
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMODELFS_BUILD_TESTS=OFF >/dev/null
cmake --build build -j"$(nproc)" >/dev/null

MODEL=examples/sample-model.safetensors
MNT=${1:-mnt/sample}
mkdir -p "$MNT"
MNT=$(cd "$MNT" && pwd)
if mountpoint -q "$MNT"; then fusermount3 -u "$MNT"; fi
build/modelfs "$MODEL" "$MNT"

cat <<MSG

The sample model is mounted at $MNT. Look around:

  \$ ls $MNT/model/layers/0/self_attn/q_proj
  $(ls "$MNT/model/layers/0/self_attn/q_proj" | tr '\n' ' ')
  \$ od -A d -t f4 -N 16 $MNT/model/norm/weight
$(od -A d -t f4 -N 16 "$MNT/model/norm/weight" | sed 's/^/  /')
  \$ cat $MNT/lm_head/weight.json | head -5
$(head -5 "$MNT/lm_head/weight.json" | sed 's/^/  /')
  \$ python3 -c "import numpy as np; a = np.load('$MNT/lm_head/weight.npy', mmap_mode='r'); print(a.shape, a.dtype)"
  $(/usr/bin/python3 -c "import numpy as np; a = np.load('$MNT/lm_head/weight.npy', mmap_mode='r'); print(a.shape, a.dtype)")

Every tensor: $MNT/.modelfs/index.json
Unmount with: fusermount3 -u $MNT
MSG
