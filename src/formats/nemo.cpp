// SPDX-License-Identifier: Apache-2.0
#include "formats/nemo.hpp"

#include <algorithm>
#include <charconv>
#include <map>
#include <regex>
#include <string>
#include <unordered_set>
#include <vector>

#include "formats/torch_save.hpp"
#include "io/checked_math.hpp"
#include "io/zip_archive.hpp"
#include "modelfs/budget.hpp"
#include "modelfs/error.hpp"

namespace modelfs::nemo {
namespace {

constexpr std::string_view kFormat = "nemo";
constexpr uint64_t kBlock = 512;
constexpr std::string_view kCheckpoint = "model_weights.ckpt";
constexpr std::string_view kConfig = "model_config.yaml";

// Header fields: offset and length (POSIX ustar, as tarfile.py reads them).
struct Field {
  uint64_t at;
  uint64_t length;
};
constexpr Field kName{0, 100};
constexpr Field kSize{124, 12};
constexpr Field kChecksum{148, 8};
constexpr uint64_t kTypeAt = 156;
constexpr Field kMagic{257, 6};
constexpr Field kPrefix{345, 155};

struct Member {
  std::string name;  // without its leading "./"
  uint64_t header_at = 0;
  uint64_t data_at = 0;
  uint64_t size = 0;
  char type = '0';
};

std::string_view text_of(std::span<const std::byte> bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

// A NUL-terminated string field.
std::string string_field(std::string_view header, Field field) {
  const std::string_view raw = header.substr(field.at, field.length);
  return std::string(raw.substr(0, raw.find('\0')));
}

// "./a/./b" and "a/b" name one file, as tarfile's extraction makes them.
std::string normalized(std::string name) {
  while (name.starts_with("./")) name.erase(0, 2);
  while (name.ends_with('/')) name.pop_back();
  return name;
}

class TarReader {
 public:
  explicit TarReader(const MappedFile& file) : file_(file), display_(file.display_name()) {}

  std::vector<Member> read() {
    std::vector<Member> members;
    std::unordered_set<std::string> names;
    // What an extended header said of the next member.
    std::optional<std::string> long_name;
    uint64_t pax_size = 0;
    bool has_pax_size = false;
    uint64_t at = 0;
    while (at < file_.size()) {
      if (file_.size() - at < kBlock)
        fail(at,
             "a tar header is cut short: " + std::to_string(file_.size() - at) + " bytes remain of its 512");
      const std::string_view header = text_of(file_.read(at, kBlock));
      if (header.find_first_not_of('\0') == std::string_view::npos) break;  // the end-of-archive blocks
      check_checksum(header, at);
      Member m;
      m.header_at = at;
      m.type = header[kTypeAt];
      m.size = number(header, kSize, at, "size");
      const std::string prefix = string_field(header, kPrefix);
      m.name = string_field(header, kName);
      if (header.substr(kMagic.at, 5) == "ustar" && !prefix.empty()) m.name = prefix + "/" + m.name;
      if (has_pax_size) m.size = pax_size;
      if (long_name) m.name = *long_name;
      m.data_at = at + kBlock;
      if (!range_fits(m.data_at, m.size, file_.size()))
        fail(at, "member \"" + m.name + "\": " + std::to_string(m.size) + " bytes at offset " +
                     std::to_string(m.data_at) + " run past the end of the file (" +
                     std::to_string(file_.size()) + " bytes)");
      const uint64_t padded = (m.size + kBlock - 1) / kBlock * kBlock;
      at = m.data_at + padded;
      check_budget();
      if (m.type == 'x' || m.type == 'L') {
        // Extended header: its values are the next member's.
        const std::string_view data = member_data(m, m.type == 'x' ? "PAX header" : "GNU long name");
        if (m.type == 'L') {
          long_name = std::string(data.substr(0, data.find('\0')));
        } else {
          read_pax(data, m.data_at, long_name, pax_size, has_pax_size);
        }
        continue;
      }
      long_name.reset();
      has_pax_size = false;
      if (m.type == 'g' || m.type == 'K') continue;  // global PAX values, GNU long link names
      m.name = normalized(std::move(m.name));
      if (m.name.empty() || m.name == ".") continue;
      if (!names.insert(m.name).second) fail(at, "member \"" + m.name + "\" appears twice in the archive");
      if (members.size() >= kMaxTarMembers)
        fail(at, "more than " + std::to_string(kMaxTarMembers) + " members in the archive");
      members.push_back(std::move(m));
    }
    return members;
  }

  std::string_view member_data(const Member& m, const std::string& what) const {
    if (m.size > kMaxPaxBytes)
      fail(m.header_at, what + " of " + std::to_string(m.size) + " bytes, over the limit of " +
                            std::to_string(kMaxPaxBytes));
    return text_of(file_.read(m.data_at, m.size));
  }

 private:
  [[noreturn]] void fail(uint64_t at, const std::string& reason) const {
    throw ModelError(display_, std::string(kFormat), at, "tar: " + reason);
  }

  // An octal number (blanks and NULs around it), or base-256 when its
  // first byte has the high bit set (GNU's, for sizes past 8 GiB).
  uint64_t number(std::string_view header, Field field, uint64_t at, const char* what) const {
    const std::string_view raw = header.substr(field.at, field.length);
    const auto first = static_cast<unsigned char>(raw[0]);
    if (first & 0x80) {
      if (first != 0x80) fail(at + field.at, std::string(what) + " is a negative base-256 number");
      uint64_t value = 0;
      for (size_t i = 1; i < raw.size(); ++i) {
        if (value >> 56) fail(at + field.at, std::string(what) + " passes 2^64");
        value = value << 8 | static_cast<unsigned char>(raw[i]);
      }
      return value;
    }
    const size_t begin = raw.find_first_not_of(' ');
    std::string_view digits = begin == std::string_view::npos ? "" : raw.substr(begin);
    digits = digits.substr(0, std::min(digits.find('\0'), digits.find(' ')));
    uint64_t value = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value, 8);
    if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size())
      fail(at + field.at,
           std::string(what) + " field \"" + std::string(digits.substr(0, 12)) + "\" is not an octal number");
    return value;
  }

  // The sum of the header's bytes, its checksum field counted as blanks
  // (unsigned, or signed as some old tars wrote it).
  void check_checksum(std::string_view header, uint64_t at) const {
    const uint64_t recorded = number(header, kChecksum, at, "checksum");
    uint64_t sum = 0;
    int64_t signed_sum = 0;
    for (uint64_t i = 0; i < kBlock; ++i) {
      const bool in_field = i >= kChecksum.at && i < kChecksum.at + kChecksum.length;
      const char c = in_field ? ' ' : header[i];
      sum += static_cast<unsigned char>(c);
      signed_sum += static_cast<signed char>(c);
    }
    if (recorded != sum && static_cast<int64_t>(recorded) != signed_sum)
      fail(at + kChecksum.at, "header checksum is " + std::to_string(recorded) + ", its bytes sum to " +
                                  std::to_string(sum) + " (not a tar header, or a damaged one)");
  }

  // "LEN key=value\n" records; path and size are the next member's.
  void read_pax(std::string_view data, uint64_t data_at, std::optional<std::string>& path, uint64_t& size,
                bool& has_size) const {
    uint64_t pos = 0;
    while (pos < data.size() && data[pos] != '\0') {
      const size_t space = data.find(' ', pos);
      uint64_t length = 0;
      const auto [end, ec] =
          std::from_chars(data.data() + pos, data.data() + std::min(space, data.size()), length);
      if (space == std::string_view::npos || ec != std::errc() || end != data.data() + space ||
          length <= space - pos + 1 || length > data.size() - pos || data[pos + length - 1] != '\n')
        fail(data_at + pos, "PAX record does not hold \"LENGTH key=value\\n\" within its header");
      const std::string_view record = data.substr(space + 1, pos + length - 1 - (space + 1));
      const size_t equals = record.find('=');
      if (equals == std::string_view::npos) fail(data_at + pos, "PAX record has no '='");
      const std::string_view key = record.substr(0, equals), value = record.substr(equals + 1);
      if (key == "path") path = std::string(value);
      if (key == "size") {
        uint64_t parsed = 0;
        const auto [e, c] = std::from_chars(value.data(), value.data() + value.size(), parsed);
        if (c != std::errc() || e != value.data() + value.size() || value.empty())
          fail(data_at + pos, "PAX size \"" + std::string(value.substr(0, 24)) + "\" is not a number");
        size = parsed;
        has_size = true;
      }
      pos += length;
    }
  }

  const MappedFile& file_;
  std::string display_;
};

// A checkpoint's folder: "" (the model's), mp_rank_XX, tp_rank_XX_pp_rank_YYY.
bool is_checkpoint(const std::string& name, std::string& folder) {
  if (name == kCheckpoint) {
    folder.clear();
    return true;
  }
  if (!name.ends_with("/" + std::string(kCheckpoint))) return false;
  folder = name.substr(0, name.size() - kCheckpoint.size() - 1);
  static const std::regex rank("mp_rank_[0-9]+|tp_rank_[0-9]+_pp_rank_[0-9]+");
  return std::regex_match(folder, rank);
}

class Reader {
 public:
  explicit Reader(const ModelFile& model)
      : model_(model),
        file_(*model.mapped),
        display_(file_.display_name()),
        name_(model.path.filename().string()) {}

  Catalog read() {
    const std::vector<Member> members = TarReader(file_).read();
    std::vector<std::pair<std::string, const Member*>> checkpoints;
    for (const auto& m : members) {
      std::string folder;
      if (is_regular(m) && is_checkpoint(m.name, folder)) checkpoints.emplace_back(folder, &m);
    }
    if (checkpoints.empty())
      throw ModelError(display_, std::string(kFormat), std::nullopt,
                       "the tar holds no model_weights.ckpt (nor mp_rank_XX/model_weights.ckpt): not a "
                       ".nemo model archive");
    std::sort(checkpoints.begin(), checkpoints.end());
    catalog_ = torch_save::torch_catalog(std::string(kFormat), file_, name_);
    if (checkpoints.size() > 1) catalog_.export_hints.checkpoint_format.reset();
    catalog_.tensors_may_share_bytes = true;  // tied weights and views share storages
    nlohmann::json read_checkpoints = nlohmann::json::array();
    for (const auto& [folder, member] : checkpoints)
      read_checkpoints.push_back(read_checkpoint(*member, checkpoints.size() > 1 ? folder + "/" : ""));
    nlohmann::json listed = nlohmann::json::array();
    uint64_t documents_bytes = 0;
    for (const auto& m : members) {
      listed.push_back({{"name", m.name}, {"size", m.size}, {"offset", m.data_at}});
      if (!is_regular(m)) continue;
      if (m.name == kConfig) {
        if (m.size > kMaxConfigBytes)
          fail(m.header_at, std::string(kConfig) + " is " + std::to_string(m.size) +
                                " bytes, over the limit of " + std::to_string(kMaxConfigBytes));
        catalog_.documents.push_back(
            {std::string(kConfig), std::string(text_of(file_.read(m.data_at, m.size)))});
        continue;
      }
      std::string folder;
      if (is_checkpoint(m.name, folder) || m.size > kMaxDocumentBytes ||
          documents_bytes + m.size > kMaxDocumentsBytes)
        continue;
      documents_bytes += m.size;
      catalog_.documents.push_back({"nemo/" + m.name, std::string(text_of(file_.read(m.data_at, m.size)))});
    }
    catalog_.metadata["nemo"] = {{"members", std::move(listed)},
                                 {"checkpoints", std::move(read_checkpoints)}};
    return std::move(catalog_);
  }

 private:
  [[noreturn]] void fail(std::optional<uint64_t> at, const std::string& reason) const {
    throw ModelError(display_, std::string(kFormat), at, reason);
  }

  static bool is_regular(const Member& m) { return m.type == '0' || m.type == '\0' || m.type == '7'; }

  // One checkpoint: a torch.save ZIP lying in the member's bytes, read in place.
  nlohmann::json read_checkpoint(const Member& member, const std::string& prefix) {
    if (member.size < 4 || text_of(file_.read(member.data_at, 4)) != std::string_view("PK\x03\x04", 4))
      fail(member.data_at,
           member.name +
               " is not a torch.save ZIP archive (a legacy torch.save, from before torch 1.6, "
               "is not read inside a .nemo)");
    const ZipArchive zip = ZipArchive::open(model_.mapped, member.data_at, member.size, std::string(kFormat));
    torch::WalkOptions options;
    options.file = display_;
    options.format = std::string(kFormat);
    options.source = name_;
    torch_save::SaveContents contents = torch_save::read_save(zip, options, "", true);
    // The rank's folder before the state_dict key (the walker would join
    // a prefix with '.'), and before the names a quantized tensor's
    // parameters are found by.
    for (auto& t : contents.tensors) {
      t.name = prefix + t.name;
      if (t.quantization && !t.quantization->scales.empty()) t.quantization->scales.insert(0, prefix);
      if (t.quantization && !t.quantization->zero_points.empty())
        t.quantization->zero_points.insert(0, prefix);
      catalog_.add(t);
    }
    if (!contents.values.empty())
      catalog_.metadata["values"][prefix.empty() ? "." : prefix] = contents.values;
    if (!contents.skipped_objects.empty())
      for (auto& skipped : contents.skipped_objects) catalog_.metadata["skipped_objects"].push_back(skipped);
    if (model_.checks != nullptr)
      for (auto& check : zip.crc_checks()) model_.checks->push_back(std::move(check));
    return {{"member", member.name}, {"tensors", contents.tensors.size()}, {"protocol", contents.protocol}};
  }

  const ModelFile& model_;
  const MappedFile& file_;
  std::string display_;
  std::string name_;
  Catalog catalog_;
};

constexpr std::string_view kGzipMagic = "\x1f\x8b";

}  // namespace

bool probe_file(std::span<const std::byte> head) {
  const std::string_view text = text_of(head);
  if (text.starts_with(kGzipMagic)) return true;
  return text.size() >= kMagic.at + 5 && text.substr(kMagic.at, 5) == "ustar";
}

Catalog open_file(const ModelFile& model) {
  const MappedFile& file = *model.mapped;
  if (file.size() >= 2 && text_of(file.read(0, 2)) == kGzipMagic)
    throw ModelError(file.display_name(), std::string(kFormat), 0,
                     "a gzip-compressed .nemo (as NeMo before 1.7 wrote them) is not supported: its weights "
                     "cannot be served in place; mount the tar inside it (gunzip -c FILE.nemo > FILE.tar)");
  return Reader(model).read();
}

}  // namespace modelfs::nemo
