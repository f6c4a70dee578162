#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Fails when libmodelfs.so exports more than its documented API: more than
# LIMIT dynamic symbols, or any of the library's internals (the tree's
# builder and parts, the readers' side of the catalog and of detection,
# the budget's private charges), or any standard-library instantiation
# (cmake/libmodelfs.map keeps those out). Fails too when the library would
# change the program that links it: a global operator new or delete of its
# own, or a use of a process-wide hook (a signal handler, a jump out of
# one, fork or exit handlers), which are the program's to install.
#   scripts/check_exports.sh path/to/libmodelfs.so [LIMIT]
set -euo pipefail
library=$1
limit=${2:-250}
count=$(nm -D --defined-only "$library" | wc -l)
internal='modelfs::(TreeBuilder|slice_parts|ComputedBytes|Part\b|Tree::Impl|TensorSpec|FormatReader|ModelFile|charge_budget|add_metadata_bytes|safetensors_dtype|dtype_from_safetensors)'
leaked=$(nm -D -C --defined-only "$library" | grep -E "$internal|^[0-9a-f]+ [A-Za-z] (std|__gnu_cxx)::" || true)
allocator=$(nm -D -C --defined-only "$library" | grep -E 'operator (new|delete)' || true)
# pthread_atfork is glibc's __register_atfork once linked; __cxa_atexit
# (destructors of statics) is every C++ library's and is not a hook.
hooks=$(nm -D --undefined-only "$library" | awk '{print $NF}' | sed 's/@.*//' |
  grep -Ex 'sigaction|signal|sigset|bsd_signal|sysv_signal|siglongjmp|longjmp|_longjmp|__longjmp_chk|__sigsetjmp|sigsetjmp|_setjmp|setjmp|pthread_atfork|__register_atfork|atexit|on_exit|at_quick_exit' || true)
status=0
# fail WHAT FOUND: says WHAT and the lines FOUND, when there are any.
fail() {
  [ -n "$2" ] || return 0
  echo "$library $1" >&2
  echo "$2" >&2
  status=1
}
[ "$count" -le "$limit" ] || fail "exports $count symbols, more than $limit" " "
fail "exports internals:" "$leaked"
fail "defines global allocation operators (a host program's allocator is its own):" "$allocator"
fail "imports process-wide hooks (signal handlers, fork or exit handlers are the program's):" "$hooks"
[ "$status" -ne 0 ] || echo "$library exports $count symbols, no internal, no allocator, no process-wide hook"
exit "$status"
