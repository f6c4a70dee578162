// SPDX-License-Identifier: Apache-2.0
#include "formats/nemo.hpp"

#include <algorithm>
#include <charconv>
#include <map>
#include <regex>
#include <string>
#include <unordered_set>
#include <vector>

#include "formats/nemo_gzip.hpp"
#include "formats/torch_save.hpp"
#include "io/budget_charge.hpp"
#include "io/checked_math.hpp"
#include "io/zip_archive.hpp"
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

// Where the tar's bytes come from, read forward only: the model file, or
// (a gzip .nemo) the stream inflating into a sparse image, which keeps what
// `entering` says the reader will need of a member.
class TarSource {
 public:
  virtual ~TarSource() = default;
  // How many of the bytes [at, at + n) exist (n when all do).
  virtual uint64_t available(uint64_t at, uint64_t n) = 0;
  // Bytes that were found available, present.
  virtual std::string_view read(uint64_t at, uint64_t n) = 0;
  // The data of `m` (its name final) comes next.
  virtual void entering(const Member&) {}
};

class FileSource final : public TarSource {
 public:
  explicit FileSource(const MappedFile& file) : file_(file) {}
  uint64_t available(uint64_t at, uint64_t n) override {
    return at >= file_.size() ? 0 : std::min(n, file_.size() - at);
  }
  std::string_view read(uint64_t at, uint64_t n) override { return text_of(file_.read(at, n)); }

 private:
  const MappedFile& file_;
};

class TarReader {
 public:
  TarReader(TarSource& source, std::string display) : source_(source), display_(std::move(display)) {}

  std::vector<Member> read() {
    std::vector<Member> members;
    std::unordered_set<std::string> names;
    // What an extended header said of the next member.
    std::optional<std::string> long_name;
    uint64_t pax_size = 0;
    bool has_pax_size = false;
    for (uint64_t at = 0;;) {
      const uint64_t have = source_.available(at, kBlock);
      if (have == 0) break;
      if (have < kBlock)
        fail(at, "a tar header is cut short: " + std::to_string(have) + " bytes remain of its 512");
      const std::string_view header = source_.read(at, kBlock);
      if (header.find_first_not_of('\0') == std::string_view::npos) break;  // the end-of-archive blocks
      check_checksum(header, at);
      Member m;
      m.header_at = at;
      m.type = header[kTypeAt];
      m.size = number(header, kSize, at, "size");
      const std::string prefix = string_field(header, kPrefix);
      m.name = string_field(header, kName);
      if (header.substr(kMagic.at, 5) == "ustar" && !prefix.empty()) m.name = prefix + "/" + m.name;
      const bool extended = m.type == 'x' || m.type == 'L' || m.type == 'g' || m.type == 'K';
      if (!extended) {
        if (has_pax_size) m.size = pax_size;
        if (long_name) m.name = *long_name;
        m.name = normalized(std::move(m.name));
      }
      m.data_at = at + kBlock;
      source_.entering(m);
      if (const uint64_t got = source_.available(m.data_at, m.size); got != m.size)
        fail(at, "member \"" + m.name + "\": " + std::to_string(m.size) + " bytes at offset " +
                     std::to_string(m.data_at) + " run past the end of the file (it ends at byte " +
                     std::to_string(m.data_at + got) + ")");
      at = m.data_at + (m.size + kBlock - 1) / kBlock * kBlock;
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
      if (extended) continue;  // global PAX values, GNU long link names
      long_name.reset();
      has_pax_size = false;
      if (m.name.empty() || m.name == ".") continue;
      if (!names.insert(m.name).second)
        fail(m.header_at, "member \"" + m.name + "\" appears twice in the archive");
      if (members.size() >= kMaxTarMembers)
        fail(m.header_at, "more than " + std::to_string(kMaxTarMembers) + " members in the archive");
      members.push_back(std::move(m));
    }
    return members;
  }

  std::string_view member_data(const Member& m, const std::string& what) const {
    if (m.size > kMaxPaxBytes)
      fail(m.header_at, what + " of " + std::to_string(m.size) + " bytes, over the limit of " +
                            std::to_string(kMaxPaxBytes));
    return source_.read(m.data_at, m.size);
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

  TarSource& source_;
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

// A gzip .nemo being read: the stream, the sparse image of the tar it
// inflates to, and the members whose data the image holds.
struct Inflated {
  GzipStream stream;
  SparseImage image;
  std::shared_ptr<const MappedFile> mapped;  // the image, once the first pass is done
  std::unordered_set<uint64_t> captured;     // data offsets of members held whole
};

// The first pass over a gzip .nemo: the tar inflated forward, into the
// image only what the readers will need: headers, extended headers, the
// config and small members (whole, up to the documents' bounds), and of a
// checkpoint the ZIP's local headers (30 bytes after each "PK\3\4" found)
// and its last kCheckpointTail bytes (its directory).
class InflatingSource final : public TarSource {
 public:
  explicit InflatingSource(Inflated& inflated) : in_(inflated) {}

  uint64_t available(uint64_t at, uint64_t n) override {
    retain_at_ = at;
    retained_.clear();
    retain_ = n <= kMaxPaxBytes ? n : 0;
    const uint64_t end = n > UINT64_MAX - at ? UINT64_MAX : at + n;
    if (n == kBlock) want(at, end);  // a header
    const uint64_t out =
        in_.stream.advance(end, [this](uint64_t pos, std::span<const std::byte> bytes) { take(pos, bytes); });
    return out <= at ? 0 : std::min(n, out - at);
  }

  std::string_view read(uint64_t at, uint64_t n) override {
    if (at != retain_at_ || n > retained_.size()) throw std::logic_error("a tar read of bytes not kept");
    return std::string_view(retained_).substr(0, n);
  }

  void entering(const Member& m) override {
    const uint64_t end = m.data_at + m.size;
    if (m.type == 'x' || m.type == 'L' || m.type == 'g' || m.type == 'K') {
      if (m.size <= kMaxPaxBytes) want(m.data_at, end);
      return;
    }
    std::string folder;
    if (is_checkpoint(m.name, folder)) {
      scan_begin_ = m.data_at;
      scan_end_ = end;
      want(end - std::min(m.size, kCheckpointTail), end);
      return;
    }
    const bool config = m.name == kConfig && m.size <= kMaxConfigBytes;
    if (!config && (m.size > kMaxDocumentBytes || documents_ + m.size > kMaxDocumentsBytes)) return;
    if (!config) documents_ += m.size;
    want(m.data_at, end);
    in_.captured.insert(m.data_at);
  }

 private:
  static constexpr uint32_t kLocalHeader = 0x04034b50;  // "PK\3\4", little-endian
  static constexpr uint64_t kLocalHeaderBytes = 30;

  void want(uint64_t begin, uint64_t end) {
    if (begin < end) wanted_.emplace_back(begin, end);
  }

  // Decoded bytes [pos, pos + size): kept for a read, scanned, written
  // where wanted.
  void take(uint64_t pos, std::span<const std::byte> bytes) {
    const uint64_t end = pos + bytes.size();
    if (retain_ > 0 && pos < retain_at_ + retain_ && end > retain_at_) {
      const uint64_t from = std::max(pos, retain_at_), to = std::min(end, retain_at_ + retain_);
      retained_.append(reinterpret_cast<const char*>(bytes.data()) + (from - pos), to - from);
    }
    if (pos < scan_end_ && end > scan_begin_) scan(pos, bytes);
    for (auto it = wanted_.begin(); it != wanted_.end();) {
      const uint64_t from = std::max(pos, it->first), to = std::min(end, it->second);
      if (from < to) in_.image.write(from, bytes.subspan(from - pos, to - from));
      it = it->second <= end ? wanted_.erase(it) : it + 1;
    }
  }

  // Each "PK\3\4" of the checkpoint's bytes: a local header, or storage
  // bytes that look like one (kept all the same: they are never served).
  void scan(uint64_t pos, std::span<const std::byte> bytes) {
    for (uint64_t i = 0; i < bytes.size(); ++i) {
      const uint64_t at = pos + i;
      if (at < scan_begin_ || at >= scan_end_) continue;
      rolling_ = rolling_ >> 8 | static_cast<uint32_t>(bytes[i]) << 24;
      if (at < scan_begin_ + 3 || rolling_ != kLocalHeader) continue;
      const uint64_t header = at - 3;
      // Its first bytes may have come in the piece before.
      for (uint64_t b = header; b < pos; ++b) {
        const auto byte = static_cast<std::byte>(rolling_ >> (8 * (b - header)));
        in_.image.write(b, std::span(&byte, 1));
      }
      want(std::max(header, pos), std::min(header + kLocalHeaderBytes, scan_end_));
    }
  }

  Inflated& in_;
  std::vector<std::pair<uint64_t, uint64_t>> wanted_;
  std::string retained_;
  uint64_t retain_at_ = 0;
  uint64_t retain_ = 0;
  uint64_t scan_begin_ = 0;
  uint64_t scan_end_ = 0;
  uint32_t rolling_ = 0;
  uint64_t documents_ = 0;
};

class Reader {
 public:
  Reader(const ModelFile& model, Inflated* inflated)
      : model_(model),
        inflated_(inflated),
        tar_(inflated ? inflated->mapped : model.mapped),
        display_(model.mapped->display_name()),
        name_(model.path.filename().string()) {}

  Catalog read() {
    FileSource source(*tar_);
    const std::vector<Member> members = TarReader(source, display_).read();
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
    catalog_ = torch_save::torch_catalog(std::string(kFormat), *model_.mapped, name_);
    if (checkpoints.size() > 1) catalog_.export_hints.checkpoint_format.reset();
    catalog_.tensors_may_share_bytes = true;  // tied weights and views share storages
    std::vector<ZipArchive> zips;
    for (const auto& [folder, member] : checkpoints) zips.push_back(open_checkpoint(*member));
    if (inflated_) inflate_records(zips);
    nlohmann::json read_checkpoints = nlohmann::json::array();
    for (size_t i = 0; i < zips.size(); ++i)
      read_checkpoints.push_back(read_checkpoint(*checkpoints[i].second, zips[i],
                                                 checkpoints.size() > 1 ? checkpoints[i].first + "/" : ""));
    catalog_.metadata["nemo"] = {{"members", list_members(members)},
                                 {"checkpoints", std::move(read_checkpoints)}};
    if (inflated_) {
      const ByteSpan deflate = inflated_->stream.deflate_bytes();
      catalog_.metadata["nemo"]["gzip"] = {{"deflate_offset", deflate.file_offset()},
                                           {"deflate_bytes", deflate.size()},
                                           {"tar_bytes", inflated_->stream.decoded_size()}};
    }
    return std::move(catalog_);
  }

 private:
  [[noreturn]] void fail(std::optional<uint64_t> at, const std::string& reason) const {
    throw ModelError(display_, std::string(kFormat), at, reason);
  }

  static bool is_regular(const Member& m) { return m.type == '0' || m.type == '\0' || m.type == '7'; }

  // Every member listed; the config and the small ones as documents (of a
  // gzip .nemo, those the first pass kept).
  nlohmann::json list_members(const std::vector<Member>& members) {
    nlohmann::json listed = nlohmann::json::array();
    uint64_t documents_bytes = 0;
    for (const auto& m : members) {
      listed.push_back({{"name", m.name}, {"size", m.size}, {"offset", m.data_at}});
      std::string folder;
      if (!is_regular(m) || is_checkpoint(m.name, folder)) continue;
      if (inflated_ && !inflated_->captured.contains(m.data_at)) continue;
      if (m.name == kConfig) {
        if (m.size > kMaxConfigBytes)
          fail(m.header_at, std::string(kConfig) + " is " + std::to_string(m.size) +
                                " bytes, over the limit of " + std::to_string(kMaxConfigBytes));
        catalog_.documents.push_back(
            {std::string(kConfig), std::string(text_of(tar_->read(m.data_at, m.size)))});
        continue;
      }
      if (m.size > kMaxDocumentBytes || documents_bytes + m.size > kMaxDocumentsBytes) continue;
      documents_bytes += m.size;
      catalog_.documents.push_back({"nemo/" + m.name, std::string(text_of(tar_->read(m.data_at, m.size)))});
    }
    return listed;
  }

  ZipArchive open_checkpoint(const Member& member) const {
    if (member.size < 4 || text_of(tar_->read(member.data_at, 4)) != std::string_view("PK\x03\x04", 4))
      fail(member.data_at,
           member.name +
               " is not a torch.save ZIP archive (a legacy torch.save, from before torch 1.6, "
               "is not read inside a .nemo)");
    return ZipArchive::open(tar_, member.data_at, member.size, std::string(kFormat));
  }

  // The second pass over a gzip .nemo: the checkpoints' records but their
  // storages (data.pkl, version, byteorder, ...) inflated into the image.
  void inflate_records(const std::vector<ZipArchive>& zips) {
    std::vector<std::pair<uint64_t, uint64_t>> wanted;
    for (const auto& zip : zips) {
      const std::string storages = torch_save::archive_folder(zip) + "data/";
      for (const auto& m : zip.members())
        if (!m.name.starts_with(storages))
          wanted.emplace_back(zip.base() + m.data_offset, zip.base() + m.data_offset + m.compressed_size);
    }
    uint64_t last = 0;
    for (const auto& [begin, end] : wanted) last = std::max(last, end);
    inflated_->stream.restart();
    inflated_->stream.advance(last, [&](uint64_t pos, std::span<const std::byte> bytes) {
      for (const auto& [begin, end] : wanted) {
        const uint64_t from = std::max(pos, begin), to = std::min(pos + bytes.size(), end);
        if (from < to) inflated_->image.write(from, bytes.subspan(from - pos, to - from));
      }
    });
  }

  // Of a gzip .nemo, a tensor's bytes are a range of what the stream
  // decodes to: served by the tree's inflate views, never held.
  void serve_inflated(TensorSpec& t) const {
    if (t.bytes.mapped_file() != tar_.get())
      fail(std::nullopt, "tensor \"" + t.name +
                             "\" is not stored as it is in the checkpoint (a big-endian or compressed "
                             "storage), which a gzip .nemo cannot serve");
    t.encoded = Encoded{Encoded::Method::Deflate, t.bytes.file_offset(), t.bytes.size(),
                        inflated_->stream.decoded_size(), 0};
    t.bytes = inflated_->stream.deflate_bytes();
    t.source = {name_, std::nullopt};
  }

  // One checkpoint: a torch.save ZIP lying in the member's bytes, read in place.
  nlohmann::json read_checkpoint(const Member& member, const ZipArchive& zip, const std::string& prefix) {
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
      if (inflated_) serve_inflated(t);
      catalog_.add(t);
    }
    if (!contents.values.empty())
      catalog_.metadata["values"][prefix.empty() ? "." : prefix] = contents.values;
    if (!contents.skipped_objects.empty())
      for (auto& skipped : contents.skipped_objects) catalog_.metadata["skipped_objects"].push_back(skipped);
    // A gzip .nemo's image holds no storage bytes to check: its stream's
    // CRC-32 was checked as it was inflated.
    if (model_.checks != nullptr && !inflated_)
      for (auto& check : zip.crc_checks()) model_.checks->push_back(std::move(check));
    return {{"member", member.name}, {"tensors", contents.tensors.size()}, {"protocol", contents.protocol}};
  }

  const ModelFile& model_;
  Inflated* inflated_;
  std::shared_ptr<const MappedFile> tar_;
  std::string display_;
  std::string name_;
  Catalog catalog_;
};

constexpr std::string_view kGzipMagic = "\x1f\x8b";

// A gzip .nemo: the first pass walks the tar as it inflates, keeping what
// the readers need in the image; the image is then read as a tar is.
Catalog open_gzip(const ModelFile& model) {
  const std::string display = model.mapped->display_name();
  Inflated inflated{GzipStream(model.mapped, std::string(kFormat)),
                    SparseImage(display, std::string(kFormat)),
                    nullptr,
                    {}};
  InflatingSource source(inflated);
  TarReader(source, display).read();
  // What follows the tar's end blocks: tarfile's padding to its record size.
  const uint64_t walked = inflated.stream.produced();
  inflated.stream.advance(walked + kMaxTrailingBytes, [](uint64_t, std::span<const std::byte>) {});
  if (!inflated.stream.ended())
    throw ModelError(display, std::string(kFormat), std::nullopt,
                     "more than " + std::to_string(kMaxTrailingBytes) +
                         " bytes follow the end of the tar inside the gzip stream");
  inflated.mapped = inflated.image.map(inflated.stream.decoded_size());
  return Reader(model, &inflated).read();
}

}  // namespace

bool probe_file(std::span<const std::byte> head) {
  const std::string_view text = text_of(head);
  if (text.starts_with(kGzipMagic)) return true;
  return text.size() >= kMagic.at + 5 && text.substr(kMagic.at, 5) == "ustar";
}

Catalog open_file(const ModelFile& model) {
  const MappedFile& file = *model.mapped;
  if (file.size() >= 2 && text_of(file.read(0, 2)) == kGzipMagic) return open_gzip(model);
  return Reader(model, nullptr).read();
}

}  // namespace modelfs::nemo
