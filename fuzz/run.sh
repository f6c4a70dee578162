#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the libFuzzer targets with clang (scripts/sanitize_build.sh) and
# runs each for a while, seeded from the project's sample model and
# ../shared/fixtures when present.
#   fuzz/run.sh [SECONDS_PER_TARGET] [TARGET...]     default 30 s, every target
# MODELFS_FUZZ_JOBS=N runs N targets at once (default: one a CPU).
# A crash stops that target with the input saved under build-sanitize/crashes/;
# keep it as a regression under fuzz/regressions/<target>/ once fixed.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET=${1:-30}
shift || true

# The targets are built with the sanitizer pass's build (scripts/sanitize_build.sh):
# after scripts/test.sh, nothing is left to compile.
BUILD=build-sanitize
# MODELFS_FUZZ_NO_BUILD=1: reuse the build as it is (to run several batches at once).
[ "${MODELFS_FUZZ_NO_BUILD:-0}" = 1 ] || scripts/sanitize_build.sh "$BUILD"

TARGETS=("$@")
# Every target of fuzz/targets.txt, the list CMake builds.
[ ${#TARGETS[@]} -eq 0 ] && mapfile -t TARGETS < <(grep -E '^[a-z0-9_]+$' fuzz/targets.txt)
SHARED=$(cd .. && pwd)/shared/fixtures

seed() {  # seed <target> <files...>
  local corpus=$BUILD/corpus/$1
  mkdir -p "$corpus"
  shift
  for f in "$@"; do [ -f "$f" ] && cp -n "$f" "$corpus/" 2>/dev/null || true; done
  if [ -d "fuzz/regressions/${corpus##*/}" ]; then cp -n fuzz/regressions/"${corpus##*/}"/* "$corpus/" 2>/dev/null || true; fi
}
shopt -s nullglob
seed fuzz_safetensors examples/*.safetensors "$SHARED"/real/safetensors/*
seed fuzz_gguf "$SHARED"/real/gguf/*
seed fuzz_protobuf "$SHARED"/real/onnx/*.onnx "$SHARED"/generated/onnx/*.onnx
seed fuzz_onnx "$SHARED"/real/onnx/*.onnx "$SHARED"/generated/onnx/*.onnx
seed fuzz_zip "$SHARED"/real/pt/* "$SHARED"/generated/pt/* "$SHARED"/real/pt2/*
seed fuzz_torch "$SHARED"/real/pt/* "$SHARED"/generated/pt/*
seed fuzz_pt2 "$SHARED"/real/pt2/*
seed fuzz_hdf5 "$SHARED"/realworld2/files/keras/*.h5
# The unpickler is seeded with the pickles inside the torch fixtures.
mkdir -p "$BUILD/corpus/fuzz_unpickler"
for f in "$SHARED"/real/pt/* "$SHARED"/generated/pt/*; do
  [ -f "$f" ] || continue
  /usr/bin/python3 - "$f" "$BUILD/corpus/fuzz_unpickler" <<'PY' 2>/dev/null || true
import sys, zipfile, pathlib, hashlib
source, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
try:
    with zipfile.ZipFile(source) as z:
        for name in z.namelist():
            if name.endswith(".pkl"):
                data = z.read(name)
                (out / hashlib.sha1(data).hexdigest()).write_bytes(data)
except zipfile.BadZipFile:
    data = source.read_bytes()
    (out / hashlib.sha1(data).hexdigest()).write_bytes(data)
PY
done
seed fuzz_unpickler
# TensorFlow.js seeds: each fixture's model.json, a NUL, its shards' bytes
# (the input fuzz_tfjs.cpp takes).
mkdir -p "$BUILD/corpus/fuzz_tfjs"
for d in "$SHARED"/realworld2/files/tfjs/*/; do
  /usr/bin/python3 - "$d" "$BUILD/corpus/fuzz_tfjs" <<'PY' 2>/dev/null || true
import json, sys, pathlib
folder, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
text = (folder / "model.json").read_bytes()
shards = b"".join((folder / p).read_bytes() for g in json.loads(text)["weightsManifest"] for p in g["paths"])
(out / folder.name).write_bytes(text + b"\0" + shards)
PY
done
seed fuzz_tfjs
seed fuzz_tflite "$SHARED"/realworld2/files/tflite/*.tflite
# ExecuTorch seeds: each program; the data_map program with its .ptd after
# the marker fuzz_executorch.cpp splits at; the .ptd alone.
seed fuzz_executorch "$SHARED"/realworld2/files/executorch/*.pte \
  "$SHARED"/realworld2/files/executorch/etrs_data_map/*.ptd
for p in "$SHARED"/realworld2/files/executorch/*/model.pte; do
  { cat "$p"; printf '\n--ptd--\n'; cat "$(dirname "$p")"/*.ptd; } \
    >"$BUILD/corpus/fuzz_executorch/$(basename "$(dirname "$p")")_pair" || true
done
# OpenVINO IR seeds: each fixture's .xml, a NUL, its .bin (the input
# fuzz_openvino.cpp takes).
mkdir -p "$BUILD/corpus/fuzz_openvino"
for x in "$SHARED"/realworld2/files/openvino/*/*.xml; do
  b=${x%.xml}.bin
  [ -f "$b" ] || continue
  { cat "$x"; printf '\0'; cat "$b"; } >"$BUILD/corpus/fuzz_openvino/$(basename "$(dirname "$x")")" || true
done
seed fuzz_openvino
# Legacy GGML seeds: the small real files (Parakeet's, the n_dims refusal).
seed fuzz_ggml_legacy "$SHARED"/realworld4/files/ggml/whispercpp_for-tests-ggml-parakeet-*.bin \
  "$SHARED"/realworld4/files/hostile/whispercpp_for-tests-ggml-whisper-bad-ndims.bin
seed fuzz_llamafile "$SHARED"/realworld4/files/llamafile/*.llamafile
seed fuzz_nemo "$SHARED"/realworld4/files/nemo/*.nemo "$SHARED"/realworld4/files/hostile/*.nemo
# PaddlePaddle seeds: the .pdparams; each program, then the marker
# fuzz_paddle.cpp splits at and its .pdiparams when it has one.
mkdir -p "$BUILD/corpus/fuzz_paddle"
for m in "$SHARED"/realworld4/files/paddle/*/__model__ "$SHARED"/realworld4/files/paddle/*/*.pdmodel; do
  { cat "$m"; p=${m%.pdmodel}.pdiparams; [ "$p" = "$m" ] || [ ! -f "$p" ] || { printf '\n--pdiparams--\n'; cat "$p"; }; } \
    >"$BUILD/corpus/fuzz_paddle/$(basename "$(dirname "$m")")" || true
done
seed fuzz_paddle "$SHARED"/realworld4/files/paddle/*.pdparams
seed fuzz_open_model examples/*.safetensors "$SHARED"/real/*/* "$SHARED"/generated/*/*
seed fuzz_export examples/*.safetensors "$SHARED"/real/*/* "$SHARED"/generated/*/*
# The numeric views and the tree builder read their inputs as numbers of
# their own (FuzzedDataProvider): no model file is a seed of theirs.
seed fuzz_numeric_views
seed fuzz_tree
# The hostile corpus's shapes (long names, deep sharing, expanded views, a
# ZIP bomb ...), shrunk to seeds under 64 KiB: fuzz/make_seeds.py.
/usr/bin/python3 fuzz/make_seeds.py "$BUILD/corpus" >/dev/null || echo "fuzz: hostile seeds not made" >&2

mkdir -p "$BUILD/crashes"
# One target a CPU at a time, each for its full time; results in list order.
fuzz_one() {  # fuzz_one <target>: its status to $BUILD/<target>.status
  local target=$1 rc=0
  "$BUILD/fuzz/$target" "$BUILD/corpus/$target" -max_total_time="$SECONDS_PER_TARGET" \
    -max_len=1048576 -rss_limit_mb=2048 -timeout=20 -print_final_stats=1 \
    -artifact_prefix="$BUILD/crashes/$target-" 2>"$BUILD/$target.log" || rc=$?
  echo "$rc" >"$BUILD/$target.status"
}
JOBS=${MODELFS_FUZZ_JOBS:-$(nproc)}
echo "fuzz: ${#TARGETS[@]} targets, ${SECONDS_PER_TARGET}s each, $JOBS at a time"
running=0
for target in "${TARGETS[@]}"; do
  rm -f "$BUILD/$target.status"
  if [ "$running" -ge "$JOBS" ]; then
    wait -n || true
    running=$((running - 1))
  fi
  fuzz_one "$target" &
  running=$((running + 1))
done
wait || true
status=0
passed=0
failed=0
for target in "${TARGETS[@]}"; do
  echo "== $target: ${SECONDS_PER_TARGET}s"
  if [ "$(cat "$BUILD/$target.status" 2>/dev/null)" != 0 ]; then
    echo "$target FAILED; see $BUILD/$target.log and $BUILD/crashes/" >&2
    tail -40 "$BUILD/$target.log" >&2
    status=1
    failed=$((failed + 1))
  else
    passed=$((passed + 1))
  fi
  grep -E "stat::number_of_executed_units|stat::new_units_added" "$BUILD/$target.log" | sed 's/^/   /'
done
echo "fuzz: $passed passed, $failed failed"
exit $status
