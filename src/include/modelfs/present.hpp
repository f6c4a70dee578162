// SPDX-License-Identifier: Apache-2.0
#pragma once
// For the few readers that read a ByteSpan's bytes at open (a ZIP member's
// text, a record's magic): the span's bytes made present first, so that a
// remote model's cache is never read where it has a hole.
#include "modelfs/catalog.hpp"

namespace modelfs {

inline const ByteSpan& present(const ByteSpan& span) {
  if (span.mapped_file() != nullptr) span.mapped_file()->ensure_at(span.data(), span.size());
  return span;
}

}  // namespace modelfs
