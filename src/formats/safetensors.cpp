// SPDX-License-Identifier: Apache-2.0
#include "formats/safetensors.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>

#include "formats/safetensors_header.hpp"
#include "formats/sharded_index.hpp"
#include "io/budget_charge.hpp"
#include "io/byte_reader.hpp"
#include "io/checked_math.hpp"
#include "modelfs/budget.hpp"
#include "modelfs/error.hpp"
#include "modelfs/json_release.hpp"

namespace modelfs::safetensors {
namespace {

constexpr std::string_view kFormat = "safetensors";

class Parser {
 public:
  Parser(std::shared_ptr<const MappedFile> file, const std::string& name)
      : file_(std::move(file)), name_(name) {}

  File parse() {
    File out;
    out.metadata = parse([&out](size_t count) { out.tensors.reserve(count); },
                         [&out](TensorSpec& t) { out.tensors.push_back(std::move(t)); });
    return out;
  }

  // Parses the file, handing each tensor in data order to `each` (after
  // `count` is told how many there are); returns the metadata. A catalog
  // fills from it without a table of TensorSpecs beside its own.
  template <typename Count, typename Each>
  nlohmann::json parse(Count&& count, Each&& each) {
    ByteReader reader(*file_, std::string(kFormat));
    if (file_->size() < 8)
      fail(0, "file is " + std::to_string(file_->size()) + " bytes, too short for the 8-byte header length");
    const uint64_t n = reader.u64("header length");
    if (n > kMaxHeaderBytes)
      fail(0, "header length " + std::to_string(n) + " exceeds the limit of " +
                  std::to_string(kMaxHeaderBytes) + " bytes");
    if (n > file_->size() - 8)
      fail(0, "header length " + std::to_string(n) + " runs past the end of the file (" +
                  std::to_string(file_->size()) + " bytes)");
    add_metadata_bytes(n);
    header_.assign(reader.take_string(n, "header"));
    drop_pages(8, n);
    data_start_ = 8 + n;

    Header header = read_header(header_, file_->display_name());
    const JsonReleaser release(header.metadata);
    count(header.entries.size());
    tensors(header.entries, each);
    return std::move(header.metadata);
  }

 private:
  [[noreturn]] void fail(uint64_t offset, const std::string& reason) const {
    throw ModelError(file_->display_name(), std::string(kFormat), offset, reason);
  }

  // The header is read from its copy (charged to the budget): its pages of
  // the mapping, which no budget counts, are given back to the kernel
  // rather than kept resident beside it (a 15 MB header held both). A
  // later read faults them in again from the file: every mapping is a
  // shared one of a file.
  void drop_pages(uint64_t offset, uint64_t length) const {
    const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    const auto at = reinterpret_cast<uintptr_t>(file_->unchecked_data()) + offset;
    const uintptr_t begin = (at + page - 1) / page * page, end = (at + length) / page * page;
    if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
  }

  [[noreturn]] void fail_at_key(const std::string& name, const std::string& reason) const {
    fail(key_position(header_, name), reason);
  }

  // The entries in data order, checked by rules 5-7 of docs/formats.md,
  // "safetensors validation", in the reference crate's order.
  template <typename Each>
  void tensors(std::vector<HeaderEntry>& entries, Each&& each) const {
    std::ranges::sort(entries, {}, [](const HeaderEntry& e) { return std::tie(e.begin, e.end, e.name); });
    TensorSpec t;
    const uint64_t buffer_size = file_->size() - data_start_;
    uint64_t expected_begin = 0;
    for (auto& e : entries) {
      // Built only on the way to a message: this runs for every tensor.
      auto quote = [&] { return "tensor \"" + e.name + "\": "; };
      if (e.begin != expected_begin || e.end < e.begin) {
        std::string why =
            e.end < e.begin ? "data_offsets end before they begin"
            : e.begin < expected_begin
                ? "data overlaps the previous tensor's bytes"
                : "leaves a gap of " + std::to_string(e.begin - expected_begin) + " unused bytes before it";
        fail_at_key(e.name, quote() + "data_offsets [" + std::to_string(e.begin) + ", " +
                                std::to_string(e.end) + "] invalid: " + why);
      }
      auto numel = checked_numel(e.shape);
      if (!numel) fail_at_key(e.name, quote() + "element count of the shape overflows");
      const uint32_t bits = dtype_bits(e.dtype);
      auto total_bits = checked_mul(*numel, bits);
      if (!total_bits) fail_at_key(e.name, quote() + "byte size of the shape overflows");
      if (*total_bits % 8 != 0)
        fail_at_key(e.name, quote() + std::to_string(*numel) + " elements of " + std::to_string(bits) +
                                " bits do not fill whole bytes");
      const uint64_t nbytes = *total_bits / 8;
      if (e.end - e.begin != nbytes)
        fail_at_key(e.name, quote() + "data_offsets span " + std::to_string(e.end - e.begin) +
                                " bytes but shape and dtype need " + std::to_string(nbytes));
      if (e.end > buffer_size)
        fail(data_start_ + e.begin, quote() + "data ends at byte " + std::to_string(data_start_ + e.end) +
                                        ", past the end of the file (" + std::to_string(file_->size()) +
                                        " bytes)");
      auto strides = contiguous_strides(e.shape);
      if (!strides)
        fail_at_key(e.name,
                    quote() + "the strides of the shape pass 2^63 (numpy and torch refuse such a shape)");
      expected_begin = e.end;
      t = TensorSpec();
      t.name = std::move(e.name);
      t.dtype = e.dtype;
      t.strides = std::move(*strides);
      t.shape = std::move(e.shape);
      t.bytes = ByteSpan::mapped(file_, data_start_ + e.begin, nbytes);
      t.source = {name_, data_start_ + e.begin};
      if (bits < 8) t.extras["element_bits"] = bits;
      each(t);
      // What the entry held is the spec's now, and given back with it.
      e.shape = std::vector<uint64_t>();
    }
    if (expected_begin != buffer_size)
      fail(data_start_ + expected_begin, std::to_string(buffer_size - expected_begin) +
                                             " bytes after the last tensor are not described by the header");
  }

  std::shared_ptr<const MappedFile> file_;
  std::string name_;
  std::string header_;  // the header's copy, read in place of its pages (drop_pages)
  uint64_t data_start_ = 0;
};

std::string_view skip_json_space(std::span<const std::byte> bytes) {
  std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  auto pos = text.find_first_not_of(" \t\r\n");
  return pos == std::string_view::npos ? std::string_view{} : text.substr(pos);
}

const std::initializer_list<std::string_view> kIndexSuffixes = {".safetensors.index.json"};
// A shard's reader reads its header length and header from the start: the
// first block of a remote shard holds most headers whole.
const ShardedFormat kSharded{"safetensors index", kFormat, kMaxJsonDepth, 256 << 10, 0};

}  // namespace

File parse(std::shared_ptr<const MappedFile> file, const std::string& name) {
  return Parser(std::move(file), name).parse();
}

bool probe_file(std::span<const std::byte> head) {
  if (head.size() < 9) return false;
  const auto n = load_le<uint64_t>(head);
  // An index JSON also has '{' early on, but then its first eight bytes are
  // text, which read as a length far beyond any real header.
  if (n >= (uint64_t{1} << 48) && static_cast<char>(head[0]) == '{') return false;
  return skip_json_space(head.subspan(8)).starts_with('{');
}

bool probe_index_file(std::span<const std::byte> head) {
  // Only blanks precede the text: "weight_map" can be searched for in it.
  const auto text = skip_json_space(head);
  return text.starts_with('{') && text.find("\"weight_map\"") != std::string_view::npos;
}

bool probe_folder(const std::filesystem::path& folder) {
  return !index_files_in(folder, kIndexSuffixes).empty();
}

Catalog open_file(const ModelFile& model) {
  const std::string name = model.path.filename().string();
  Catalog catalog;
  catalog.format = std::string(kFormat);
  catalog.mtime = model.mapped->mtime();
  catalog.files.push_back(name);
  // Each tensor goes to the catalog as it is read.
  nlohmann::json metadata = Parser(model.mapped, name)
                                .parse([&catalog](size_t count) { catalog.reserve(count); },
                                       [&catalog](const TensorSpec& t) { catalog.add(t); });
  // The file says what its tensors are laid out as itself; the export says
  // the same.
  if (metadata.is_object()) {
    const auto format = metadata.find("format");
    if (format != metadata.end() && format->is_string())
      catalog.export_hints.checkpoint_format = format->get<std::string>();
  }
  catalog.metadata["__metadata__"] = std::move(metadata);
  return catalog;
}

Catalog open_index_file(const ModelFile& index) {
  return open_sharded_index(index, kSharded, [](const ModelFile& shard_file, const std::string& name) {
    Catalog shard;
    // The shard's __metadata__.
    shard.metadata = Parser(shard_file.mapped, name)
                         .parse([&shard](size_t count) { shard.reserve(count); },
                                [&shard](const TensorSpec& t) { shard.add(t); });
    return shard;
  });
}

Catalog open_folder(const std::filesystem::path& folder, IntegrityChecks* checks) {
  return open_index_file(single_index_in(folder, kIndexSuffixes, kSharded, checks));
}

}  // namespace modelfs::safetensors
