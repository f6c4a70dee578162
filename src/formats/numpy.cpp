// SPDX-License-Identifier: Apache-2.0
#include "formats/numpy.hpp"

#include <zlib.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <limits>
#include <map>

#include "io/budget_charge.hpp"
#include "io/byte_reader.hpp"
#include "io/checked_math.hpp"
#include "modelfs/error.hpp"

namespace modelfs::numpy {
namespace {

constexpr std::string_view kNpyFormat = "npy";
constexpr std::string_view kNpzFormat = "npz";
constexpr std::string_view kMagic = "\x93NUMPY";
constexpr uint16_t kEncryptedFlags = 0x0001 | 0x0040;  // ZIP bits 0 (encrypted) and 6 (strong)
constexpr uint64_t kMaxDeflateRatio = 1032;            // deflate's most: 258 bytes per 2 bits, and a bit
constexpr size_t kMaxFieldDepth = 32;                  // nested structured fields, only skipped

[[noreturn]] void fail(const Where& where, uint64_t offset, const std::string& reason) {
  throw ModelError(where.file, where.format, where.base + offset, where.prefix + reason);
}

// The array's data, `nbytes` from `start`, is exactly the `available`
// bytes there. numpy reads the bytes it needs and ignores the rest; nothing
// numpy writes has more, and bytes no reader looks at are where a payload
// hides, so they are refused (as safetensors refuses undescribed bytes).
void check_data_fills(const Where& where, uint64_t start, uint64_t nbytes, uint64_t available,
                      std::string_view writer) {
  if (nbytes > available)
    fail(where, start,
         "the data is " + std::to_string(available) + " bytes but shape and dtype need " +
             std::to_string(nbytes));
  if (nbytes < available)
    fail(where, start + nbytes,
         std::to_string(available - nbytes) + " bytes after the array's data (" + std::string(writer) +
             " writes none)");
}

// A cursor over the header text, for the dict grammar of docs/formats.md
// §10.5: no evaluation, no escapes, nothing but what numpy's writer makes
// (and the spacing other writers use).
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const Preamble& preamble, const Where& where)
      : text_(text), preamble_(preamble), where_(where) {}

  Header parse() {
    Header header;
    bool seen_descr = false, seen_order = false, seen_shape = false;
    blanks();
    expect('{');
    for (;;) {
      blanks();
      if (peek() == '}') break;
      const size_t key_at = pos_;
      const std::string_view key = string_literal("a key");
      blanks();
      expect(':');
      blanks();
      auto once = [&](bool& seen) {
        if (seen) error(key_at, "the key '" + std::string(key) + "' appears twice");
        seen = true;
      };
      if (key == "descr") {
        once(seen_descr);
        if (peek() == '[') {
          skip_fields();
          header.descr.clear();
        } else {
          header.descr = string_literal("the descr");
          if (header.descr.empty()) error(key_at, "the descr is empty");
        }
      } else if (key == "fortran_order") {
        once(seen_order);
        header.fortran_order = boolean();
      } else if (key == "shape") {
        once(seen_shape);
        header.shape = shape();
      } else {
        error(key_at,
              "unknown key '" + std::string(key) + "' (an .npy header has descr, fortran_order, shape)");
      }
      blanks();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() != '}') error(pos_, "expected ',' or '}' after the value of '" + std::string(key) + "'");
    }
    ++pos_;  // '}'
    if (!seen_descr || !seen_order || !seen_shape)
      error(pos_, std::string("the header lacks the key '") +
                      (!seen_descr   ? "descr"
                       : !seen_order ? "fortran_order"
                                     : "shape") +
                      "'");
    blanks();
    if (pos_ < text_.size() && text_[pos_] == '\n') ++pos_;
    if (pos_ != text_.size())
      error(pos_, "text after the header dict (only spaces and a final newline may follow)");
    structured_ = header.descr.empty();
    return header;
  }

  bool structured() const noexcept { return structured_; }

 private:
  [[noreturn]] void error(size_t at, const std::string& reason) const {
    fail(where_, preamble_.header_start + at, "header: " + reason);
  }
  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  void blanks() {
    while (pos_ < text_.size() && text_[pos_] == ' ') ++pos_;
  }
  void expect(char c) {
    if (peek() != c) error(pos_, std::string("expected '") + c + "'");
    ++pos_;
  }

  std::string_view string_literal(std::string_view what) {
    const char quote = peek();
    if (quote != '\'' && quote != '"') error(pos_, "expected a quoted string as " + std::string(what));
    const size_t start = ++pos_;
    while (pos_ < text_.size() && text_[pos_] != quote) {
      const auto c = static_cast<unsigned char>(text_[pos_]);
      if (c == '\\' || c < 0x20) error(pos_, "escapes and control characters are not part of an .npy header");
      ++pos_;
    }
    if (pos_ == text_.size()) error(start - 1, "a string that does not end");
    return text_.substr(start, pos_++ - start);
  }

  bool boolean() {
    for (const auto& [word, value] : {std::pair{std::string_view("True"), true}, {"False", false}})
      if (text_.substr(pos_).starts_with(word)) {
        pos_ += word.size();
        return value;
      }
    error(pos_, "fortran_order must be True or False");
  }

  std::vector<uint64_t> shape() {
    std::vector<uint64_t> dims;
    expect('(');
    blanks();
    bool comma_after_last = false;
    while (peek() != ')') {
      if (dims.size() == kMaxRank) error(pos_, "more than " + std::to_string(kMaxRank) + " dimensions");
      dims.push_back(integer());
      blanks();
      comma_after_last = peek() == ',';
      if (comma_after_last) {
        ++pos_;
        blanks();
      } else if (peek() != ')') {
        error(pos_, "expected ',' or ')' in the shape");
      }
    }
    // (3) is the integer 3 in Python, not a tuple.
    if (dims.size() == 1 && !comma_after_last)
      error(pos_, "the shape (n) is not a tuple; a 1-d shape is (n,)");
    ++pos_;
    return dims;
  }

  uint64_t integer() {
    const size_t start = pos_;
    uint64_t value = 0;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      if (pos_ > start && text_[start] == '0') error(start, "a dimension with a leading zero");
      const auto digit = static_cast<uint64_t>(text_[pos_] - '0');
      if (value > (static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) - digit) / 10)
        error(start, "a dimension past 2^63 - 1");
      value = value * 10 + digit;
      ++pos_;
    }
    if (pos_ == start) error(start, "expected a non-negative integer in the shape");
    // Python 2's long suffix, which numpy still reads in 1.0 and 2.0 headers.
    if (preamble_.major < 3 && (peek() == 'L' || peek() == 'l')) ++pos_;
    return value;
  }

  // A structured dtype's list of fields, skipped (refused by the caller):
  // brackets, parentheses and strings, within a depth limit.
  void skip_fields() {
    size_t depth = 0;
    do {
      const char c = peek();
      if (c == '\0') error(pos_, "a list of fields that does not end");
      if (c == '\'' || c == '"') {
        string_literal("a field");
        continue;
      }
      if (c == '[' || c == '(') {
        if (++depth > kMaxFieldDepth)
          error(pos_, "fields nested deeper than " + std::to_string(kMaxFieldDepth));
      } else if (c == ']' || c == ')') {
        --depth;
      }
      ++pos_;
    } while (depth > 0);
  }

  std::string_view text_;
  const Preamble& preamble_;
  const Where& where_;
  size_t pos_ = 0;
  bool structured_ = false;
};

// An array's dtype, shape and strides (in elements) from its header; the
// byte count is dtype size x element count, checked.
struct Array {
  DType dtype = DType::Float32;
  std::vector<uint64_t> shape;
  std::vector<int64_t> strides;
  uint64_t nbytes = 0;
};

Array array_of(const Header& header, DType dtype, const Where& where, uint64_t header_at) {
  Array out;
  out.dtype = dtype;
  out.shape = header.shape;
  const auto numel = checked_numel(out.shape);
  const auto nbytes = numel ? checked_mul(*numel, dtype_bits(dtype) / 8) : std::nullopt;
  if (!nbytes) fail(where, header_at, "the size in bytes of the shape passes 2^64");
  out.nbytes = *nbytes;
  auto strides = contiguous_strides(out.shape);
  if (!strides) fail(where, header_at, "the strides of the shape pass 2^63 (numpy refuses such a shape)");
  if (header.fortran_order) {
    // Column-major: the first dimension varies fastest. The bytes stay in
    // place; the strides say so (the tree's .npy keeps the order).
    Checked<int64_t> stride = 1;
    for (size_t i = 0; i < out.shape.size(); ++i) {
      (*strides)[i] = stride.get().value_or(0);
      stride *= out.shape[i] == 0 ? 1 : out.shape[i];
    }
  }
  out.strides = std::move(*strides);
  return out;
}

// The decoded start of a deflated member: up to `want` bytes (fewer when
// the stream ends first), inflating no more than that.
class HeadInflater {
 public:
  HeadInflater() {
    if (inflateInit2(&zs_, -MAX_WBITS) != Z_OK) throw std::bad_alloc();
  }
  ~HeadInflater() { inflateEnd(&zs_); }
  HeadInflater(const HeadInflater&) = delete;
  HeadInflater& operator=(const HeadInflater&) = delete;

  std::string head(const MappedFile& file, uint64_t offset, uint64_t compressed, uint64_t want,
                   const Where& where) {
    inflateReset(&zs_);
    zs_.next_in = nullptr;
    zs_.avail_in = 0;
    std::string out(want, '\0');
    uint64_t in = 0, produced = 0;
    while (produced < want) {
      check_budget();
      if (zs_.avail_in == 0) {
        if (in == compressed) break;
        const uint64_t n = std::min<uint64_t>(compressed - in, 64 * 1024);
        zs_.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(file.read(offset + in, n).data()));
        zs_.avail_in = static_cast<uInt>(n);
        in += n;
      }
      zs_.next_out = reinterpret_cast<Bytef*>(out.data() + produced);
      zs_.avail_out = static_cast<uInt>(std::min<uint64_t>(want - produced, UINT_MAX));
      const uInt before = zs_.avail_out;
      const int rc = inflate(&zs_, Z_NO_FLUSH);
      produced += before - zs_.avail_out;
      if (rc == Z_STREAM_END) break;
      if (rc != Z_OK && rc != Z_BUF_ERROR)
        fail(where, 0, std::string("corrupt deflate stream: ") + (zs_.msg ? zs_.msg : "zlib error"));
    }
    out.resize(produced);
    return out;
  }

 private:
  z_stream zs_{};
};

// An .npy's preamble and header as bytes come: `read(length)` returns the
// first `length` bytes of the .npy (fewer when it is shorter).
template <typename Read>
std::pair<Preamble, Header> read_npy_header(const Where& where, Read&& read, bool& structured) {
  const std::string start = read(12);
  const Preamble preamble = parse_preamble(std::as_bytes(std::span(start)), where);
  const std::string all = read(preamble.data_start());
  if (all.size() < preamble.data_start())
    fail(where, preamble.header_start,
         "header length " + std::to_string(preamble.header_length) + " runs past the end (" +
             std::to_string(all.size()) + " bytes)");
  HeaderParser parser(std::string_view(all).substr(preamble.header_start), preamble, where);
  Header header = parser.parse();
  structured = parser.structured();
  return {preamble, std::move(header)};
}

std::string kind_refusal(const Header& header, bool structured, const DescrKind& kind) {
  if (structured) return "a structured dtype (a list of fields), not a tensor type";
  return kind.refusal + " (descr '" + header.descr + "')";
}

}  // namespace

Preamble parse_preamble(std::span<const std::byte> bytes, const Where& where) {
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  if (!text.starts_with(kMagic)) fail(where, 0, "no .npy magic (\\x93NUMPY)");
  if (text.size() < 10)
    fail(where, 0, "too short for the .npy preamble (" + std::to_string(text.size()) + " bytes)");
  Preamble p;
  p.major = static_cast<uint8_t>(text[6]);
  p.minor = static_cast<uint8_t>(text[7]);
  if (p.minor != 0 || p.major < 1 || p.major > 3)
    fail(where, 6, "format version " + p.version() + " (numpy writes 1.0, 2.0 and 3.0)");
  if (p.major == 1) {
    p.header_start = 10;
    p.header_length = static_cast<uint8_t>(text[8]) | static_cast<uint64_t>(static_cast<uint8_t>(text[9]))
                                                          << 8;
  } else {
    if (text.size() < 12)
      fail(where, 0, "too short for the .npy preamble (" + std::to_string(text.size()) + " bytes)");
    p.header_start = 12;
    for (int i = 3; i >= 0; --i) p.header_length = p.header_length << 8 | static_cast<uint8_t>(text[8 + i]);
  }
  if (p.header_length > kMaxHeaderBytes)
    fail(where, 8,
         "header length " + std::to_string(p.header_length) + " is over the limit of " +
             std::to_string(kMaxHeaderBytes) + " bytes");
  return p;
}

Header parse_header(std::string_view text, const Preamble& preamble, const Where& where) {
  return HeaderParser(text, preamble, where).parse();
}

DescrKind descr_kind(std::string_view descr) {
  DescrKind out;
  if (descr.size() < 2 || std::string_view("<>|=").find(descr[0]) == std::string_view::npos) {
    out.refusal = "an unknown dtype";
    return out;
  }
  const char order = descr[0];
  const std::string_view code = descr.substr(1);
  static constexpr std::pair<std::string_view, DType> kTypes[] = {
      {"b1", DType::Bool},      {"i1", DType::Int8},       {"u1", DType::UInt8},   {"i2", DType::Int16},
      {"i4", DType::Int32},     {"i8", DType::Int64},      {"u2", DType::UInt16},  {"u4", DType::UInt32},
      {"u8", DType::UInt64},    {"f2", DType::Float16},    {"f4", DType::Float32}, {"f8", DType::Float64},
      {"c8", DType::Complex64}, {"c16", DType::Complex128}};
  for (const auto& [name, dtype] : kTypes) {
    if (code != name) continue;
    const bool one_byte = dtype_bits(dtype) == 8;
    if (!one_byte && order == '|') {
      out.refusal = "a multi-byte type without a byte order";
    } else {
      out.dtype = dtype;
      out.big_endian = !one_byte && order == '>';
    }
    return out;
  }
  switch (code[0]) {
    case 'O':
      out.object = true;
      out.refusal = "an object array: its data is a pickle, never loaded";
      break;
    case 'S':
    case 'a':
    case 'U':
      out.text = true;
      out.refusal = "a string array, not a tensor type";
      break;
    case 'V':
      out.refusal =
          "raw void elements, not a tensor type (ml_dtypes' bfloat16, float8 and int4 are saved so by "
          "np.save, their type lost)";
      break;
    case 'M':
    case 'm':
      out.refusal = "datetime64/timedelta64 values, not a tensor type";
      break;
    default:
      out.refusal = code == "f16" || code == "c32" || code == "f12" || code == "c24"
                        ? "long double elements, which no tensor format has"
                        : "an unknown dtype";
  }
  return out;
}

bool probe_file(std::span<const std::byte> head) {
  return head.size() >= kMagic.size() && std::memcmp(head.data(), kMagic.data(), kMagic.size()) == 0;
}

Catalog open_file(const ModelFile& model) {
  const MappedFile& file = *model.mapped;
  const std::string name = model.path.filename().string();
  const Where where{file.display_name(), std::string(kNpyFormat), 0, ""};
  auto read = [&](uint64_t length) {
    const auto bytes = file.read(0, std::min(length, file.size()));
    return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  };
  bool structured = false;
  const auto [preamble, header] = read_npy_header(where, read, structured);
  const DescrKind kind = descr_kind(header.descr);
  if (structured || !kind.dtype) fail(where, preamble.header_start, kind_refusal(header, structured, kind));
  const Array array = array_of(header, *kind.dtype, where, preamble.header_start);
  const uint64_t start = preamble.data_start();
  check_data_fills(where, start, array.nbytes, file.size() - start, "np.save");

  Catalog catalog;
  catalog.format = std::string(kNpyFormat);
  catalog.mtime = file.mtime();
  catalog.files.push_back(name);
  catalog.metadata["format_version"] = preamble.version();
  // The tensor is named for the file: model.npy holds "model".
  std::string stem = model.path.stem().string();
  TensorSpec t;
  t.name = stem.empty() ? name : stem;
  t.dtype = array.dtype;
  t.shape = array.shape;
  t.strides = array.strides;
  t.bytes = ByteSpan::mapped(model.mapped, start, array.nbytes);
  t.source = {name, start};
  if (kind.big_endian) serve_byte_swapped(t);
  catalog.add(t);
  return catalog;
}

bool is_npz_archive(const ZipArchive& zip) {
  const auto& members = zip.members();
  if (members.empty()) return false;
  for (const auto& m : members)
    if (!m.name.ends_with(".npy")) return false;
  const ZipMember& first = members.front();
  if (first.flags & kEncryptedFlags) return false;
  if (first.stored()) {
    if (first.compressed_size < kMagic.size()) return false;
    const auto bytes = zip.file()->read(zip.file_offset(first), kMagic.size());
    return probe_file(bytes);
  }
  if (first.method != ZipArchive::kDeflated) return false;
  HeadInflater inflater;
  const std::string head = inflater.head(*zip.file(), zip.file_offset(first), first.compressed_size,
                                         kMagic.size(), Where{zip.file()->display_name(), "npz", 0, ""});
  return head == kMagic;
}

Catalog open_npz(const ModelFile& model, const ZipArchive& zip) {
  const MappedFile& file = *model.mapped;
  const std::string name = model.path.filename().string();
  const std::string display = file.display_name();
  Catalog catalog;
  catalog.format = std::string(kNpzFormat);
  catalog.mtime = file.mtime();
  catalog.files.push_back(name);
  nlohmann::json left_out = nlohmann::json::array();
  std::map<std::string, uint64_t> versions;
  HeadInflater inflater;

  for (const ZipMember& m : zip.members()) {
    check_budget();
    const uint64_t at = zip.file_offset(m);
    const Where where{display, std::string(kNpzFormat), at, "member \"" + m.name + "\": "};
    const std::string array_name = m.name.substr(0, m.name.size() - 4);
    if (m.flags & kEncryptedFlags) fail(where, 0, "the member is encrypted");
    if (!m.stored() && m.method != ZipArchive::kDeflated)
      fail(where, 0,
           "compression method " + std::to_string(m.method) +
               " (np.savez stores members, np.savez_compressed deflates them)");
    const bool deflated = !m.stored();
    if (!deflated && m.compressed_size != m.uncompressed_size)
      fail(where, 0,
           "a stored member of " + std::to_string(m.compressed_size) + " bytes declares " +
               std::to_string(m.uncompressed_size) + " uncompressed");
    if (deflated && m.uncompressed_size / kMaxDeflateRatio > m.compressed_size)
      fail(where, 0,
           std::to_string(m.compressed_size) + " compressed bytes cannot make the " +
               std::to_string(m.uncompressed_size) + " the member declares (deflate expands at most " +
               std::to_string(kMaxDeflateRatio) + "x)");
    auto read = [&](uint64_t length) {
      length = std::min(length, m.uncompressed_size);
      if (deflated) return inflater.head(file, at, m.compressed_size, length, where);
      const auto bytes = file.read(at, length);
      return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    };
    {
      const std::string magic = read(kMagic.size());
      if (magic != kMagic) {
        // np.load gives such a member as bytes: not an array.
        left_out.push_back({{"name", array_name}, {"reason", "not an .npy array (no \\x93NUMPY magic)"}});
        continue;
      }
    }
    bool structured = false;
    const auto [preamble, header] = read_npy_header(where, read, structured);
    const DescrKind kind = descr_kind(header.descr);
    if (kind.object)
      fail(where, preamble.header_start,
           "an object array (descr '" + header.descr + "'): its data is a pickle, never loaded");
    if (structured || !kind.dtype || (kind.big_endian && deflated)) {
      // Strings and the other types no tensor has are left out, and named
      // (and big-endian deflated members: one encoding per tensor).
      left_out.push_back({{"name", array_name},
                          {"descr", structured ? "(structured)" : header.descr},
                          {"reason", kind.dtype ? "a big-endian member that is also deflated (modelfs swaps "
                                                  "stored members' bytes, or inflates little-endian ones)"
                                                : kind_refusal(header, structured, kind)}});
      continue;
    }
    const Array array = array_of(header, *kind.dtype, where, preamble.header_start);
    const uint64_t start = preamble.data_start();
    check_data_fills(where, start, array.nbytes, m.uncompressed_size - start, "np.savez");
    ++versions[preamble.version()];

    TensorSpec t;
    t.name = array_name;
    t.dtype = array.dtype;
    t.shape = array.shape;
    t.strides = array.strides;
    t.extras["zip_member"] = m.name;
    if (deflated) {
      t.bytes = ByteSpan::mapped(model.mapped, at, m.compressed_size);
      t.source = {name, std::nullopt};
      t.encoded = Encoded{Encoded::Method::Deflate, start, array.nbytes, m.uncompressed_size};
      t.extras["compression"] = "deflate";
    } else {
      t.bytes = ByteSpan::mapped(model.mapped, at + start, array.nbytes);
      t.source = {name, at + start};
      if (kind.big_endian) serve_byte_swapped(t);
    }
    catalog.add(t);
  }
  // One version string for the usual archive, each with its count otherwise.
  if (versions.size() == 1) {
    catalog.metadata["format_version"] = versions.begin()->first;
  } else if (!versions.empty()) {
    for (const auto& [version, count] : versions) catalog.metadata["format_versions"][version] = count;
  }
  if (!left_out.empty()) catalog.metadata["left_out"] = std::move(left_out);
  if (model.checks != nullptr)
    for (auto& check : zip.crc_checks()) model.checks->push_back(std::move(check));
  return catalog;
}

}  // namespace modelfs::numpy
