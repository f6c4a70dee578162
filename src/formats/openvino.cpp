// SPDX-License-Identifier: Apache-2.0
#include "formats/openvino.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <pugixml.hpp>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "formats/model_folder.hpp"
#include "formats/read_back.hpp"
#include "formats/string_lines.hpp"
#include "io/budget_charge.hpp"
#include "io/byte_reader.hpp"
#include "io/checked_math.hpp"
#include "io/json_text.hpp"
#include "io/tensor_spec.hpp"
#include "io/trim.hpp"
#include "modelfs/budget.hpp"
#include "modelfs/error.hpp"
#include "modelfs/mapped_file.hpp"

namespace modelfs::openvino {
namespace {

using Json = nlohmann::json;

constexpr std::string_view kFormat = "openvino";          // the catalog's name of the format
constexpr std::string_view kErrorFormat = "OpenVINO IR";  // what messages call it

// Element types (docs/formats.md, "OpenVINO IR"): bits per element; no
// dtype where modelfs cannot know how the IR packs them (the reason then
// says why). String's bits are 0: its elements carry their lengths.
struct ElementType {
  std::string_view name;
  std::string_view alias;  // the legacy spelling, or empty
  std::optional<DType> dtype;
  uint32_t bits;
  std::string_view left_out = {};  // why a type with no dtype is left out
};
// How the sub-byte types order their elements in a byte, for the sidecar:
// one order for all but u1.
constexpr std::string_view kLowFirst = "element 0 in the lowest bits";
constexpr std::string_view kMsbFirst = "element 0 in the most significant bit";
// u2, u3 and u6 changed their packing between OpenVINO releases (u2 in
// 2025, u3 and u6 in 2026) and an IR does not say which release wrote it:
// unpacked values could be silently wrong.
constexpr std::string_view kRepacked =
    " changed its packing between OpenVINO releases and the IR does not say which release wrote it";
constexpr ElementType kElementTypes[] = {
    {"boolean", "BOOL", DType::Bool, 8},
    {"bf16", "BF16", DType::BFloat16, 16},
    {"f16", "FP16", DType::Float16, 16},
    {"f32", "FP32", DType::Float32, 32},
    {"f64", "FP64", DType::Float64, 64},
    {"i4", "I4", DType::Int4, 4},
    {"i8", "", DType::Int8, 8},
    {"i16", "", DType::Int16, 16},
    {"i32", "", DType::Int32, 32},
    {"i64", "", DType::Int64, 64},
    {"u4", "U4", DType::UInt4, 4},
    {"u8", "", DType::UInt8, 8},
    {"u16", "", DType::UInt16, 16},
    {"u32", "", DType::UInt32, 32},
    {"u64", "", DType::UInt64, 64},
    {"f8e4m3", "F8E4M3", DType::Float8E4M3FN, 8},
    {"f8e5m2", "F8E5M2", DType::Float8E5M2, 8},
    {"f8e8m0", "F8E8M0", DType::Float8E8M0FNU, 8},
    {"f4e2m1", "F4E2M1", DType::Float4E2M1, 4},
    {"string", "STRING", DType::String, 0},
    {"u1", "BIN", DType::UInt1, 1},
    {"bin", "", DType::UInt1, 1},
    {"nf4", "NF4", DType::NF4, 4},
    {"u2", "", std::nullopt, 2, "u2 (pairs most significant first, lowest first since 2025)"},
    {"u3", "", std::nullopt, 3, "u3 (split across 3-byte groups, a plain bit stream since 2026)"},
    {"u6", "", std::nullopt, 6, "u6 (split across 3-byte groups, a plain bit stream since 2026)"},
};

const ElementType* element_type(std::string_view name) {
  for (const auto& t : kElementTypes)
    if (t.name == name || (!t.alias.empty() && t.alias == name)) return &t;
  return nullptr;
}

// What pugixml takes (malloc) to parse `text`, at most, so that the budget
// is charged for it before the parse: pugixml's allocator is left as the
// host program set it. pugixml copies the text and makes a node for each
// element, CDATA section or DOCTYPE (each starts with a '<' not followed
// by '/') and for each run of text that is not all whitespace (each starts
// after a '>', or at the start), and an attribute for each name=value (each
// has its '='). Its 1.x layout on a 64-bit machine: a node is 8 words, an
// attribute 5; a sixteenth more for its pages' headers and partly used
// pages. A bound from counts rather than one multiple of the size: what a
// real IR takes is a small multiple of its text, what a crafted one of
// tiny elements and text runs takes is several times more.
uint64_t xml_parse_bound(std::string_view text) {
  constexpr uint64_t kNodeBytes = 64, kAttributeBytes = 40, kDocumentBytes = 4096;
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  uint64_t nodes = 1, attributes = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '=') {
      ++attributes;
    } else if (c == '<') {
      if (i + 1 == text.size() || text[i + 1] != '/') ++nodes;
    } else if (c == '>') {
      size_t next = i + 1;
      while (next < text.size() && space(text[next])) ++next;
      if (next < text.size() && text[next] != '<') ++nodes;
      i = next - 1;
    }
  }
  return text.size() + 1 + (nodes * kNodeBytes + attributes * kAttributeBytes) / 16 * 17 + kDocumentBytes;
}

std::optional<uint64_t> parse_u64(std::string_view text) {
  uint64_t value = 0;
  if (text.empty()) return std::nullopt;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// Shape text: "" (a scalar) or comma-separated non-negative integers.
std::optional<std::vector<uint64_t>> parse_shape(std::string_view text) {
  std::vector<uint64_t> shape;
  if (trim_blanks(text).empty()) return shape;
  while (true) {
    const auto comma = text.find(',');
    const auto dim = parse_u64(trim_blanks(text.substr(0, comma)));
    if (!dim || shape.size() >= kMaxRank) return std::nullopt;
    shape.push_back(*dim);
    if (comma == std::string_view::npos) return shape;
    text.remove_prefix(comma + 1);
  }
}

// Drops the resident pages of mapped bytes (whole pages inside them). The
// mapping is a read-only file mapping (a remote model's: of its cache file,
// whose bytes were fetched before they were read): what is read again is
// faulted in from the file.
void release_pages(std::span<const std::byte> bytes) {
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(bytes.data());
  const uintptr_t first = (begin + page - 1) / page * page;
  const uintptr_t last = (begin + bytes.size()) / page * page;
  if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

class Reader {
 public:
  explicit Reader(const ModelFile& model) : model_(model), name_(model.path.filename().string()) {}

  Catalog read() {
    const auto& file = model_.mapped;
    text_ = whole_text(*file, kMaxXmlBytes, kErrorFormat, "an IR .xml");
    // Half the rate of other formats' metadata: an IR repeats its tag and
    // attribute names in every layer, some 2-3 times the bytes a JSON
    // header takes for a tensor (what the budget's rate is set for); the
    // parsed tree, some 5 times the text, still fits (-o max_parse_mb
    // raises it for an .xml over ~50 MB).
    add_metadata_bytes(file->size() / 2);
    const auto bytes = std::as_bytes(std::span(text_));

    {
      // The parsed tree is given back before the document's copy is made.
      const ScopedCharge parsing(xml_parse_bound(text_), display(), kErrorFormat, "parsing the XML");
      pugi::xml_document doc;
      read_tree(doc, bytes);
    }
    add_consts();
    // The .xml was read whole: its pages are given back (they are the
    // file's, read again from it if the document below is made).
    release_pages(bytes);
    if (text_.size() <= kMaxDocumentBytes) {
      catalog_.documents.push_back({"model.xml", std::string(text_)});
    } else {
      catalog_.metadata["xml_document"] = "not kept under .modelfs/: the .xml is " +
                                          std::to_string(text_.size()) + " bytes, over " +
                                          std::to_string(kMaxDocumentBytes);
    }
    if (model_.checks != nullptr && bin_) add_check();
    return std::move(catalog_);
  }

 private:
  void read_tree(pugi::xml_document& doc, std::span<const std::byte> bytes) {
    // No DTD is read or expanded (pugixml never does); one is parsed only
    // to be refused.
    const auto result = doc.load_buffer(bytes.data(), bytes.size(), pugi::parse_default | pugi::parse_doctype,
                                        pugi::encoding_utf8);
    check_budget();
    if (!result) {
      if (result.status == pugi::status_out_of_memory)
        fail(std::nullopt, "parsing the XML takes more memory than the budget allows");
      fail(static_cast<uint64_t>(std::max<ptrdiff_t>(result.offset, 0)),
           std::string("is not well-formed XML: ") + result.description());
    }
    check_tree(doc);

    const pugi::xml_node net = doc.document_element();
    if (std::string_view(net.name()) != "net")
      fail(at(net), "the root element is <" + std::string(net.name()) + ">, not <net>: not an OpenVINO IR");
    const std::string_view version = net.attribute("version").value();
    if (version != "10" && version != "11")
      fail(at(net), "IR version " + shown(version) + " (modelfs reads IR versions 10 and 11)");
    const pugi::xml_node layers = net.child("layers");
    if (!layers) fail(at(net), "<net> has no <layers>");

    catalog_.format = std::string(kFormat);
    catalog_.mtime = model_.mapped->mtime();
    catalog_.files.push_back(name_);
    catalog_.tensors_may_share_bytes = true;  // the writer stores identical blobs once

    std::map<std::string, uint64_t> types;
    uint64_t layer_count = 0;
    for (const pugi::xml_node layer : layers.children("layer")) {
      check_budget();
      ++layer_count;
      const std::string type = layer.attribute("type").value();
      ++types[type];
      if (type == "Const") read_const(layer);
    }

    Json& meta = catalog_.metadata;
    meta["ir_version"] = version == "10" ? 10 : 11;
    meta["net_name"] = net.attribute("name").value();
    meta["layers"] = layer_count;
    meta["layer_types"] = types;
    meta["consts"] = consts_;
    if (bin_) {
      meta["weights_file"] = bin_name_;
      meta["weights_bytes"] = bin_->size();
    }
    if (!left_out_.empty()) {
      meta["left_out"] = std::move(left_out_);
      meta["left_out_count"] = left_out_count_;
    }
    if (const auto rt_info = net.child("rt_info")) {
      Json info = Json::object();
      uint64_t budget = kMaxRtInfoBytes;
      bool truncated = false;
      rt_info_json(rt_info, info, 0, budget, truncated);
      meta["rt_info"] = std::move(info);
      if (truncated) meta["rt_info_truncated"] = true;
    }
  }

  // The .xml kept whole as .modelfs/model.xml up to this size.
  static constexpr uint64_t kMaxDocumentBytes = uint64_t{16} << 20;
  static constexpr uint64_t kMaxRtInfoBytes = 64 << 10;
  static constexpr size_t kMaxRtInfoDepth = 8;
  static constexpr size_t kMaxLeftOutListed = 1000;

  std::string display() const { return model_.mapped->display_name(); }

  uint64_t at(const pugi::xml_node& node) const {
    const ptrdiff_t offset = node.offset_debug();
    return offset < 0 ? 0 : static_cast<uint64_t>(offset);
  }

  [[noreturn]] void fail(std::optional<uint64_t> offset, const std::string& reason) const {
    throw ModelError(display(), std::string(kErrorFormat), offset, reason);
  }

  // Depth, attribute sizes and no DOCTYPE, over the whole tree, without
  // recursion (pugixml's traverse keeps its own path).
  void check_tree(pugi::xml_document& doc) {
    struct Walker : pugi::xml_tree_walker {
      std::optional<pugi::xml_node> bad;
      std::string why;
      uint64_t seen = 0;
      bool for_each(pugi::xml_node& node) override {
        if (++seen % 4096 == 0 && current_budget() != nullptr && current_budget()->passed()) {
          bad = node;
          why = "budget";
          return false;
        }
        if (node.type() == pugi::node_doctype) {
          bad = node;
          why = "holds a DOCTYPE (IR files have none; DTDs and entities are not read)";
          return false;
        }
        if (static_cast<uint64_t>(depth()) >= kMaxDepth) {
          bad = node;
          why = "nests elements deeper than " + std::to_string(kMaxDepth) + " levels";
          return false;
        }
        for (const pugi::xml_attribute attribute : node.attributes()) {
          const size_t length = std::strlen(attribute.value());
          if (length > kMaxAttributeBytes) {
            bad = node;
            why = "has an attribute " + std::string(attribute.name()).substr(0, 80) + " of " +
                  std::to_string(length) + " bytes (at most " + std::to_string(kMaxAttributeBytes) + ")";
            return false;
          }
        }
        return true;
      }
    } walker;
    doc.traverse(walker);
    if (walker.bad) {
      if (walker.why == "budget") check_budget();
      fail(at(*walker.bad), walker.why);
    }
  }

  // The .bin beside the .xml, opened (inside the model's folder) when the
  // first Const needs it.
  const MappedFile& bin(const std::string& quote, uint64_t where) {
    if (bin_) return *bin_;
    folder_.emplace(ModelFolder::of_file(model_.path, std::string(kErrorFormat), model_.remote));
    bin_name_ = model_.path.stem().string() + ".bin";
    auto opened = folder_->open(bin_name_);
    if (!opened)
      fail(where,
           quote + "needs the weights file " + shown(bin_name_) + " beside the .xml, which " + opened.reason);
    bin_ = std::move(opened.file);
    catalog_.files.push_back(bin_name_);
    return *bin_;
  }

  void read_const(const pugi::xml_node& layer) {
    ++consts_;
    const uint64_t where = at(layer);
    const std::string id = layer.attribute("id").value();
    const pugi::xml_attribute name_attr = layer.attribute("name");
    const std::string name = name_attr ? std::string(name_attr.value()) : "layer_" + id;
    const std::string quote = "Const layer " + shown(name) + " (id " + shown(id) + "): ";
    const pugi::xml_node data = layer.child("data");
    if (!data) fail(where, quote + "has no <data>");
    const auto attr = [&](const char* key) -> std::string_view {
      const pugi::xml_attribute a = data.attribute(key);
      if (!a) fail(at(data), quote + "<data> has no " + key + " attribute");
      return a.value();
    };
    const std::string_view et_name = attr("element_type");
    const ElementType* et = element_type(et_name);
    if (et == nullptr) fail(at(data), quote + "unknown element_type " + shown(et_name));
    const std::string_view shape_text = attr("shape");
    auto shape = parse_shape(shape_text);
    if (!shape)
      fail(at(data), quote + "shape " + shown(shape_text) +
                         " is not comma-separated non-negative integers (at most " +
                         std::to_string(kMaxRank) + ")");
    const std::string_view offset_text = attr("offset");
    const std::string_view size_text = attr("size");
    const auto offset = parse_u64(trim_blanks(offset_text));
    if (!offset) fail(at(data), quote + "offset " + shown(offset_text) + " is not a non-negative integer");
    const auto size = parse_u64(trim_blanks(size_text));
    if (!size) fail(at(data), quote + "size " + shown(size_text) + " is not a non-negative integer");

    Size numel = 1;
    for (const uint64_t dim : *shape) numel *= dim;
    const auto strides = contiguous_strides(*shape);
    if (!numel.ok() || !strides)
      fail(at(data), quote + "the element count of shape " + shown(shape_text) + " overflows");
    if (et->bits != 0) {
      // ceil(numel x bits / 8), whole bytes of eight elements first.
      const uint64_t n = numel.value();
      const Size bytes_needed = Size(n / 8) * et->bits + (n % 8 * et->bits + 7) / 8;
      if (!bytes_needed.ok())
        fail(at(data), quote + "the byte size of shape " + shown(shape_text) + " overflows");
      const uint64_t need = bytes_needed.value();
      // Before 2026 OpenVINO sized u3 and u6 in whole 3-byte groups: a
      // Const it wrote so is left out like the others, not refused.
      const bool split_groups = (et->bits == 3 || et->bits == 6) && *size == need + (3 - need % 3) % 3;
      if (*size != need && !split_groups)
        fail(at(data), quote + "size " + std::to_string(*size) + " is not the " + std::to_string(need) +
                           " bytes its shape " + shown(shape_text) + " of " + std::string(et->name) +
                           " needs");
    }
    check_port(layer, *shape, quote);

    const MappedFile& weights = bin(quote, where);
    if (*offset > weights.size() || *size > weights.size() - *offset)
      fail(at(data),
           quote + "bytes [" + std::to_string(*offset) + ", " +
               ((Size(*offset) + *size).get() ? std::to_string(*offset + *size) : std::string("2^64+")) +
               ") run past the end of " + bin_name_ + " (" + std::to_string(weights.size()) + " bytes)");

    if (!et->dtype) {
      ++left_out_count_;
      if (left_out_.size() < kMaxLeftOutListed)
        left_out_.push_back({{"name", name},
                             {"element_type", et->name},
                             {"reason", std::string(et->left_out) + std::string(kRepacked)}});
      return;
    }
    pending_.push_back({name, id, et, std::move(*shape), *offset, *size, numel.value(), at(data)});
  }

  // The Consts checked while the parsed tree was held, added to the
  // catalog once it is given back (so that the two are never held at once).
  void add_consts() {
    for (Pending& c : pending_) {
      check_budget();
      TensorSpec t;
      t.name = std::move(c.name);
      t.dtype = *c.type->dtype;
      t.strides = *contiguous_strides(c.shape);  // checked when the Const was read
      t.shape = std::move(c.shape);
      t.extras = {{"openvino_element_type", c.type->name}, {"openvino_layer_id", c.id}};
      if (c.type->bits < 8 && c.type->bits != 0)
        t.extras["openvino_bit_order"] = c.type->dtype == DType::UInt1 ? kMsbFirst : kLowFirst;
      if (t.dtype == DType::String) {
        const std::string quote = "Const layer " + shown(t.name) + " (id " + shown(c.id) + "): ";
        read_strings(t, c.offset, c.size, c.numel, quote, c.where);
        t.extras["text"] = kJsonLinesText;
      } else {
        t.bytes = ByteSpan::mapped(bin_, c.offset, c.size);
        t.source = {bin_name_, c.offset};
      }
      catalog_.add(t);
      c = Pending{};  // its strings given back as it goes
    }
    pending_.clear();
    pending_.shrink_to_fit();
  }

  // The output port's <dim>s, when it lists any, are the shape.
  void check_port(const pugi::xml_node& layer, const std::vector<uint64_t>& shape, const std::string& quote) {
    const pugi::xml_node port = layer.child("output").child("port");
    if (!port || !port.child("dim")) return;
    std::vector<uint64_t> dims;
    for (const pugi::xml_node dim : port.children("dim")) {
      const auto value = parse_u64(trim_blanks(dim.child_value()));
      if (!value || dims.size() > kMaxRank) {
        fail(at(dim), quote + "its output port has dim " + shown(dim.child_value()) +
                          ", not a non-negative integer (a Const's shape is static)");
      }
      dims.push_back(*value);
    }
    if (dims != shape) fail(at(port), quote + "its output port's dims are not its shape");
  }

  // String elements: int32 count, int32 end offsets (count + 1, the first
  // 0), then the characters; as JSON Lines.
  void read_strings(TensorSpec& t, uint64_t offset, uint64_t size, uint64_t count, const std::string& quote,
                    uint64_t where) {
    const auto region = bin_->read(offset, size);
    const auto i32 = [&](uint64_t at) { return load_le<int32_t>(region, at); };
    if (size < 4) fail(where, quote + "a string Const of " + std::to_string(size) + " bytes has no count");
    const int32_t n = i32(0);
    if (n < 0 || static_cast<uint64_t>(n) != count)
      fail(where,
           quote + "its string count " + std::to_string(n) + " is not its shape's " + std::to_string(count));
    const uint64_t header = (static_cast<uint64_t>(n) + 2) * 4;  // n < 2^31: no overflow
    if (size < header)
      fail(where, quote + "its " + std::to_string(n) + " string offsets need " + std::to_string(header) +
                      " bytes; it has " + std::to_string(size));
    const uint64_t chars = size - header;
    uint64_t previous = 0;
    // Offset i + 1 ends element i: each checked between the one before and
    // the characters' end.
    const auto end_of = [&](uint64_t i) {
      const int32_t end = i32(4 + 4 * i);
      if (end < 0 || static_cast<uint64_t>(end) < previous || static_cast<uint64_t>(end) > chars ||
          (i == 0 && end != 0))
        fail(where, quote + "string offset " + std::to_string(i) + " (" + std::to_string(end) +
                        ") is not between the previous one and the " + std::to_string(chars) +
                        " bytes of characters");
      return static_cast<uint64_t>(end);
    };
    end_of(0);
    auto text = string_lines_.write(count, [&](uint64_t i) {
      const uint64_t end = end_of(i + 1);
      const std::string_view element(reinterpret_cast<const char*>(region.data() + header + previous),
                                     end - previous);
      previous = end;
      return element;
    });
    if (previous != chars)
      fail(where, quote + "its strings end at " + std::to_string(previous) + " of " + std::to_string(chars) +
                      " bytes of characters");
    if (!text.lines) fail(where, quote + string_lines_.over_cap(text.length));
    t.bytes = ByteSpan::owned(std::move(*text.lines));
    t.source = {bin_name_, std::nullopt};
  }

  // rt_info's small part as JSON: an element with a value attribute is that
  // value; one with children an object of them. Bounded in depth and bytes.
  void rt_info_json(const pugi::xml_node& node, Json& out, size_t depth, uint64_t& budget, bool& truncated) {
    if (depth >= kMaxRtInfoDepth) {
      truncated = true;
      return;
    }
    for (const pugi::xml_node child : node.children()) {
      if (child.type() != pugi::node_element) continue;
      check_budget();
      const std::string key = child.name();
      if (key.size() >= budget) {
        truncated = true;
        return;
      }
      budget -= key.size();
      if (const pugi::xml_attribute value = child.attribute("value")) {
        const std::string_view text = value.value();
        if (text.size() >= budget) {
          truncated = true;
          return;
        }
        budget -= text.size();
        out[key] = std::string(text);
      } else {
        Json inner = Json::object();
        rt_info_json(child, inner, depth + 1, budget, truncated);
        out[key] = std::move(inner);
        if (truncated) return;
      }
    }
  }

  // --check: the .bin read back whole with pread, as many bytes as when it
  // was opened (its Consts' ranges were checked against that at open).
  void add_check() {
    const auto file = bin_;
    model_.checks->push_back(
        {"the weights file " + bin_name_ + " (" + std::to_string(file->size()) + " bytes)", file->size(),
         [file](const std::function<void(uint64_t)>& progress) {
           read_back_whole(*file, kErrorFormat, "weights file", progress);
         }});
  }

  struct Pending {
    std::string name, id;
    const ElementType* type = nullptr;
    std::vector<uint64_t> shape;
    uint64_t offset = 0, size = 0, numel = 0, where = 0;
  };

  const ModelFile& model_;
  std::string name_;
  std::vector<Pending> pending_;
  std::string_view text_;
  std::optional<ModelFolder> folder_;
  std::shared_ptr<const MappedFile> bin_;
  std::string bin_name_;
  Catalog catalog_;
  uint64_t consts_ = 0;
  Json left_out_ = Json::array();
  uint64_t left_out_count_ = 0;
  StringLines string_lines_;  // the model's string Consts' text
};

}  // namespace

bool probe_file(std::span<const std::byte> head) {
  std::string_view text(reinterpret_cast<const char*>(head.data()), head.size());
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);
  // Blanks, the XML declaration and comments, in any number.
  while (true) {
    const auto pos = text.find_first_not_of(" \t\r\n");
    if (pos == std::string_view::npos) return false;
    text.remove_prefix(pos);
    if (text.starts_with("<?xml")) {
      const auto end = text.find("?>");
      if (end == std::string_view::npos) return false;
      text.remove_prefix(end + 2);
    } else if (text.starts_with("<!--")) {
      const auto end = text.find("-->", 4);
      if (end == std::string_view::npos) return false;
      text.remove_prefix(end + 3);
    } else if (text.starts_with("<!DOCTYPE")) {
      // Skipped here so that the reader refuses it by name; an internal
      // subset's declarations end at "]>".
      const auto open = text.find('['), close = text.find('>');
      const auto end = open != std::string_view::npos && open < close ? text.find("]>") : close;
      if (end == std::string_view::npos) return false;
      text.remove_prefix(end + (text[end] == ']' ? 2 : 1));
    } else {
      break;
    }
  }
  if (!text.starts_with("<net") || text.size() < 5 ||
      std::string_view(" \t\r\n").find(text[4]) == std::string_view::npos)
    return false;
  const std::string_view tag = text.substr(0, text.find('>'));
  for (size_t at = tag.find("version"); at != std::string_view::npos; at = tag.find("version", at + 1)) {
    if (std::string_view(" \t\r\n").find(tag[at - 1]) == std::string_view::npos) continue;
    const std::string_view rest = trim_blanks(tag.substr(at + 7));
    if (rest.starts_with('=')) return true;
  }
  return false;
}

Catalog open_file(const ModelFile& model) { return Reader(model).read(); }

}  // namespace modelfs::openvino
