// SPDX-License-Identifier: Apache-2.0
// PaddlePaddle inference models: the program and its tensor streams
// (paddle.hpp; docs/formats.md, "PaddlePaddle").
#include "formats/paddle.hpp"

#include <algorithm>
#include <array>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/model_folder.hpp"
#include "io/budget_charge.hpp"
#include "io/byte_reader.hpp"
#include "io/checked_math.hpp"
#include "io/protobuf_wire.hpp"

namespace modelfs::paddle {
namespace {

using protobuf::WireField;
using protobuf::WireMessage;
using protobuf::WireType;

// VarType.Type codes (framework.proto) of the vars that matter here.
constexpr uint64_t kLodTensor = 7;
constexpr uint64_t kFeedMinibatch = 9;
constexpr uint64_t kFetchList = 10;
constexpr uint64_t kReader = 15;
constexpr uint64_t kRaw = 17;

struct PaddleType {
  uint64_t code;
  DType dtype;
};
constexpr std::array<PaddleType, 12> kTypes{{{0, DType::Bool},
                                             {1, DType::Int16},
                                             {2, DType::Int32},
                                             {3, DType::Int64},
                                             {4, DType::Float16},
                                             {5, DType::Float32},
                                             {6, DType::Float64},
                                             {20, DType::UInt8},
                                             {21, DType::Int8},
                                             {22, DType::BFloat16},
                                             {23, DType::Complex64},
                                             {24, DType::Complex128}}};

std::string dims_text(const std::vector<int64_t>& dims) {
  std::string out = "[";
  for (size_t i = 0; i < dims.size(); ++i) out += (i ? ", " : "") + std::to_string(dims[i]);
  return out + "]";
}

// A TensorDesc { data_type 1, dims 2 } as it is stored.
struct TensorDesc {
  std::optional<uint64_t> data_type;
  std::vector<int64_t> dims;
};

TensorDesc read_tensor_desc(const WireMessage& message, const std::string& quote) {
  TensorDesc out;
  std::vector<uint64_t> dims;
  message.scan([&](const WireField& f) {
    if (f.number == 1) {
      protobuf::expect_type(f, WireType::Varint, quote + "data_type", message.context());
      out.data_type = f.value;
    } else if (f.number == 2) {
      protobuf::append_varints(f, message.context(), dims);
      if (dims.size() > kMaxRank)
        throw ModelError(message.context().file, message.context().format, f.offset,
                         quote + "has more than " + std::to_string(kMaxRank) + " dims");
    }
  });
  for (uint64_t d : dims) out.dims.push_back(static_cast<int64_t>(d));
  return out;
}

// A var of the program as the reader needs it.
struct Var {
  std::string name;
  uint64_t type = 0;
  bool persistable = false;
  TensorDesc declared;  // lod_tensor.tensor, when the var has one
  bool has_desc = false;
  uint64_t at = 0;  // the VarDesc's offset, for messages
};

struct Program {
  std::vector<Var> vars;  // every block's, each name once, in program order
  uint64_t blocks = 0;
  uint64_t ops = 0;
  std::map<std::string, uint64_t> op_types;
  std::vector<std::string> feeds;    // what the feed ops write: the inputs
  std::vector<std::string> fetches;  // what the fetch ops read: the outputs
  std::optional<int64_t> version;
};

class ProgramReader {
 public:
  explicit ProgramReader(const ModelFile& model)
      : model_(model), context_{model.mapped->display_name(), std::string(kFormat)} {}

  Program read() {
    const MappedFile& file = *model_.mapped;
    add_metadata_bytes(file.size());
    const WireMessage root(file.read(0, file.size()), 0, &context_);
    std::map<std::string, size_t, std::less<>> seen;
    root.scan([&](const WireField& f) {
      if (f.number == 1) {
        protobuf::expect_type(f, WireType::Length, "ProgramDesc.blocks", context_);
        ++program_.blocks;
        read_block(root.child(f), seen);
      } else if (f.number == 4 && f.type == WireType::Length) {
        root.child(f).scan([&](const WireField& v) {
          if (v.number == 1 && v.type == WireType::Varint) program_.version = static_cast<int64_t>(v.value);
        });
      }
    });
    if (program_.blocks == 0) fail(0, "the program has no block");
    return std::move(program_);
  }

 private:
  [[noreturn]] void fail(uint64_t at, const std::string& reason) const {
    throw ModelError(context_.file, context_.format, at, reason);
  }

  void read_block(const WireMessage& block, std::map<std::string, size_t, std::less<>>& seen) {
    block.scan([&](const WireField& f) {
      if (f.number == 3) {
        protobuf::expect_type(f, WireType::Length, "BlockDesc.vars", context_);
        check_budget();
        Var var = read_var(block.child(f), f.offset);
        if (seen.emplace(var.name, program_.vars.size()).second) program_.vars.push_back(std::move(var));
      } else if (f.number == 4) {
        protobuf::expect_type(f, WireType::Length, "BlockDesc.ops", context_);
        check_budget();
        read_op(block.child(f));
      }
    });
  }

  Var read_var(const WireMessage& message, uint64_t at) {
    Var var;
    var.at = at;
    bool named = false, typed = false;
    message.scan([&](const WireField& f) {
      if (f.number == 1) {
        var.name = std::string(protobuf::field_text(f, context_));
        named = true;
      } else if (f.number == 2) {
        protobuf::expect_type(f, WireType::Length, "VarDesc.type", context_);
        typed = true;
        read_var_type(message.child(f), var);
      } else if (f.number == 3) {
        protobuf::expect_type(f, WireType::Varint, "VarDesc.persistable", context_);
        var.persistable = f.value != 0;
      }
    });
    if (!named) fail(at, "a VarDesc has no name");
    if (!typed) fail(at, "var " + shown(var.name) + " has no type");
    return var;
  }

  void read_var_type(const WireMessage& message, Var& var) {
    message.scan([&](const WireField& f) {
      if (f.number == 1) {
        protobuf::expect_type(f, WireType::Varint, "VarType.type", context_);
        var.type = f.value;
      } else if (f.number == 3 && f.type == WireType::Length) {
        const WireMessage lod_tensor = message.child(f);
        lod_tensor.scan([&](const WireField& t) {
          if (t.number == 1 && t.type == WireType::Length) {
            var.declared = read_tensor_desc(lod_tensor.child(t), "var " + shown(var.name) + ": ");
            var.has_desc = true;
          }
        });
      }
    });
  }

  // An OpDesc { inputs 1, outputs 2, type 3 }, each input and output a
  // Var { parameter 1, arguments 2 }: the feed ops' outputs and the fetch
  // ops' inputs are the model's inputs and outputs.
  void read_op(const WireMessage& op) {
    ++program_.ops;
    std::string type;
    std::vector<std::string> inputs, outputs;
    op.scan([&](const WireField& f) {
      if (f.number == 3) type = std::string(protobuf::field_text(f, context_));
      if ((f.number == 1 || f.number == 2) && f.type == WireType::Length)
        op.child(f).scan([&](const WireField& a) {
          if (a.number == 2)
            (f.number == 1 ? inputs : outputs).emplace_back(protobuf::field_text(a, context_));
        });
    });
    constexpr size_t kMaxOpTypes = 1000;
    if (program_.op_types.size() < kMaxOpTypes || program_.op_types.count(type)) ++program_.op_types[type];
    if (type == "feed") program_.feeds.insert(program_.feeds.end(), outputs.begin(), outputs.end());
    if (type == "fetch") program_.fetches.insert(program_.fetches.end(), inputs.begin(), inputs.end());
  }

  const ModelFile& model_;
  protobuf::WireContext context_;
  Program program_;
};

// Whether a persistable var is saved with the parameters (io.py's
// is_persistable: feed, fetch and reader vars are not; RAW vars hold no
// tensor).
bool saved(const Var& v) {
  return v.persistable && v.type != kFeedMinibatch && v.type != kFetchList && v.type != kReader &&
         v.type != kRaw;
}

// One tensor stream of `in`, the value of `var`, into `t` (its bytes a
// range of `file`).
class StreamReader {
 public:
  StreamReader(const std::shared_ptr<const MappedFile>& file, std::string file_name)
      : file_(file),
        name_(std::move(file_name)),
        in_(*file, std::string(kFormat)),
        context_{file->display_name(), std::string(kFormat)} {}

  ByteReader& in() { return in_; }

  TensorSpec read(const Var& var, const std::string& quote) {
    const uint64_t start = in_.position();
    if (const uint32_t version = in_.u32(quote + "version"); version != 0)
      in_.fail(quote + "version " + std::to_string(version) + " (only 0 is defined)");
    const uint64_t levels = in_.u64(quote + "lod_level");
    if (levels > kMaxLodLevels)
      in_.fail(quote + "lod_level " + std::to_string(levels) + " (at most " + std::to_string(kMaxLodLevels) +
               ")");
    std::vector<uint64_t> lod_bytes;
    for (uint64_t i = 0; i < levels; ++i) {
      const uint64_t bytes = in_.u64(quote + "LoD level size");
      if (bytes % 8 != 0)
        in_.fail(quote + "LoD level of " + std::to_string(bytes) + " bytes, not u64 offsets");
      if (bytes > in_.remaining())
        in_.fail(quote + "LoD level needs " + std::to_string(bytes) + " bytes but only " +
                 std::to_string(in_.remaining()) + " remain");
      in_.seek(in_.position() + bytes);
      lod_bytes.push_back(bytes);
    }
    if (const uint32_t version = in_.u32(quote + "tensor version"); version != 0)
      in_.fail(quote + "tensor version " + std::to_string(version) + " (only 0 is defined)");
    const auto desc_size = static_cast<int32_t>(in_.u32(quote + "TensorDesc size"));
    if (desc_size < 0 || static_cast<uint64_t>(desc_size) > kMaxTensorDescBytes)
      in_.fail(quote + "TensorDesc size " + std::to_string(desc_size));
    const uint64_t desc_at = in_.file_offset();
    const WireMessage message(in_.take(static_cast<uint64_t>(desc_size), quote + "TensorDesc"), desc_at,
                              &context_);
    const TensorDesc desc = read_tensor_desc(message, quote);
    if (!desc.data_type)
      throw ModelError(context_.file, context_.format, desc_at, quote + "TensorDesc has no data_type");
    const auto dtype = dtype_of(*desc.data_type);
    if (!dtype)
      throw ModelError(context_.file, context_.format, desc_at,
                       quote + "unknown data type " + std::to_string(*desc.data_type));
    TensorSpec t;
    t.name = var.name;
    t.dtype = *dtype;
    for (int64_t d : desc.dims) {
      if (d < 0)
        throw ModelError(context_.file, context_.format, desc_at, quote + "dims " + dims_text(desc.dims));
      t.shape.push_back(static_cast<uint64_t>(d));
    }
    check_declared(var, desc, quote, desc_at);
    const auto strides = contiguous_strides(t.shape);
    const auto numel = checked_numel(t.shape);
    const auto nbytes = numel ? checked_mul(*numel, dtype_bits(t.dtype) / 8) : std::nullopt;
    if (!strides || !nbytes)
      throw ModelError(context_.file, context_.format, desc_at,
                       quote + "dims " + dims_text(desc.dims) + " overflow");
    const uint64_t data_at = in_.position();
    if (*nbytes > in_.remaining())
      in_.fail(quote + std::string(dtype_name(t.dtype)) + " " + dims_text(desc.dims) + " needs " +
               std::to_string(*nbytes) + " bytes of data but only " + std::to_string(in_.remaining()) +
               " remain");
    in_.seek(data_at + *nbytes);
    t.strides = *strides;
    t.bytes = ByteSpan::mapped(file_, data_at, *nbytes);
    t.source = {name_, data_at};
    // The stream's header is the model's metadata, as a program's bytes are.
    add_metadata_bytes(data_at - start);
    if (levels > 0) t.extras["paddle_lod_level_bytes"] = lod_bytes;
    return t;
  }

 private:
  // The program's declaration of the var, when it has one, must be what
  // the stream holds (a dim of -1 is unknown): a combined file whose
  // streams were written for other vars is told here, not misnamed.
  void check_declared(const Var& var, const TensorDesc& stored, const std::string& quote, uint64_t at) const {
    if (!var.has_desc) return;
    const TensorDesc& d = var.declared;
    bool same = !d.data_type || d.data_type == stored.data_type;
    if (!d.dims.empty()) {
      same = same && d.dims.size() == stored.dims.size();
      for (size_t i = 0; same && i < d.dims.size(); ++i) same = d.dims[i] < 0 || d.dims[i] == stored.dims[i];
    }
    if (!same)
      throw ModelError(context_.file, context_.format, at,
                       quote + "holds data type " + std::to_string(*stored.data_type) + " dims " +
                           dims_text(stored.dims) + " but the program declares data type " +
                           (d.data_type ? std::to_string(*d.data_type) : std::string("?")) + " dims " +
                           dims_text(d.dims));
  }

  std::shared_ptr<const MappedFile> file_;
  std::string name_;
  ByteReader in_;
  protobuf::WireContext context_;
};

// No such file: a local one, or a server's answer for one it does not
// have (403 from a store that lists nothing, as detect.cpp takes it).
bool missing(const ModelFolder::Opened& opened) {
  return opened.problem == ModelFolder::Problem::Missing ||
         (opened.problem == ModelFolder::Problem::Unresolvable &&
          (opened.reason.find("HTTP 404") != std::string::npos ||
           opened.reason.find("HTTP 403") != std::string::npos));
}

// The combined parameters file's name beside the program, by the names
// Paddle's savers give them.
std::string combined_name(const std::filesystem::path& program) {
  const std::string name = program.filename().string();
  if (name == "__model__") return "__params__";
  if (name == "model") return "params";
  return program.stem().string() + ".pdiparams";
}

class ModelReader {
 public:
  explicit ModelReader(const ModelFile& model) : model_(model) {
    catalog_.format = "paddle";
    catalog_.mtime = model.mapped->mtime();
    catalog_.files.push_back(model.path.filename().string());
  }

  Catalog read() {
    program_ = ProgramReader(model_).read();
    for (const Var& v : program_.vars)
      if (saved(v)) params_.push_back(&v);
    const std::string combined = combined_name(model_.path);
    if (!params_.empty()) {
      folder_.emplace(ModelFolder::of_file(model_.path, std::string(kFormat), model_.remote));
      auto opened = folder_->open(combined);
      if (opened) {
        read_combined(combined, std::move(opened.file));
      } else if (missing(opened)) {
        read_separate(combined);
      } else {
        throw ModelError(model_.mapped->display_name(), std::string(kFormat), std::nullopt,
                         "the parameters file " + shown(combined) + " " + opened.reason);
      }
    }
    describe();
    return std::move(catalog_);
  }

 private:
  [[noreturn]] void refuse(uint64_t at, const std::string& reason) const {
    throw ModelError(model_.mapped->display_name(), std::string(kFormat), at, reason);
  }

  std::string quote(const Var& v, size_t i) const {
    return "the tensor stream of var " + shown(v.name) + " (" + std::to_string(i + 1) + " of " +
           std::to_string(params_.size()) + "): ";
  }

  // save_combine: the streams in sorted name order, nothing else.
  void read_combined(const std::string& name, std::shared_ptr<const MappedFile> file) {
    layout_ = "combined";
    params_file_ = name;
    catalog_.files.push_back(name);
    std::vector<const Var*> sorted = params_;
    std::sort(sorted.begin(), sorted.end(), [](const Var* a, const Var* b) { return a->name < b->name; });
    for (const Var* v : sorted)
      if (v->type != kLodTensor)
        refuse(v->at, "persistable var " + shown(v->name) + " is of var type " + std::to_string(v->type) +
                          ", whose stream in " + shown(name) + " is not a tensor's: the file cannot be read");
    StreamReader streams(file, name);
    for (size_t i = 0; i < sorted.size(); ++i) {
      check_budget();
      if (streams.in().remaining() == 0)
        streams.in().fail(
            "the file ends after " + std::to_string(i) + " of the " + std::to_string(sorted.size()) +
            " tensor streams the program's persistable vars name (fewer streams than vars; the next, " +
            shown(sorted[i]->name) + ", is missing)");
      catalog_.add(streams.read(*sorted[i], quote(*sorted[i], i)));
    }
    if (streams.in().remaining() != 0)
      streams.in().fail(std::to_string(streams.in().remaining()) + " bytes after the last of the " +
                        std::to_string(sorted.size()) +
                        " tensor streams the program's persistable vars name (more streams than vars)");
  }

  // One file per var, named as the var, each exactly one stream.
  void read_separate(const std::string& combined) {
    layout_ = "separate";
    std::vector<std::string> names;
    for (const Var* v : params_)
      if (v->type == kLodTensor) names.push_back(v->name);
    constexpr uint64_t kHeadBytes = 4096;
    auto opened = folder_->open_all(names, kHeadBytes);
    size_t next = 0;
    for (size_t i = 0; i < params_.size(); ++i) {
      const Var& v = *params_[i];
      if (v.type != kLodTensor) {
        not_tensors_.push_back({{"name", v.name},
                                {"var_type", v.type},
                                {"reason", "a persistable var whose value is not a tensor stream"}});
        continue;
      }
      auto& file = opened[next++];
      if (!file)
        refuse(v.at, "var " + shown(v.name) + " has no parameters file " + shown(combined) +
                         " beside the program, and its own file " + shown(v.name) + " " + file.reason);
      check_budget();
      catalog_.files.push_back(v.name);
      StreamReader stream(file.file, v.name);
      catalog_.add(stream.read(v, quote(v, i)));
      if (stream.in().remaining() != 0)
        stream.in().fail(std::to_string(stream.in().remaining()) + " bytes after the tensor stream of var " +
                         shown(v.name));
      file.file.reset();
    }
  }

  void describe() {
    nlohmann::json& meta = catalog_.metadata;
    meta["kind"] = "inference program";
    meta["blocks"] = program_.blocks;
    meta["vars"] = program_.vars.size();
    meta["ops"] = program_.ops;
    meta["op_types"] = program_.op_types;
    meta["inputs"] = program_.feeds;
    meta["outputs"] = program_.fetches;
    if (program_.version) meta["program_version"] = *program_.version;
    meta["persistable_vars"] = params_.size();
    if (!params_.empty()) meta["parameters"] = layout_;
    if (!params_file_.empty()) meta["parameters_file"] = params_file_;
    if (!not_tensors_.empty()) meta["not_tensors"] = std::move(not_tensors_);
  }

  const ModelFile& model_;
  Catalog catalog_;
  Program program_;
  std::vector<const Var*> params_;  // the saved vars, in program order
  std::optional<ModelFolder> folder_;
  std::string layout_;
  std::string params_file_;
  nlohmann::json not_tensors_ = nlohmann::json::array();
};

}  // namespace

std::optional<DType> dtype_of(uint64_t code) {
  for (const PaddleType& t : kTypes)
    if (t.code == code) return t.dtype;
  return std::nullopt;
}

bool probe_program(std::span<const std::byte> head) {
  // 0a <length varint> 08 00 10 ff ff ff ff ff ff ff ff ff 01
  constexpr std::array<uint8_t, 13> kBlockStart{0x08, 0x00, 0x10, 0xff, 0xff, 0xff, 0xff,
                                                0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
  if (head.empty() || head[0] != std::byte{0x0a}) return false;
  size_t i = 1;
  while (i < head.size() && i <= protobuf::kMaxVarintBytes && (std::to_integer<uint8_t>(head[i]) & 0x80)) ++i;
  ++i;  // the length's last byte
  if (head.size() < i + kBlockStart.size()) return false;
  for (size_t k = 0; k < kBlockStart.size(); ++k)
    if (std::to_integer<uint8_t>(head[i + k]) != kBlockStart[k]) return false;
  return true;
}

Catalog open_program(const ModelFile& model) { return ModelReader(model).read(); }

namespace {

// The program of a model folder: its `__model__`, or its one `*.pdmodel`
// (none when it has several: which is meant is the user's to say).
std::optional<std::filesystem::path> folder_program(const std::filesystem::path& folder) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(folder / "__model__", ec)) return folder / "__model__";
  std::optional<std::filesystem::path> found;
  constexpr size_t kMaxEntries = 10'000;  // a folder of a model, not a file system
  size_t seen = 0;
  for (std::filesystem::directory_iterator it(folder, ec), end; !ec && it != end && seen < kMaxEntries;
       it.increment(ec), ++seen) {
    if (it->path().extension() != ".pdmodel" || !it->is_regular_file(ec)) continue;
    if (found) return std::nullopt;
    found = it->path();
  }
  return found;
}

}  // namespace

bool probe_folder(const std::filesystem::path& folder) {
  const auto program = folder_program(folder);
  if (!program) return false;
  try {
    const auto mapped = MappedFile::open(*program);
    return probe_program(mapped->read(0, std::min<uint64_t>(mapped->size(), 4096)));
  } catch (const ModelError&) {
    return false;
  }
}

Catalog open_folder(const std::filesystem::path& folder, IntegrityChecks* checks) {
  return open_program(ModelFile::open(*folder_program(folder), checks));
}

}  // namespace modelfs::paddle
