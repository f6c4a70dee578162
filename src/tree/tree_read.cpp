// SPDX-License-Identifier: Apache-2.0
// The tree's read path: a file's bytes as iovecs into held parts or copies
// of computed ones (slice_parts), index.json printed from its marks, and
// Tree::read/serve/content over them. Apart from the builder (tree.cpp)
// because this runs for every FUSE read after mounting, while the builder
// runs once, at mount, to fill the tables (tree_parts.hpp) read here.
#include <algorithm>
#include <array>
#include <cstring>

#include "io/json_text.hpp"
#include "io/mapped_bytes.hpp"
#include "modelfs/tree.hpp"
#include "remote/remote.hpp"
#include "tree/sidecar.hpp"
#include "tree/tree_parts.hpp"

namespace modelfs {

namespace {

// Bytes [within, within + length) of a held part, present: the one place
// a read makes held bytes of a mapping present (a remote model's blocks
// fetched through the part's own file), before they are copied or go to the
// kernel.
const std::byte* held_bytes(const Part& part, uint64_t within, uint64_t length) {
  if (part.source == nullptr) return part.bytes + within;
  const auto start = static_cast<uint64_t>(part.bytes - part.source->unchecked_data());
  return part.source->read(start + within, length).data();
}

// Bytes [within, within + out.size()) of one part into `out`: the only
// place the read path takes bytes of a mapping itself. A remote model's
// blocks are made present first; then the bytes are computed or copied
// under the mapped-bytes guard, so a file shrunk under the mount fails this
// read (ModelError: EIO) and not the process (SIGBUS).
void copy_part(const Part& part, uint64_t within, std::span<std::byte> out) {
  if (part.computed != nullptr) {
    part.computed->prepare(within, out.size());
    read_mapped([&] { part.computed->fill(within, out); });
  } else {
    copy_mapped(out.data(), held_bytes(part, within, out.size()), out.size());
  }
}

}  // namespace

void copy_parts(std::span<const Part> parts, uint64_t offset, std::span<std::byte> out) {
  auto part = std::upper_bound(parts.begin(), parts.end(), offset,
                               [](uint64_t at, const Part& p) { return at < p.offset + p.size; });
  uint64_t done = 0;
  for (; part != parts.end() && done < out.size(); ++part) {
    if (part->size == 0) continue;
    const uint64_t within = offset + done - part->offset;
    const uint64_t n = std::min<uint64_t>(out.size() - done, part->size - within);
    copy_part(*part, within, out.subspan(done, n));
    done += n;
  }
  if (done != out.size()) throw std::logic_error("copy_parts: a range past the parts' end");
}

size_t slice_parts(std::span<const Part> parts, uint64_t offset, uint64_t length, std::span<iovec> out,
                   std::string& scratch) {
  if (out.empty()) return 0;
  // The first part that ends past `offset`: a search, so that a read of an
  // export file of 100 000 tensors costs what it asks for wherever it is.
  auto part = std::upper_bound(parts.begin(), parts.end(), offset,
                               [](uint64_t at, const Part& p) { return at < p.offset + p.size; });
  // Sized once, to what is left of the request when first needed and before
  // any iovec points into it: growing it later would move what earlier
  // iovecs point at. Grown, never shrunk here: resizing down and up again
  // would clear the whole range before every read.
  std::byte* base = nullptr;
  uint64_t used = 0;
  auto room = [&](uint64_t take) {
    if (base == nullptr) {
      if (scratch.size() < length) scratch.resize(length);
      base = reinterpret_cast<std::byte*>(scratch.data());
    }
    std::byte* at = base + used;
    used += take;
    return at;
  };
  size_t count = 0;
  for (; part != parts.end() && length > 0; ++part) {
    if (part->size == 0) continue;
    const uint64_t within = offset - part->offset;
    const uint64_t take = std::min(length, part->size - within);
    if (count + 1 == out.size() && take < length) {
      // The last iovec: the rest of the request, copied part by part.
      // (Past the end of the file, only what there is.)
      const uint64_t rest = length;
      std::byte* at = room(rest);
      uint64_t done = 0;
      for (; part != parts.end() && done < rest; ++part) {
        const uint64_t from = offset + done - part->offset;
        const uint64_t n = std::min(rest - done, part->size - from);
        copy_part(*part, from, std::span(at + done, n));
        done += n;
      }
      out[count++] = iovec{at, done};
      return count;
    }
    if (part->computed != nullptr) {
      std::byte* at = room(take);
      copy_part(*part, within, std::span(at, take));
      out[count++] = iovec{at, take};
    } else {
      out[count++] = iovec{const_cast<std::byte*>(held_bytes(*part, within, take)), take};
    }
    offset += take;
    length -= take;
  }
  return count;
}

// index.json, as readable_json would print it, one line per tensor, printed
// directly (it is the largest document of a big model). The builder measures
// it with these same functions; the first reader prints it.
void append_index_head(std::string& out, const Catalog& catalog) {
  out += "{\n  \"format\": ";
  append_json_string(out, catalog.format);
  out += ",\n  \"files\": [";
  for (size_t i = 0; i < catalog.files.size(); ++i) {
    if (i) out += ',';
    append_json_string(out, catalog.files[i]);
  }
  out += "],\n  \"tensors\": ";
  out += catalog.tensors().empty() ? "[]" : "[\n";
}

void append_index_line(std::string& out, const Tensor& tensor, std::string_view path, bool last) {
  out += "    {\"name\":";
  append_json_string(out, tensor.name);
  out += ",\"path\":";
  append_json_string(out, path);
  out += ",\"dtype\":";
  append_json_string(out, tensor.dtype_name());
  out += ",\"shape\":";
  append_json_array(out, tensor.shape);
  out += ",\"nbytes\":" + std::to_string(tensor.nbytes());
  out += last ? "}\n  ]" : "},\n";
}

void append_index_tail(std::string& out) { out += "\n}\n"; }

size_t Tree::Impl::read_index(const Node& file, uint64_t offset, uint64_t length, std::span<iovec> out,
                              std::string& scratch) const {
  if (offset >= file.size || out.empty()) return 0;
  length = std::min(length, file.size - offset);
  const auto tensors = catalog_.tensors();
  // From the head, or from the last mark at or before `offset`.
  scratch.clear();
  uint64_t at = 0;  // where scratch starts in the file
  size_t k = 0;     // the next tensor to print
  if (offset < index_head_size_ || index_marks_.empty()) {
    append_index_head(scratch, catalog_);
  } else {
    const auto mark = std::upper_bound(index_marks_.begin(), index_marks_.end(), offset - index_head_size_);
    const auto m = static_cast<size_t>(mark - index_marks_.begin()) - 1;
    k = m * kIndexStride;
    at = index_head_size_ + index_marks_[m];
  }
  // Room for what the range needs and a line past it, so that the scratch
  // (each FUSE thread's) is not doubled as it grows: it stays about the
  // largest request's size.
  scratch.reserve(offset + length - at + 4096);
  std::string path;
  for (; k < tensor_files_.size() && at + scratch.size() < offset + length; ++k) {
    tensor_path(k, path);
    append_index_line(scratch, tensors[k], path, k + 1 == tensor_files_.size());
  }
  if (k == tensor_files_.size()) append_index_tail(scratch);
  // Never past the size the builder measured (the file's).
  const uint64_t within = offset - at;
  if (within >= scratch.size()) return 0;
  out[0] = iovec{scratch.data() + within, std::min<uint64_t>(length, scratch.size() - within)};
  return 1;
}

namespace {

// [offset, offset + length) of a printed file, as one iovec (none past its end).
size_t slice_text(std::string_view text, uint64_t offset, uint64_t length, std::span<iovec> out) {
  if (offset >= text.size() || out.empty()) return 0;
  out[0] = iovec{const_cast<char*>(text.data() + offset), std::min<uint64_t>(length, text.size() - offset)};
  return 1;
}

}  // namespace

size_t Tree::read(const Node& file, uint64_t offset, uint64_t length, std::span<iovec> out,
                  std::string& scratch) const {
  // Printed files are served as printed, never past the size the builder
  // measured (the file's size).
  if (file.role == FileRole::Index) return impl_->read_index(file, offset, length, out, scratch);
  if (file.role == FileRole::Sidecar && file.part_count == 0 && file.tensor != nullptr) {
    scratch = sidecar_text(*file.tensor, impl_->catalog_.format, npy_of(*file.tensor));
    return slice_text(scratch, offset, length, out);
  }
  // Each local file this read reaches is sized once (a file cut inside its
  // last page reads as zeros there, without a fault).
  const ServedRead sized;
  return slice_parts(parts(file), offset, length, out, scratch);
}

int Tree::serve(const Node& file, uint64_t offset, uint64_t length, std::span<iovec> out,
                std::string& scratch, const std::function<int(std::span<const iovec>)>& reply) const {
  // The blocks this read makes present stay pinned until `reply` has sent
  // them, and only inside such a scope may blocks be evicted.
  const remote::ReadScope remote_blocks;
  const size_t count = read(file, offset, length, out, scratch);
  return reply(out.first(count));
}

std::string Tree::content(const Node& file) const {
  std::array<iovec, 2> iov{};  // slice_parts copies the rest into the last one
  std::string scratch;
  std::string out;
  const size_t n = read(file, 0, file.size, iov, scratch);
  for (size_t i = 0; i < n; ++i) out.append(static_cast<const char*>(iov[i].iov_base), iov[i].iov_len);
  return out;
}
}  // namespace modelfs
