// SPDX-License-Identifier: Apache-2.0
#include "modelfs/check.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "formats/read_back.hpp"
#include "modelfs/error.hpp"

namespace modelfs {
namespace {

// A tensor's bytes in a mapped file; `tensors`: how many tensors share them.
struct Placed {
  const MappedFile* file;
  uint64_t begin;
  uint64_t end;
  const Tensor* tensor;
  uint64_t tensors = 1;
};

}  // namespace

CheckSummary check_model(const Catalog& catalog, const IntegrityChecks& checks,
                         const std::function<void(uint64_t, uint64_t)>& progress) {
  CheckSummary summary;
  check_model(catalog, checks, progress, summary);
  return summary;
}

void check_model(const Catalog& catalog, const IntegrityChecks& checks,
                 const std::function<void(uint64_t, uint64_t)>& progress, CheckSummary& summary) {
  summary = {};
  std::vector<Placed> placed;
  uint64_t placed_tensors = 0;
  for (const auto& t : catalog.tensors()) {
    // A tensor of pieces is read back piece by piece: its pieces' ranges
    // may overlap no other tensor's, nor each other.
    // (It counts as read back with its first piece.)
    uint64_t counted = 1;
    for (const auto& piece : t.pieces) {
      const MappedFile* file = piece.bytes.mapped_file();
      if (file == nullptr || piece.bytes.size() == 0) continue;
      const uint64_t begin = piece.bytes.file_offset();
      placed.push_back({file, begin, begin + piece.bytes.size(), &t, counted});
      placed_tensors += counted;
      counted = 0;
    }
    const MappedFile* file = t.bytes.mapped_file();
    if (file == nullptr || t.bytes.size() == 0) continue;
    const uint64_t begin = t.bytes.file_offset();
    placed.push_back({file, begin, begin + t.bytes.size(), &t});
    ++placed_tensors;
  }
  // Tensors with no bytes in a file (empty, or bytes a reader made) have
  // nothing to read back: opening the model checked them.
  summary.tensors = catalog.tensors().size() - placed_tensors;

  // In file order, so that an overlap is with the range before; shared
  // storages are read once.
  std::sort(placed.begin(), placed.end(), [](const Placed& a, const Placed& b) {
    return std::tie(a.file, a.begin, a.end) < std::tie(b.file, b.begin, b.end);
  });
  std::vector<Placed> ranges;
  for (const auto& cur : placed) {
    if (!ranges.empty() && ranges.back().file == cur.file) {
      Placed& prev = ranges.back();
      if (!catalog.tensors_may_share_bytes && cur.begin < prev.end)
        throw ModelError(cur.file->display_name(), catalog.format, cur.begin,
                         "tensor \"" + std::string(cur.tensor->name) + "\" overlaps the bytes of \"" +
                             std::string(prev.tensor->name) + "\"");
      if (cur.begin == prev.begin && cur.end == prev.end) {
        prev.tensors += cur.tensors;
        continue;
      }
    }
    ranges.push_back(cur);
  }

  uint64_t total = 0;
  for (const auto& p : ranges) total += p.end - p.begin;
  for (const auto& c : checks) total += c.bytes;
  uint64_t done = 0;
  auto advance = [&](uint64_t n) {
    done += n;
    if (progress) progress(done, total);
  };

  std::vector<char> buffer;
  for (const auto& range : ranges) {
    read_back(*range.file, range.begin, range.end, catalog.format,
              "tensor \"" + std::string(range.tensor->name) + "\"", buffer, advance);
    summary.bytes_read += range.end - range.begin;
    summary.tensors += range.tensors;
  }
  for (const auto& integrity : checks) {
    integrity.run(advance);
    ++summary.integrity_checks;
  }
  if (progress) progress(total, total);
}

}  // namespace modelfs
