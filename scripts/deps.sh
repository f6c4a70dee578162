#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs, from Debian's packages, what modelfs needs, plus any packages
# named as arguments (bench/deps.sh names its own). Calls apt-get only when
# something is missing, so a machine that has everything is not touched (and
# needs no network).
#   scripts/deps.sh [EXTRA_PACKAGE...]          build, run and test (CI)
#   scripts/deps.sh --build [EXTRA_PACKAGE...]  build and run only (the quick start)
#   scripts/deps.sh --print [--build]           print the list, install nothing
set -euo pipefail

# Building modelfs and running it (numpy: the quick start reads a tensor
# with it). Nothing here pulls torch, onnx or their GUI and GIS libraries.
BUILD=(
  build-essential cmake pkg-config
  fuse3 libfuse3-dev zlib1g-dev libzip-dev nlohmann-json3-dev libspdlog-dev
  libcurl4-openssl-dev  # remote models: HTTP(S), S3 SigV4 (src/remote)
  libhdf5-dev libseccomp-dev  # HDF5 and Keras: libhdf5 in a seccomp-sandboxed child (src/formats/hdf5_sandbox.hpp)
  libsnappy-dev  # TensorFlow checkpoint index blocks (src/formats/leveldb_table.cpp)
  libpugixml-dev  # OpenVINO IR .xml (src/formats/openvino.cpp)
  python3 python3-numpy
)
# The test suite on top (scripts/test.sh): oracles, packaging, tools the
# tests drive.
TEST=(
  git libgtest-dev googletest
  ccache  # scripts/test.sh: the quick start's fresh copy compiles from the plain build's cache
  clang-14 libclang-rt-14-dev  # the sanitizer pass and the fuzz targets: one clang build (scripts/sanitize_build.sh)
  clang-format  # scripts/check_format.sh, the ctest entry style.clang_format
  python3-pytest python3-torch python3-onnx
  python3-h5py  # tests/mount/test_keras_mount.py: the oracle for HDF5 files
  python3-snappy  # tests/mount/test_tfckpt_mount.py: the test's bundle writer
  libflatbuffers-dev  # tests/unit/tflite_test.cpp, executorch_test.cpp: flatbuffers::FlatBufferBuilder writes the test models
  python3-flatbuffers  # tests/mount/test_tflite_mount.py, test_executorch_mount.py: the tests' writers
  attr dpkg-dev bash-completion man-db
  nginx-light  # tests/mount/test_remote.py: the HTTP server remote models are mounted from
  time      # /usr/bin/time: peak RSS in tests/mount/test_hostile_corpus.py
  debhelper lintian mmdebstrap  # tests/mount/test_packaging.py: build, lint, install in a clean root
  systemd   # systemd-analyze verify of the man page's .mount unit
)

build_only=0 print=0
while [ $# -gt 0 ]; do
  case $1 in
    --build) build_only=1 ;;
    --print) print=1 ;;
    *) break ;;
  esac
  shift
done
PACKAGES=("${BUILD[@]}")
[ "$build_only" = 1 ] || PACKAGES+=("${TEST[@]}")
PACKAGES+=("$@")
if [ "$print" = 1 ]; then
  printf '%s\n' "${PACKAGES[@]}"
  exit 0
fi

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
