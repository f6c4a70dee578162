// SPDX-License-Identifier: Apache-2.0
#include "formats/llamafile.hpp"

#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include "formats/gguf.hpp"
#include "io/byte_reader.hpp"
#include "modelfs/error.hpp"

namespace modelfs::llamafile {
namespace {

constexpr std::string_view kFormat = "llamafile";
constexpr std::string_view kGgufSuffix = ".gguf";
// ZIP's end record: its signature, its size without a comment, and the
// longest comment after it.
constexpr uint32_t kEndSignature = 0x06054b50;
constexpr uint64_t kEndRecordBytes = 22;
constexpr uint64_t kMaxCommentBytes = 0xFFFF;
constexpr uint16_t kEncryptedFlag = 0x0001;

bool is_gguf_member(const ZipMember& member) {
  if (member.name.size() < kGgufSuffix.size()) return false;
  std::string tail = member.name.substr(member.name.size() - kGgufSuffix.size());
  std::transform(tail.begin(), tail.end(), tail.begin(), [](unsigned char c) { return std::tolower(c); });
  return tail == kGgufSuffix;
}

std::string method_name(uint16_t method) {
  switch (method) {
    case 0:
      return "stored";
    case ZipArchive::kDeflated:
      return "deflate";
    case ZipArchive::kBzip2:
      return "bzip2";
    default:
      return "method " + std::to_string(method);
  }
}

class Reader {
 public:
  Reader(const ModelFile& model, const ZipArchive& zip)
      : model_(model),
        zip_(zip),
        name_(model.path.filename().string()),
        display_(model.mapped->display_name()) {}

  Catalog read() {
    std::vector<const ZipMember*> ggufs;
    for (const auto& member : zip_.members())
      if (is_gguf_member(member)) ggufs.push_back(&member);
    if (ggufs.empty())
      throw ModelError(display_, std::string(kFormat), std::nullopt,
                       "the ZIP archive in the file holds no .gguf member, so it is not a llamafile");
    for (const ZipMember* member : ggufs) check_servable(*member);

    catalog_.format = std::string(kFormat);
    catalog_.mtime = model_.mapped->mtime();
    catalog_.files.push_back(name_);
    nlohmann::json info = nlohmann::json::object();
    nlohmann::json others = nlohmann::json::array();
    const bool several = ggufs.size() > 1;
    for (size_t i = 0; i < ggufs.size(); ++i) {
      const ZipMember& member = *ggufs[i];
      gguf::File file = gguf::parse(model_.mapped, name_, zip_.file_offset(member), member.uncompressed_size);
      const std::string prefix = several ? stem(member) + "/" : "";
      if (several) catalog_.export_hints.models.emplace_back(stem(member), prefix);
      for (auto& tensor : file.tensors) {
        tensor.name = prefix + tensor.name;
        catalog_.add(tensor);
      }
      if (i == 0) {
        info["gguf_member"] = member.name;
        info["gguf_offset"] = zip_.file_offset(member);
        catalog_.metadata["gguf"] = file.header_json();
        catalog_.metadata["kv"] = std::move(file.kv);
        catalog_.metadata["kv_types"] = std::move(file.kv_types);
        continue;
      }
      others.push_back({{"gguf_member", member.name},
                        {"gguf_offset", zip_.file_offset(member)},
                        {"gguf", file.header_json()},
                        {"kv", std::move(file.kv)},
                        {"kv_types", std::move(file.kv_types)}});
    }
    info["members"] = list_members();
    if (several) info["other_ggufs"] = std::move(others);
    catalog_.metadata["llamafile"] = std::move(info);
    if (model_.checks != nullptr)
      for (auto& check : zip_.crc_checks()) model_.checks->push_back(std::move(check));
    return std::move(catalog_);
  }

 private:
  [[noreturn]] void refuse(const ZipMember& member, const std::string& reason) const {
    throw ModelError(display_, std::string(kFormat), zip_.base() + member.local_header_offset,
                     "GGUF member " + member.name + " " + reason);
  }

  // A GGUF is served from the mapping as it lies in the file: only a
  // stored member can be.
  void check_servable(const ZipMember& member) const {
    if (member.flags & kEncryptedFlag) refuse(member, "is encrypted");
    if (!member.stored())
      refuse(member, "is compressed (" + method_name(member.method) +
                         "); a llamafile's weights must be stored uncompressed to be served in place "
                         "(zipalign stores them)");
  }

  std::string stem(const ZipMember& member) const {
    return member.name.substr(0, member.name.size() - kGgufSuffix.size());
  }

  // Every member, by name, size, method and (stored) data offset; small
  // members that are not GGUFs also as documents.
  nlohmann::json list_members() {
    nlohmann::json members = nlohmann::json::array();
    uint64_t documents_bytes = 0;
    for (const auto& member : zip_.members()) {
      nlohmann::json entry = {
          {"name", member.name}, {"size", member.uncompressed_size}, {"method", method_name(member.method)}};
      if (member.stored()) entry["offset"] = zip_.file_offset(member);
      const bool readable = member.stored() || member.method == ZipArchive::kDeflated;
      const bool document = readable && !is_gguf_member(member) && !member.name.ends_with('/') &&
                            !(member.flags & kEncryptedFlag) &&
                            member.uncompressed_size <= kMaxDocumentBytes &&
                            documents_bytes + member.uncompressed_size <= kMaxDocumentsBytes;
      if (document) {
        documents_bytes += member.uncompressed_size;
        catalog_.documents.push_back({"llamafile/" + member.name, std::string(zip_.contents(member).view())});
        entry["document"] = "llamafile/" + member.name;
      }
      members.push_back(std::move(entry));
    }
    return members;
  }

  const ModelFile& model_;
  const ZipArchive& zip_;
  std::string name_;
  std::string display_;
  Catalog catalog_;
};

}  // namespace

bool probe_file(std::span<const std::byte> head) {
  const std::string_view text(reinterpret_cast<const char*>(head.data()), head.size());
  // The three magics of the APE specification (cosmopolitan's ape/specification.md).
  return text.starts_with("MZqFpD='") || text.starts_with("jartsr='") || text.starts_with("APEDBG='");
}

bool probe_past_head(const MappedFile& file, uint64_t) {
  const uint64_t size = file.size();
  if (size < kEndRecordBytes) return false;
  const uint64_t tail = std::min(size, kEndRecordBytes + kMaxCommentBytes);
  const auto bytes = file.read(size - tail, tail);
  for (uint64_t at = tail - kEndRecordBytes + 1; at-- > 0;)
    if (load_le<uint32_t>(bytes, at) == kEndSignature) return true;
  return false;
}

bool is_llamafile_archive(const ZipArchive& zip) {
  return std::any_of(zip.members().begin(), zip.members().end(), is_gguf_member);
}

Catalog open_file(const ModelFile& model) {
  return open_archive(model, ZipArchive::open(model.mapped, std::string(kFormat)));
}

Catalog open_archive(const ModelFile& model, const ZipArchive& zip) { return Reader(model, zip).read(); }

}  // namespace modelfs::llamafile
