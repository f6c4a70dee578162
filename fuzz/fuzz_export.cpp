// SPDX-License-Identifier: Apache-2.0
// The export plan end to end: a model's bytes opened, its tree built (with
// -o export=float32 for inputs of odd length) and every export file
// (.modelfs/model.safetensors, a PT2 archive's models/*.safetensors) read
// part by part, checked as the reference reader checks a file: the
// header's length and JSON, data offsets contiguous from 0 in header order,
// each part exactly its tensor's range, the file exactly header and data.
#include <sys/uio.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <string>

#include <nlohmann/json.hpp>

#include "fuzz_input.hpp"
#include "modelfs/error.hpp"
#include "modelfs/formats.hpp"
#include "modelfs/tree.hpp"
#include "tree/tree_parts.hpp"

namespace {

// Bytes [offset, offset + length) of `file` through the tree's read, as
// FUSE serves them; traps when fewer come back.
std::string read(const modelfs::Tree& tree, const modelfs::Node& file, uint64_t offset, uint64_t length) {
  std::array<iovec, 16> iov{};
  std::string scratch;
  const size_t n = tree.read(file, offset, length, iov, scratch);
  std::string out;
  for (size_t i = 0; i < n; ++i) out.append(static_cast<const char*>(iov[i].iov_base), iov[i].iov_len);
  if (out.size() != length) __builtin_trap();
  return out;
}

void check_export(const modelfs::Tree& tree, const modelfs::Node& file) {
  const auto parts = tree.parts(file);
  // The parts tile the file: each starts where the one before ends.
  uint64_t end = 0;
  for (const auto& part : parts) {
    if (part.offset != end) __builtin_trap();
    end += part.size;
  }
  if (end != file.size || parts.empty() || file.size < 8) __builtin_trap();
  uint64_t length = 0;
  std::memcpy(&length, read(tree, file, 0, 8).data(), 8);
  if (length % 8 != 0 || length > file.size - 8 || parts[0].size != 8 + length) __builtin_trap();
  const auto header = nlohmann::ordered_json::parse(read(tree, file, 8, length));
  uint64_t offset = 0;
  size_t part = 1;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    const auto& range = entry.at("data_offsets");
    const auto begin = range.at(0).get<uint64_t>(), stop = range.at(1).get<uint64_t>();
    if (begin != offset || stop < begin || part >= parts.size() || parts[part].size != stop - begin)
      __builtin_trap();
    // Each tensor's first and last bytes (a computed part computes them).
    const uint64_t edge = std::min<uint64_t>(stop - begin, 64);
    (void)read(tree, file, 8 + length + begin, edge);
    (void)read(tree, file, 8 + length + stop - edge, edge);
    offset = stop;
    ++part;
  }
  if (part != parts.size() || 8 + length + offset != file.size) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto path = modelfs::fuzz::write_input(data, size, "model");
  try {
    auto tree = modelfs::Tree::build(modelfs::open_model(path), {.export_float32 = size % 2 == 1});
    const auto meta = tree->resolve(".modelfs");
    if (!meta) __builtin_trap();
    if (const auto file = tree->resolve(".modelfs/model.safetensors"))
      check_export(*tree, *tree->node(*file));
    if (const auto models = tree->resolve(".modelfs/models"))
      for (const auto& entry : tree->node(*models)->children)
        if (std::string_view(entry.name).ends_with(".safetensors"))
          check_export(*tree, *tree->node(entry.ino));
    const auto report = tree->resolve(".modelfs/export.json");
    if (!report) __builtin_trap();
    const auto& node = *tree->node(*report);
    (void)nlohmann::json::parse(read(*tree, node, 0, node.size));
  } catch (const modelfs::ModelError&) {
  }
  return 0;
}
