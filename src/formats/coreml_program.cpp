// SPDX-License-Identifier: Apache-2.0
// Core ML ML programs (coreml.hpp): the const operations of every function
// and block, their immediate values and their weight.bin blobs.
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "formats/coreml_reader.hpp"
#include "io/byte_reader.hpp"
#include "io/checked_math.hpp"
#include "modelfs/error.hpp"

namespace modelfs::coreml::detail {
namespace {

// Field numbers (coremltools mlmodel/format/MIL.proto).
namespace program_field {
constexpr uint32_t kFunctions = 2;
}
namespace function_field {
constexpr uint32_t kBlockSpecializations = 3;
}
namespace block_field {
constexpr uint32_t kOperations = 3;
}
namespace op_field {
constexpr uint32_t kType = 1, kOutputs = 3, kBlocks = 4, kAttributes = 5;
}
namespace value_field {
constexpr uint32_t kType = 2, kImmediate = 3, kBlobFile = 5;
}
namespace tensor_type_field {
constexpr uint32_t kDataType = 1, kRank = 2, kDimensions = 3;
}

// The blob file's layout (coremltools MILBlob/Blob/StorageFormat.hpp).
constexpr uint64_t kRecordBytes = 64;
constexpr uint32_t kSentinel = 0xDEADBEEF;
constexpr std::string_view kModelPath = "@model_path/";
constexpr uint64_t kMaxRank = 64;

struct MilType {
  uint32_t code;   // MIL DataType
  DType dtype;     // as served
  uint32_t blob;   // the blob file's dtype code for it, 0 for none
  uint64_t bytes;  // per element
};
constexpr MilType kTypes[] = {
    {1, DType::Bool, 0, 1},     {10, DType::Float16, 1, 2},  {11, DType::Float32, 2, 4},
    {12, DType::Float64, 0, 8}, {13, DType::BFloat16, 5, 2}, {21, DType::Int8, 4, 1},
    {22, DType::Int16, 6, 2},   {23, DType::Int32, 14, 4},   {24, DType::Int64, 0, 8},
    {31, DType::UInt8, 3, 1},   {32, DType::UInt16, 7, 2},   {33, DType::UInt32, 15, 4},
    {34, DType::UInt64, 0, 8},
};

const MilType* mil_type(uint64_t code) {
  for (const auto& t : kTypes)
    if (t.code == code) return &t;
  return nullptr;
}

// A const's declared type: dtype code and shape (every dimension constant).
struct Declared {
  uint64_t code = 0;
  std::vector<uint64_t> shape;
  uint64_t numel = 1;
};

class ProgramReader {
 public:
  explicit ProgramReader(Reader& reader) : r_(reader) {}

  void read(const WireMessage& program) {
    const Fields fields(program);
    const auto& functions = fields.every(program_field::kFunctions);
    r_.catalog().metadata["function_count"] = functions.size();
    nlohmann::json names = nlohmann::json::array();
    for (const auto& entry : functions) {
      const WireMessage kv = program.child(entry);
      const Fields pair(kv);
      const std::string name = r_.text(pair, 1);
      names.push_back(name);
      prefix_ = functions.size() > 1 ? name + "/" : "";
      if (auto function = pair.message(2)) {
        const Fields f(*function);
        for (const auto& spec : f.every(function_field::kBlockSpecializations)) {
          const WireMessage block_kv = function->child(spec);
          if (auto block = Fields(block_kv).message(2)) read_block(*block);
        }
      }
    }
    r_.catalog().metadata["functions"] = std::move(names);
    r_.catalog().metadata["const_count"] = consts_;
  }

 private:
  void read_block(const WireMessage& block) {
    const Fields fields(block);
    for (const auto& op : fields.every(block_field::kOperations)) read_operation(block.child(op));
  }

  void read_operation(const WireMessage& op) {
    const Fields fields(op);
    for (const auto& nested : fields.every(op_field::kBlocks)) read_block(op.child(nested));
    if (r_.text(fields, op_field::kType) != "const") return;
    ++consts_;
    std::string name;
    if (const WireField* out = fields.last(op_field::kOutputs)) name = r_.text(Fields(op.child(*out)), 1);
    if (name.empty()) r_.fail(op.offset(), "a const operation with no output name");
    name = prefix_ + name;
    std::optional<WireMessage> value;
    for (const auto& attribute : fields.every(op_field::kAttributes)) {
      const WireMessage kv = op.child(attribute);
      const Fields pair(kv);
      if (r_.text(pair, 1) == "val") value = pair.message(2);
    }
    if (!value) r_.fail(op.offset(), "const " + name + " has no val attribute");
    read_value(name, *value);
  }

  Declared declared(const std::string& name, const Fields& value, uint64_t at) {
    const auto type = value.message(value_field::kType);
    const auto tensor = type ? Fields(*type).message(1) : std::nullopt;
    if (!tensor) r_.fail(at, "const " + name + " has no tensor type");
    const Fields t(*tensor);
    Declared d;
    if (const WireField* f = t.last(tensor_type_field::kDataType)) d.code = r_.varint(*f);
    const uint64_t rank = t.last(tensor_type_field::kRank) ? r_.varint(*t.last(tensor_type_field::kRank)) : 0;
    const auto& dims = t.every(tensor_type_field::kDimensions);
    if (rank > kMaxRank || dims.size() != rank)
      r_.fail(at, "const " + name + ": rank " + std::to_string(rank) + " with " +
                      std::to_string(dims.size()) + " dimensions");
    for (const auto& dim : dims) {
      const auto constant = Fields(tensor->child(dim)).message(1);
      if (!constant) r_.fail(dim.offset, "const " + name + " has a dimension that is not constant");
      const Fields size(*constant);
      d.shape.push_back(size.last(1) ? r_.varint(*size.last(1)) : 0);
    }
    const auto numel = checked_numel(d.shape);
    if (!numel) r_.fail(at, "const " + name + ": its shape overflows");
    d.numel = *numel;
    return d;
  }

  void read_value(const std::string& name, const WireMessage& value) {
    const Fields fields(value);
    const Declared d = declared(name, fields, value.offset());
    if (d.code == 2) return r_.not_tensor(name, "string const");
    const MilType* type = mil_type(d.code);
    if (type == nullptr)
      return r_.not_tensor(name, "MIL data type " + std::to_string(d.code) + " (sub-byte or fp8) not read");
    if (auto blob = fields.message(value_field::kBlobFile)) return read_blob(name, d, *type, *blob);
    const auto immediate = fields.message(value_field::kImmediate);
    const auto tensor = immediate ? Fields(*immediate).message(1) : std::nullopt;
    if (!tensor) r_.fail(value.offset(), "const " + name + " has neither an immediate tensor nor a blob");
    read_immediate(name, d, *type, *tensor);
  }

  void read_immediate(const std::string& name, const Declared& d, const MilType& type,
                      const WireMessage& tensor) {
    const Fields kinds(tensor);
    for (uint32_t kind = 1; kind <= 7; ++kind) {
      const auto holder = kinds.message(kind);
      if (!holder) continue;
      if (kind == 4) return r_.not_tensor(name, "string const");
      const Fields values(*holder);
      const auto& list = values.every(1);
      const bool packed_bytes = kind == 1 || kind == 6 || kind == 7;
      if (packed_bytes) return in_place(name, d, type, kind, list, holder->offset());
      std::vector<uint64_t> numbers;
      for (const auto& f : list) protobuf::append_varints(f, r_.context(), numbers);
      return decoded(name, d, type, kind, numbers, holder->offset());
    }
    r_.fail(tensor.offset(), "const " + name + ": an immediate tensor with no values");
  }

  // floats (float32), doubles (float64) and bytes: one packed payload each, served where it lies.
  void in_place(const std::string& name, const Declared& d, const MilType& type, uint32_t kind,
                const std::vector<WireField>& list, uint64_t at) {
    const bool fits = (kind == 1 && type.dtype == DType::Float32) ||
                      (kind == 6 && type.dtype == DType::Float64) || kind == 7;
    if (!fits)
      r_.fail(at, "const " + name + ": immediate value kind " + std::to_string(kind) + " for MIL type " +
                      std::to_string(d.code));
    if (list.size() > 1) r_.fail(list.back().offset, "const " + name + ": its values are not one packed run");
    const uint64_t length = list.empty() ? 0 : list.front().length;
    if (!list.empty())
      protobuf::expect_type(list.front(), WireType::Length, "hold packed values", r_.context());
    const auto expected = checked_mul(d.numel, type.bytes);
    if (!expected || *expected != length)
      r_.fail(at, "const " + name + ": " + std::to_string(length) + " bytes of values for " +
                      std::to_string(d.numel) + " elements");
    const uint64_t offset = list.empty() ? at : list.front().offset;
    r_.add(name, type.dtype, d.shape, ByteSpan::mapped(r_.model().mapped, offset, length), r_.model_name(),
           offset);
  }

  // ints, bools, longInts: varints, decoded once to the declared type.
  void decoded(const std::string& name, const Declared& d, const MilType& type, uint32_t kind,
               const std::vector<uint64_t>& numbers, uint64_t at) {
    if (numbers.size() != d.numel)
      r_.fail(at, "const " + name + ": " + std::to_string(numbers.size()) + " values for " +
                      std::to_string(d.numel) + " elements");
    const bool integer = type.dtype != DType::Float16 && type.dtype != DType::BFloat16 &&
                         type.dtype != DType::Float32 && type.dtype != DType::Float64;
    if (!integer || (kind == 3) != (type.dtype == DType::Bool))
      r_.fail(at, "const " + name + ": immediate value kind " + std::to_string(kind) + " for MIL type " +
                      std::to_string(d.code));
    std::string bytes;
    bytes.reserve(numbers.size() * type.bytes);
    for (uint64_t n : numbers) {
      // int32 values are sign-extended varints; keep the low bytes of the
      // declared width, refusing any that do not fit it.
      const auto value = static_cast<int64_t>(
          kind == 2 ? static_cast<uint64_t>(static_cast<int64_t>(static_cast<int32_t>(n))) : n);
      const bool is_signed = type.dtype == DType::Int8 || type.dtype == DType::Int16 ||
                             type.dtype == DType::Int32 || type.dtype == DType::Int64;
      const unsigned bits = static_cast<unsigned>(type.bytes * 8);
      const bool fits =
          bits == 64 ||
          (is_signed ? (value >= -(int64_t{1} << (bits - 1)) && value < (int64_t{1} << (bits - 1)))
                     : (value >= 0 && value < (int64_t{1} << bits)));
      if (!fits) r_.fail(at, "const " + name + ": value " + std::to_string(value) + " does not fit its type");
      char le[8];
      std::memcpy(le, &value, 8);  // little-endian host (CMake checks)
      bytes.append(le, type.bytes);
    }
    r_.add(name, type.dtype, d.shape, ByteSpan::owned(std::move(bytes)), r_.model_name(), std::nullopt);
  }

  void read_blob(const std::string& name, const Declared& d, const MilType& type, const WireMessage& blob) {
    const Fields f(blob);
    const std::string file = r_.text(f, 1);
    const uint64_t offset = f.last(2) ? r_.varint(*f.last(2)) : 0;
    if (!file.starts_with(kModelPath))
      r_.fail(blob.offset(), "const " + name + ": blob file " + shown(file) + " is not under @model_path/");
    const std::string relative = file.substr(kModelPath.size());
    const auto& mapped = weights(relative, blob.offset());
    const MappedFile& w = *mapped;
    auto refuse = [&](uint64_t at, const std::string& why) -> void {
      throw ModelError(w.display_name(), std::string(kFormat), at, "const " + name + ": " + why);
    };
    if (w.size() < kRecordBytes) refuse(0, "the blob file is shorter than its 64-byte header");
    const auto header = w.read(0, kRecordBytes);
    if (load_le<uint32_t>(header, 4) != 2)
      refuse(4, "blob file version " + std::to_string(load_le<uint32_t>(header, 4)) + ", not 2");
    if (offset < kRecordBytes)
      refuse(offset, "blob offset " + std::to_string(offset) + " points into the file's header");
    if (!range_fits(offset, kRecordBytes, w.size()))
      refuse(offset, "blob offset " + std::to_string(offset) +
                         ": its 64-byte record runs past the end of the file (" + std::to_string(w.size()) +
                         " bytes)");
    const auto record = w.read(offset, kRecordBytes);
    if (load_le<uint32_t>(record, 0) != kSentinel)
      refuse(offset, "the blob's metadata record has no sentinel 0xDEADBEEF");
    const uint32_t blob_type = load_le<uint32_t>(record, 4);
    if (type.blob == 0 || blob_type != type.blob)
      refuse(offset + 4, "blob data type " + std::to_string(blob_type) +
                             " does not match the const's MIL type " + std::to_string(d.code));
    const uint64_t size = load_le<uint64_t>(record, 8);
    const uint64_t data = load_le<uint64_t>(record, 16);
    const auto expected = checked_mul(d.numel, type.bytes);
    if (!expected || *expected != size)
      refuse(offset + 8, "the blob holds " + std::to_string(size) + " bytes, its shape needs " +
                             (expected ? std::to_string(*expected) : std::string("more")));
    if (data % kRecordBytes != 0 || data < offset + kRecordBytes)
      refuse(offset + 16,
             "blob data at " + std::to_string(data) + " is not on a 64-byte boundary after its record");
    if (!range_fits(data, size, w.size()))
      refuse(offset + 16, "blob data [" + std::to_string(data) + ", +" + std::to_string(size) +
                              ") runs past the end of the file (" + std::to_string(w.size()) + " bytes)");
    r_.add(name, type.dtype, d.shape, ByteSpan::mapped(mapped, data, size), relative, data);
  }

  const std::shared_ptr<const MappedFile>& weights(const std::string& relative, uint64_t at) {
    auto it = files_.find(relative);
    if (it != files_.end()) return it->second;
    if (!folder_)
      folder_.emplace(ModelFolder::of_file(r_.model().path, std::string(kFormat), r_.model().remote));
    auto opened = folder_->open(relative);
    if (!opened) r_.fail(at, "blob file " + shown(relative) + " " + opened.reason);
    r_.catalog().files.push_back(relative);
    return files_.emplace(relative, opened.file).first->second;
  }

  Reader& r_;
  std::string prefix_;
  uint64_t consts_ = 0;
  std::optional<ModelFolder> folder_;
  std::map<std::string, std::shared_ptr<const MappedFile>> files_;
};

}  // namespace

void Reader::read_program(const WireMessage& program) { ProgramReader(*this).read(program); }

}  // namespace modelfs::coreml::detail
