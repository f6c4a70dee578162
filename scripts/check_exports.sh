#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Fails when libmodelfs.so exports more than its documented API: more than
# LIMIT dynamic symbols, or any of the library's internals (the tree's
# builder and parts, the readers' side of the catalog and of detection,
# the budget's private charges), or any standard-library instantiation
# (cmake/libmodelfs.map keeps those out).
#   scripts/check_exports.sh path/to/libmodelfs.so [LIMIT]
set -euo pipefail
library=$1
limit=${2:-250}
count=$(nm -D --defined-only "$library" | wc -l)
internal='modelfs::(TreeBuilder|slice_parts|ComputedBytes|Part\b|Tree::Impl|TensorSpec|FormatReader|ModelFile|charge_budget|add_metadata_bytes|safetensors_dtype|dtype_from_safetensors)'
leaked=$(nm -D -C --defined-only "$library" | grep -E "$internal|^[0-9a-f]+ [A-Za-z] (std|__gnu_cxx)::" || true)
status=0
if [ "$count" -gt "$limit" ]; then
  echo "$library exports $count symbols, more than $limit" >&2
  status=1
fi
if [ -n "$leaked" ]; then
  echo "$library exports internals:" >&2
  echo "$leaked" >&2
  status=1
fi
[ "$status" -ne 0 ] || echo "$library exports $count symbols, no internal"
exit "$status"
