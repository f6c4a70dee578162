// SPDX-License-Identifier: Apache-2.0
// ONNX (onnx.hpp): the reader's entry point, its tensors (initializers,
// sparse and attribute tensors, their typed, raw and external bytes) and
// the probe. The graph document is onnx_graph.cpp's (onnx_reader.hpp says
// how the two halves share the Reader).
#include "formats/onnx.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <charconv>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include "formats/json_limits.hpp"
#include "formats/model_folder.hpp"
#include "formats/onnx_reader.hpp"
#include "io/budget_charge.hpp"
#include "io/checked_math.hpp"
#include "io/json_object.hpp"
#include "io/json_text.hpp"
#include "io/protobuf_wire.hpp"
#include "io/sha1.hpp"
#include "modelfs/budget.hpp"
#include "modelfs/error.hpp"
#include "modelfs/json_release.hpp"
#include "modelfs/mapped_file.hpp"
#include "remote/remote.hpp"

namespace modelfs::onnx {
namespace detail {

Catalog Reader::read() {
  context_ = {model_->display_name(), std::string(kFormat)};
  if (model_->size() > kMaxModelBytes)
    fail(0, "file is " + std::to_string(model_->size()) +
                " bytes; a protobuf message (and so an .onnx file) is limited to " +
                std::to_string(kMaxModelBytes) +
                " bytes, larger models keep weights in "
                "external data");
  model_name_ = model_path_.filename().string();
  // An .onnx file has no header apart from its weights: it all counts as
  // metadata (external data does not).
  add_metadata_bytes(model_->size());
  folder_ = ModelFolder::of_file(model_path_, std::string(kFormat), remote_);

  catalog_.format = std::string(kFormat);
  // Nothing in ONNX forbids two external-data entries naming one range.
  catalog_.tensors_may_share_bytes = true;
  catalog_.mtime = model_->mtime();
  catalog_.files.push_back(model_name_);

  WireMessage model(model_->unchecked_bytes(), 0, &context_);
  Fields fields(model);
  auto& meta = catalog_.metadata;
  if (const auto* f = fields.last(model_field::kIrVersion)) meta["ir_version"] = varint(*f);
  meta["opset_import"] = opsets(model, fields.every(model_field::kOpsetImport));
  meta["producer_name"] = last_text(fields, model_field::kProducerName);
  meta["producer_version"] = last_text(fields, model_field::kProducerVersion);
  meta["domain"] = last_text(fields, model_field::kDomain);
  if (const auto* f = fields.last(model_field::kModelVersion))
    meta["model_version"] = static_cast<int64_t>(varint(*f));
  meta["doc_string"] = last_text(fields, model_field::kDocString);
  meta["metadata_props"] = string_map(model, fields.every(model_field::kMetadataProps));

  // Room for its three keys first: an ordered object that grows copies
  // its values (their keys are const, so not moved), and the graph's
  // may be most of the model.
  Json graph_doc = Json::object();
  const JsonReleaser release(graph_doc);  // a graph of millions of values, let go without a copy of them
  graph_doc.get_ref<Json::object_t&>().reserve(3);
  const auto graph = fields.message(model_field::kGraph);
  if (!graph) fail(0, "the model has no graph (ModelProto field 7)");
  if (remote::is_url(model_path_.native())) open_remote_external(*graph);
  graph_doc["graph"] = read_graph(*graph, "main");
  const Json& main = graph_doc["graph"];
  meta["graph_name"] = main["name"];
  meta["inputs"] = main["inputs"];
  meta["outputs"] = main["outputs"];

  graph_doc["functions"] = Json::array();
  meta["functions"] = Json::array();
  for (const auto& f : fields.every(model_field::kFunctions)) {
    Json function = read_function(model.child(f));
    meta["functions"].push_back(function["domain"].get<std::string>() + ":" +
                                function["name"].get<std::string>());
    graph_doc["functions"].push_back(std::move(function));
  }
  graph_doc["training_info"] = Json::array();
  const auto training = fields.every(model_field::kTrainingInfo);
  for (size_t i = 0; i < training.size(); ++i)
    graph_doc["training_info"].push_back(read_training_info(model.child(training[i]), i));

  // Printing the graph may take several times its memory: not once the
  // graph has passed the budget.
  check_budget();
  catalog_.documents.push_back({"graph.json", printed_within_budget(graph_doc, 2, context_.file, kFormat)});
  return std::move(catalog_);
}

// ---- tensors ------------------------------------------------------------

// Reads a TensorProto or SparseTensorProto named `name`, or by the name
// it stores when it has one and `stored_name_first`. Returns the name it
// was given.
std::string Reader::read_any(const WireMessage& tensor, const std::string& name, bool stored_name_first,
                             const std::string& kind, const std::string& graph_path, bool sparse) {
  return sparse ? read_sparse(tensor, name, stored_name_first, kind, graph_path)
                : read_tensor(tensor, name, stored_name_first, kind, graph_path);
}

// Reads a SparseTensorProto as two tensors, <name>.values and
// <name>.indices (its name: that of its values).
std::string Reader::read_sparse(const WireMessage& sparse, std::string name, bool stored_name_first,
                                const std::string& kind, const std::string& graph_path) {
  Fields fields(sparse);
  const auto dense_shape = int64s(fields, sparse_field::kDims);
  const auto values = fields.message(sparse_field::kValues);
  if (!values) fail(sparse.offset(), "sparse tensor without values");

  if (stored_name_first) {
    const std::string stored = last_text(Fields(*values), tensor_field::kName);
    if (!stored.empty()) name = stored;
  }
  nlohmann::json extras;
  extras["sparse_tensor"] = name;
  extras["dense_shape"] = dense_shape;
  extras["sparse_part"] = "values";
  read_tensor(*values, name + ".values", false, kind, graph_path, extras);
  if (const auto indices = fields.message(sparse_field::kIndices)) {
    extras["sparse_part"] = "indices";
    read_tensor(*indices, name + ".indices", false, kind, graph_path, extras);
  }
  return name;
}

// Reads one TensorProto into the catalog, named as read_any says.
std::string Reader::read_tensor(const WireMessage& tensor, const std::string& given_name,
                                bool stored_name_first, const std::string& kind,
                                const std::string& graph_path, const nlohmann::json& more_extras) {
  using namespace tensor_field;
  // First pass: everything but the data itself.
  std::vector<uint64_t> dims;
  std::optional<uint64_t> data_type;
  std::string stored_name;
  std::optional<WireField> raw;  // the last raw_data wins
  std::vector<WireField> external;
  uint64_t location = 0;
  std::map<uint32_t, uint64_t> data_bytes;  // payload bytes per data field
  tensor.scan([&](const WireField& f) {
    switch (f.number) {
      case kDims:
        protobuf::append_varints(f, context_, dims);
        break;
      case kDataType:
        data_type = varint(f);
        break;
      case kName:
        stored_name = text(f);
        break;
      case kRawData:
        protobuf::field_text(f, context_);
        raw = f;
        break;
      case kExternalData:
        external.push_back(f);
        break;
      case kDataLocation:
        location = varint(f);
        break;
      case kSegment:
        fail(f.offset, "tensor uses segment (chunked storage), which onnx itself does not read");
      default:
        break;
    }
    if (is_data_field(f.number)) data_bytes[f.number] += f.length;
  });
  const std::string name = stored_name_first && !stored_name.empty() ? stored_name : given_name;
  const uint64_t at = tensor.offset();
  const std::string quote = "tensor \"" + name + "\": ";

  if (!data_type) fail(at, quote + "has no data_type");
  const DataTypeInfo* info = data_type_info(*data_type);
  if (!info) fail(at, quote + "unknown data_type " + std::to_string(*data_type));
  for (uint64_t d : dims)
    if (d > static_cast<uint64_t>(INT64_MAX))
      fail(at, quote + "negative dimension " + std::to_string(static_cast<int64_t>(d)));
  auto numel = checked_numel(dims);
  if (!numel) fail(at, quote + "element count of the shape overflows");

  // Exactly one place holds the data (the checker's rule); a tensor with
  // no elements may hold none.
  std::vector<uint32_t> holders;
  // string_data counts by its entries: strings may all be empty.
  for (auto [field, bytes] : data_bytes)
    if (bytes > 0 || field == kRawData || (field == kStringData && info->dtype == DType::String))
      holders.push_back(field);
  const bool is_external = location == 1;
  if (is_external) holders.push_back(kExternalData);
  if (holders.size() > 1)
    fail(at, quote + "data is stored in both " + typed_field_name(holders[0]) + " and " +
                 typed_field_name(holders[1]));
  const uint32_t holder = holders.empty() ? 0 : holders.front();
  if (holder != 0 && holder != kRawData && holder != kExternalData && holder != info->typed_field)
    fail(at, quote + "a " + std::string(info->name) + " tensor cannot store its data in " +
                 typed_field_name(holder) + " (expected " + typed_field_name(info->typed_field) + ")");

  TensorSpec t;
  t.name = name;
  t.dtype = info->dtype;
  auto strides = contiguous_strides(dims);
  if (!strides) fail(at, quote + "the strides of the shape pass 2^63 (numpy and torch refuse such a shape)");
  t.strides = std::move(*strides);
  t.shape = std::move(dims);
  auto& extras = t.extras;
  extras = more_extras;
  extras["onnx_data_type"] = info->name;
  extras["kind"] = kind;
  extras["graph"] = graph_path;
  if (!stored_name.empty() && stored_name != name) extras["onnx_name"] = stored_name;

  if (t.dtype == DType::String) {
    if (holder == kRawData || is_external)
      fail(at, quote + "a STRING tensor must store its data in string_data");
    std::vector<std::string_view> elements;
    tensor.scan([&](const WireField& f) {
      if (f.number != kStringData) return;
      if (f.type != WireType::Length)
        fail(f.offset, quote + "string_data has wire type " + std::to_string(static_cast<int>(f.type)));
      // Collected only up to one more than the tensor holds.
      if (elements.size() <= *numel) elements.push_back(protobuf::field_text(f, context_));
    });
    if (elements.size() != *numel)
      fail(at, quote + "string_data holds " + std::to_string(elements.size()) +
                   (elements.size() > *numel ? " or more" : "") + " entries but the shape needs " +
                   std::to_string(*numel));
    t.bytes = ByteSpan::owned(json_lines(elements, at, quote));
    t.source = {model_name_, std::nullopt};
    extras["storage"] = elements.empty() ? "none" : "string_data";
    extras["text"] = kStringText;
    catalog_.add(t);
    return name;
  }

  const uint32_t bits = dtype_bits(t.dtype);
  auto total_bits = checked_mul(*numel, bits);
  if (!total_bits || !checked_add(*total_bits, 7)) fail(at, quote + "byte size of the shape overflows");
  const uint64_t nbytes = (*total_bits + 7) / 8;  // sub-byte types: odd tails padded
  if (bits < 8) {
    extras["element_bits"] = bits;
    extras["packing"] = bits == 4 ? "two per byte, first element in the low nibble"
                                  : "four per byte, first element in the lowest two bits";
  }

  if (holder == 0) {
    if (nbytes != 0) fail(at, quote + "has " + std::to_string(*numel) + " elements but no data");
    t.bytes = ByteSpan::owned(std::string());
    t.source = {model_name_, std::nullopt};
    extras["storage"] = "none";
  } else if (holder == kRawData) {
    if (raw->length != nbytes)
      fail(raw->offset, quote + "raw_data holds " + std::to_string(raw->length) +
                            " bytes but shape and data_type need " + std::to_string(nbytes));
    t.bytes = ByteSpan::mapped(model_, raw->offset, raw->length);
    t.source = {model_name_, raw->offset};
    extras["storage"] = "raw_data";
  } else if (holder == kExternalData) {
    read_external(tensor, external, nbytes, t, quote);
  } else {
    read_typed(tensor, holder, bits, nbytes, t, quote);
    extras["storage"] = typed_field_name(holder);
  }
  catalog_.add(t);
  return name;
}

// Text elements as JSON Lines (string_lines.hpp), within what the model
// may make of them in all.
std::string Reader::json_lines(const std::vector<std::string_view>& elements, uint64_t at,
                               const std::string& quote) {
  auto text = string_lines_.write(elements.size(), [&](uint64_t i) { return elements[i]; });
  if (!text.lines) fail(at, quote + string_lines_.over_cap(text.length));
  return std::move(*text.lines);
}

// float_data / double_data (fixed width) and the varint fields.
void Reader::read_typed(const WireMessage& tensor, uint32_t field, uint32_t bits, uint64_t nbytes,
                        TensorSpec& t, const std::string& quote) {
  using namespace tensor_field;
  const bool fixed = field == kFloatData || field == kDoubleData;
  // Bytes each entry of the field becomes: a float or double its own (a
  // complex element takes two); a varint the element's low bytes (the
  // field matches the data_type), one packed byte for sub-byte types.
  const uint64_t entry_bytes = field == kFloatData ? 4 : field == kDoubleData ? 8 : std::max(bits / 8, 1u);
  std::vector<WireField> occurrences;
  tensor.scan([&](const WireField& f) {
    if (f.number == field) occurrences.push_back(f);
  });
  const uint64_t at = occurrences.front().offset;

  // One packed blob of exactly the right size: the bytes are the tensor.
  if (fixed && occurrences.size() == 1 && occurrences.front().type == WireType::Length &&
      occurrences.front().length == nbytes) {
    t.bytes = ByteSpan::mapped(model_, occurrences.front().offset, nbytes);
    t.source = {model_name_, occurrences.front().offset};
    return;
  }
  // Decoded into bytes of our own (charged as they are allocated).
  std::string out;
  if (fixed) {
    const WireType element_type = entry_bytes == 4 ? WireType::Fixed32 : WireType::Fixed64;
    uint64_t total = 0;  // payloads lie in the file, so this cannot overflow
    for (const auto& f : occurrences) {
      if (f.type == WireType::Length) {
        if (f.length % entry_bytes != 0)
          fail(f.offset, quote + "packed " + typed_field_name(field) + " of " + std::to_string(f.length) +
                             " bytes is not whole elements");
      } else if (f.type != element_type) {
        fail(f.offset,
             quote + typed_field_name(field) + " has wire type " + std::to_string(static_cast<int>(f.type)));
      }
      total += f.length;
    }
    if (total != nbytes)
      fail(at, quote + typed_field_name(field) + " holds " + std::to_string(total / entry_bytes) +
                   " entries but shape and data_type need " + std::to_string(nbytes / entry_bytes));
    out.reserve(nbytes);
    for (const auto& f : occurrences) {
      const auto raw = payload_bytes(f);
      out.append(reinterpret_cast<const char*>(raw.data()), raw.size());
    }
  } else {
    // Stop collecting once there are more entries than the tensor holds,
    // so a hostile count cannot make this allocate beyond the file's size.
    const uint64_t expected = nbytes / entry_bytes;
    std::vector<uint64_t> values;
    for (const auto& f : occurrences) {
      protobuf::append_varints(f, context_, values);
      if (values.size() > expected) break;
    }
    if (values.size() != expected)
      fail(at, quote + typed_field_name(field) + " holds " + std::to_string(values.size()) +
                   (values.size() > expected ? " or more" : "") + " entries but shape and data_type need " +
                   std::to_string(expected));
    out.reserve(nbytes);
    for (uint64_t v : values) append_le(out, v, entry_bytes);
  }
  t.bytes = ByteSpan::owned(std::move(out));
  t.source = {model_name_, std::nullopt};
}

void Reader::read_external(const WireMessage& tensor, const std::vector<WireField>& entries, uint64_t nbytes,
                           TensorSpec& t, const std::string& quote) {
  std::optional<std::string> location, checksum;
  std::optional<uint64_t> offset, length;
  uint64_t at = tensor.offset();
  for (const auto& f : entries) {
    Fields entry(tensor.child(f));
    const std::string key = last_text(entry, 1), value = last_text(entry, 2);
    at = f.offset;
    auto number = [&](const char* what) {
      auto parsed = parse_decimal(value);
      if (!parsed)
        fail(f.offset, quote + "external_data " + what + " \"" + value + "\" is not a non-negative integer");
      return *parsed;
    };
    if (key == "location")
      location = value;
    else if (key == "offset")
      offset = number("offset");
    else if (key == "length")
      length = number("length");
    else if (key == "checksum")
      checksum = value;
  }
  if (!location) fail(at, quote + "data_location is EXTERNAL but external_data has no location");
  auto file = external_file(*location, at, quote);
  const uint64_t begin = offset.value_or(0);
  if (begin > file->size())
    fail(at, quote + "external_data offset " + std::to_string(begin) + " is past the end of " + *location +
                 " (" + std::to_string(file->size()) + " bytes)");
  const uint64_t size = length.value_or(file->size() - begin);
  if (!range_fits(begin, size, file->size()))
    fail(at, quote + "external data [" + std::to_string(begin) + ", +" + std::to_string(size) +
                 ") runs past the end of " + *location + " (" + std::to_string(file->size()) + " bytes)");
  if (size != nbytes)
    fail(at, quote + "external data holds " + std::to_string(size) + " bytes but shape and data_type need " +
                 std::to_string(nbytes));
  t.bytes = ByteSpan::mapped(file, begin, size);
  t.source = {*location, begin};
  t.extras["storage"] = "external_data";
  t.extras["external_data"] = {{"location", *location}, {"offset", begin}, {"length", size}};
  if (checksum) {
    t.extras["external_data"]["checksum"] = *checksum;
    add_checksum_check(t.name, file, *location, begin, size, *checksum, at);
  }
}

// ONNX's external_data "checksum" is the SHA-1 of the data; its docs say
// "of the file the location names", writers have used the tensor's range.
// `--check` accepts either, and refuses a digest that matches neither.
void Reader::add_checksum_check(const std::string& name, std::shared_ptr<const MappedFile> file,
                                const std::string& location, uint64_t begin, uint64_t size,
                                std::string expected, uint64_t at) {
  for (auto& c : expected) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (!checks_) return;
  checks_->push_back({"SHA-1 of the external data of " + name, size,
                      [file, location, begin, size, expected, at, name,
                       model = model_->display_name()](const std::function<void(uint64_t)>& progress) {
                        auto digest = [&](uint64_t from, uint64_t length, bool report) {
                          Sha1 sha;
                          constexpr uint64_t kChunk = 1 << 20;
                          for (uint64_t done = 0; done < length; done += kChunk) {
                            const uint64_t n = std::min(kChunk, length - done);
                            sha.update(file->read(from + done, n));
                            if (report) progress(n);
                          }
                          return sha.hex_digest();
                        };
                        if (digest(begin, size, true) == expected) return;
                        if (digest(0, file->size(), false) == expected) return;
                        throw ModelError(model, "onnx", at,
                                         "tensor \"" + name + "\": external data in " + location +
                                             " does not match its SHA-1 checksum " + expected);
                      }});
}

// A remote model's external data files, opened side by side before the
// graph is read (ModelFolder::open_all): each open is a round trip, and a
// model saved a file per tensor names hundreds. Only the main graph's
// initializers are looked at, only for their locations; the graph's own
// reading then takes each file from here as it would open it, checks it
// as it would, and opens any other itself. A file that fails to open, or
// a message this look cannot parse, is left to that reading to report.
void Reader::open_remote_external(const WireMessage& graph) {
  std::vector<std::string> names;
  std::set<std::string, std::less<>> seen;
  try {
    Fields graph_fields(graph);
    for (const auto& f : graph_fields.every(graph_field::kInitializer)) {
      const WireMessage tensor = graph.child(f);
      Fields tensor_fields(tensor);
      for (const auto& e : tensor_fields.every(tensor_field::kExternalData)) {
        Fields entry(tensor.child(e));
        if (last_text(entry, 1) != "location") continue;
        std::string location = last_text(entry, 2);
        if (location.empty() || location.front() == '#' || names.size() >= kMaxFilesOpenedEarly) continue;
        if (seen.insert(location).second) names.push_back(std::move(location));
      }
    }
  } catch (const ModelError&) {
    return;
  }
  early_.open(*folder_, std::move(names));
}

// The external data file a location names, mapped once however many
// tensors point into it. The rules of onnx's checker, which are
// modelfs's rule for every file a model names (model_folder.hpp): a
// relative path without "..", which stays inside the model's folder once
// symlinks are followed; the file is read from what was opened there.
std::shared_ptr<const MappedFile> Reader::external_file(const std::string& location, uint64_t at,
                                                        const std::string& quote) {
  auto refuse = [&](const std::string& why) {
    fail(at, quote + "external data location \"" + location + "\" " + why);
  };
  if (!location.empty() && location.front() == '#') refuse("is an in-memory placeholder, not a file");
  if (auto it = external_.find(location); it != external_.end()) return it->second;
  auto named = early_.take(*folder_, location);
  if (!named) refuse(named.reason);
  std::shared_ptr<const MappedFile> file = std::move(named.file);
  // Another name for a file opened already ("./w.bin", a link to it):
  // the one mapping, listed once.
  struct stat st {};
  bool fresh = true;
  if (::fstat(file->fd(), &st) == 0) {
    auto [it, added] = external_by_identity_.emplace(std::pair{st.st_dev, st.st_ino}, file);
    if (!added) file = it->second;
    fresh = added;
  }
  if (fresh) catalog_.files.push_back(location);
  external_.emplace(location, file);
  return file;
}

}  // namespace detail

using namespace detail;

namespace {

// The wire type each ModelProto field is declared with, for the probe.
std::optional<WireType> model_field_type(uint64_t number) {
  using namespace model_field;
  constexpr uint64_t kLengthDelimited[] = {
      kProducerName, kProducerVersion, kDomain,       kDocString, kGraph,
      kOpsetImport,  kMetadataProps,   kTrainingInfo, kFunctions, 26 /* configuration */};
  if (number == kIrVersion || number == kModelVersion) return WireType::Varint;
  if (std::ranges::find(kLengthDelimited, number) != std::end(kLengthDelimited)) return WireType::Length;
  return std::nullopt;
}

}  // namespace

bool probe_file(std::span<const std::byte> head) {
  // ir_version first (writers emit fields in number order), with a value an
  // IR could have, then at least one more well-formed ModelProto field.
  constexpr uint64_t kMaxPlausibleIrVersion = 1000;
  const WireContext context{"", std::string(kFormat)};
  uint64_t pos = 0;
  int fields = 0;
  try {
    while (pos < head.size()) {
      const uint64_t key = protobuf::read_varint(head, pos, context, 0);
      const auto expected = model_field_type(key >> 3);
      if (!expected || static_cast<uint64_t>(*expected) != (key & 7)) return false;
      const uint64_t value = protobuf::read_varint(head, pos, context, 0);
      if (fields == 0 &&
          ((key >> 3) != model_field::kIrVersion || value == 0 || value > kMaxPlausibleIrVersion))
        return false;
      ++fields;
      if (*expected == WireType::Length) {
        if (value >= head.size() - pos) return true;  // runs on past the head
        pos += value;
      }
    }
  } catch (const ModelError&) {
    return fields >= 2;  // a field cut off by the end of the head
  }
  return fields >= 2;
}

Catalog open_file(const ModelFile& model) { return Reader(model).read(); }

}  // namespace modelfs::onnx
