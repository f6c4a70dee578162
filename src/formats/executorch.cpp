// SPDX-License-Identifier: Apache-2.0
// The ExecuTorch reader (executorch.hpp): the program's constant tensors,
// and the external ones of its .ptd, each served in place from a mapping.
#include "formats/executorch.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "formats/flatbuffer.hpp"
#include "formats/model_folder.hpp"
#include "io/byte_reader.hpp"
#include "io/checked_math.hpp"
#include "io/tensor_spec.hpp"
#include "modelfs/budget.hpp"
#include "modelfs/error.hpp"

namespace modelfs::executorch {
namespace {

// The walker and the parts both flatbuffer readers share.
using namespace flatbuffer;  // NOLINT(google-build-using-namespace): this file is one of its readers

constexpr std::string_view kFormat = "ExecuTorch";         // what messages call it
constexpr std::string_view kCatalogFormat = "executorch";  // the catalog's name of the format
constexpr uint64_t kMaxListed = 4096;                      // entries a metadata.json list prints
constexpr uint64_t kMaxRank = 16;                          // the runtime's kTensorDimensionLimit
constexpr std::string_view kDefaultPtd = "_default_external_constant.ptd";

// Field ids (slot numbers) of program.fbs and flat_tensor.fbs (docs/formats.md).
namespace program_field {
constexpr uint32_t kVersion = 0, kExecutionPlan = 1, kConstantBuffer = 2, kBackendDelegateData = 3,
                   kSegments = 4, kConstantSegment = 5, kNamedData = 7;
}
namespace plan_field {
constexpr uint32_t kName = 0, kValues = 2, kDelegates = 7;
}
namespace evalue_field {
constexpr uint32_t kType = 0, kValue = 1;
constexpr uint8_t kTensor = 5;  // KernelTypes: NONE, Null, Int, Bool, Double, Tensor, ...
}  // namespace evalue_field
namespace tensor_field {
constexpr uint32_t kScalarType = 0, kStorageOffset = 1, kSizes = 2, kDimOrder = 3, kDataBufferIdx = 5,
                   kAllocationInfo = 6, kExtraTensorInfo = 9;
}
namespace extra_field {
constexpr uint32_t kFullyQualifiedName = 1, kLocation = 2;
constexpr int8_t kExternal = 1;
}  // namespace extra_field
namespace segment_field {
constexpr uint32_t kOffset = 0, kSize = 1;
}
namespace subsegment_field {
constexpr uint32_t kSegmentIndex = 0, kOffsets = 1;
}
namespace named_field {
constexpr uint32_t kKey = 0, kSegmentIndex = 1, kTensorLayout = 2;
}
namespace delegate_field {
constexpr uint32_t kId = 0, kProcessed = 1;
constexpr uint32_t kLocation = 0, kIndex = 1;  // BackendDelegateDataReference
}  // namespace delegate_field
namespace layout_field {
constexpr uint32_t kScalarType = 0, kSizes = 1, kDimOrder = 2;
}
namespace flat_tensor_field {
constexpr uint32_t kSegments = 1, kNamedData = 2;  // 0 is version (always 0: not read)
}

// ScalarType values 0..29 (docs/formats.md, "ScalarType"); those with no
// dtype ExecuTorch does not implement.
constexpr std::array<TypeInfo, 30> kTypes{{
    {"BYTE", DType::UInt8},
    {"CHAR", DType::Int8},
    {"SHORT", DType::Int16},
    {"INT", DType::Int32},
    {"LONG", DType::Int64},
    {"HALF", DType::Float16},
    {"FLOAT", DType::Float32},
    {"DOUBLE", DType::Float64},
    {"COMPLEXHALF", std::nullopt},
    {"COMPLEXFLOAT", std::nullopt},
    {"COMPLEXDOUBLE", std::nullopt},
    {"BOOL", DType::Bool},
    {"QINT8", DType::Int8},
    {"QUINT8", DType::UInt8},
    {"QINT32", DType::Int32},
    {"BFLOAT16", DType::BFloat16},
    {"QUINT4X2", DType::UInt8},  // a byte holds two 4-bit values: served as the stored bytes
    {"QUINT2X4", DType::UInt8},  // a byte holds four 2-bit values
    {"BITS1X8", std::nullopt},
    {"BITS2X4", std::nullopt},
    {"BITS4X2", std::nullopt},
    {"BITS8", std::nullopt},
    {"BITS16", DType::UInt16},
    {"FLOAT8E5M2", DType::Float8E5M2},
    {"FLOAT8E4M3FN", DType::Float8E4M3FN},
    {"FLOAT8E5M2FNUZ", DType::Float8E5M2FNUZ},
    {"FLOAT8E4M3FNUZ", DType::Float8E4M3FNUZ},
    {"UINT16", DType::UInt16},
    {"UINT32", DType::UInt32},
    {"UINT64", DType::UInt64},
}};

// A segment: absolute file range.
struct Segment {
  uint64_t offset = 0;  // relative to the segment base, as stored
  uint64_t start = 0;   // in the file
  uint64_t size = 0;
};

// The header after the identifier ("eh00" or "FH01"), when there is one.
struct Header {
  bool present = false;
  uint64_t length = 0;               // as it gives it, from byte 8
  std::span<const std::byte> bytes;  // the file's first 8 + length bytes
  uint64_t flatbuffer_end = 0;       // what the flatbuffer may span
  uint64_t segment_base = 0;
  std::optional<uint64_t> segment_data_size;
};

// Program.segments / FlatTensor.segments, each checked to lie in the file
// (and in segment_data_size where the header gives it).
std::vector<Segment> read_segments(const Table& root, uint32_t field, const Header& header,
                                   const MappedFile& file, const std::string& what) {
  Flat& flat = root.flat();
  std::vector<Segment> out;
  const auto segs = root.vector(field, 4, what);
  if (!segs) return out;
  const uint64_t limit =
      header.segment_data_size ? header.segment_base + *header.segment_data_size : file.size();
  for (uint64_t i = 0; i < segs->size; ++i) {
    const std::string name = "segment " + std::to_string(i);
    const Table s = root.entry(*segs, i, name);
    Segment seg;
    seg.offset = s.get<uint64_t>(segment_field::kOffset, 0);
    seg.size = s.get<uint64_t>(segment_field::kSize, 0);
    if (seg.size > 0 && !header.present)
      flat.fail(s.at(), name + " holds " + std::to_string(seg.size) +
                            " bytes but the file has no extended header giving the segments' base offset");
    const auto start = checked_add(header.segment_base, seg.offset);
    if (!start || !range_fits(*start, seg.size, limit) || !range_fits(*start, seg.size, file.size()))
      flat.fail(s.at(), name + " [base " + std::to_string(header.segment_base) + " + " +
                            std::to_string(seg.offset) + ", +" + std::to_string(seg.size) +
                            ") lies past the end of the " +
                            (header.segment_data_size ? "segment data" : std::string("file")) + " (" +
                            std::to_string(limit) + " bytes)");
    seg.start = *start;
    out.push_back(seg);
  }
  return out;
}

// The check of segments --check runs: sorted and not overlapping.
void check_segments(const std::vector<Segment>& segments, const std::string& file_name) {
  uint64_t end = 0;
  for (size_t i = 0; i < segments.size(); ++i) {
    const Segment& s = segments[i];
    if (s.size == 0) continue;
    if (s.offset < end)
      throw ModelError(file_name, std::string(kFormat), s.start,
                       "segment " + std::to_string(i) + " at " + std::to_string(s.offset) +
                           " overlaps the segment before it (which ends at " + std::to_string(end) + ")");
    end = s.offset + s.size;  // fits: checked at open
  }
}

void add_segment_check(const ModelFile& model, std::vector<Segment> segments, const std::string& what) {
  if (model.checks == nullptr) return;
  const std::string name = model.mapped->display_name();
  model.checks->push_back(
      {what, 0, [segments = std::move(segments), name](const std::function<void(uint64_t)>& progress) {
         check_segments(segments, name);
         progress(0);
       }});
}

// Shape, dtype and dim_order of a Tensor or TensorLayout, checked.
struct Layout {
  int8_t scalar_type = 0;
  const TypeInfo* info = nullptr;
  std::vector<uint64_t> shape;
  std::vector<int64_t> strides;
  bool contiguous = true;
  uint64_t nbytes = 0;
};

Layout read_layout(const Table& t, uint32_t type_field, uint32_t sizes_field, uint32_t order_field,
                   const std::string& named) {
  Flat& flat = t.flat();
  Layout out;
  out.scalar_type = t.get<int8_t>(type_field, 0);
  out.info = &type_of(kTypes, out.scalar_type, t, named, "ScalarType", "which ExecuTorch does not implement");
  if (auto dims = t.vector(sizes_field, 4, named + "'s sizes"))
    out.shape = read_shape(flat, *dims, kMaxRank, named, "size");
  const auto numel = checked_numel(out.shape);
  const auto strides = contiguous_strides(out.shape);
  const auto bits = numel ? checked_mul(*numel, dtype_bits(*out.info->dtype)) : std::nullopt;
  if (!numel || !strides || !bits) flat.fail(t.at(), named + "'s shape overflows");
  out.nbytes = *bits / 8 + (*bits % 8 != 0 ? 1 : 0);
  out.strides = *strides;
  const size_t rank = out.shape.size();
  if (auto order = t.vector(order_field, 1, named + "'s dim_order"); order && order->size > 0) {
    if (order->size != rank)
      flat.fail(order->at, named + "'s dim_order has " + std::to_string(order->size) + " entries for rank " +
                               std::to_string(rank));
    const std::vector<uint8_t> dims = read_scalars<uint8_t>(flat, *order, kMaxRank);
    std::vector<bool> seen(rank, false);
    for (const uint8_t d : dims) {
      if (d >= rank || seen[d])
        flat.fail(order->at, named + "'s dim_order is not a permutation of its dimensions");
      seen[d] = true;
    }
    // dim_order lists dimensions outer to inner: strides in that order.
    int64_t step = 1;
    for (size_t k = rank; k-- > 0;) {
      out.strides[dims[k]] = step;
      if (dims[k] != k) out.contiguous = false;
      step *= static_cast<int64_t>(out.shape[dims[k]]);  // numel fits: no overflow
    }
  }
  return out;
}

// One entry of a .ptd's named_data.
struct PtdEntry {
  std::string key;
  uint64_t start = 0;
  uint64_t size = 0;
  std::optional<Layout> layout;
};

struct Ptd {
  std::shared_ptr<const MappedFile> file;
  std::string name;  // as the catalog lists it
  std::vector<PtdEntry> entries;
  std::map<std::string, size_t, std::less<>> by_key;
  std::vector<Segment> segments;
};

Header read_header(const MappedFile& file, Flat& flat, std::string_view magic, uint64_t min_length) {
  Header h;
  h.flatbuffer_end = file.size();
  if (file.size() < 16 || std::memcmp(file.read(8, 4).data(), magic.data(), 4) != 0) return h;
  h.length = load_le<uint32_t>(file.read(12, 4));
  if (h.length < min_length || !range_fits(8, h.length, file.size()))
    flat.fail(12, std::string(magic) + " header length " + std::to_string(h.length) +
                      " is too short or runs past the file");
  h.present = true;
  h.bytes = file.read(0, 8 + h.length);
  return h;
}

Ptd read_ptd(std::shared_ptr<const MappedFile> mapped, std::string name) {
  const MappedFile& file = *mapped;
  Flat probe(file, kFormat);
  if (file.size() < 8) probe.fail(0, "the file is too short for a flatbuffer");
  if (std::memcmp(file.read(4, 4).data(), "FT01", 4) != 0) probe.fail(4, "no file identifier FT01 (a .ptd)");
  Header h = read_header(file, probe, "FH01", 40);
  if (h.present) {
    const auto fb_offset = load_le<uint64_t>(h.bytes, 16), fb_size = load_le<uint64_t>(h.bytes, 24);
    h.segment_base = load_le<uint64_t>(h.bytes, 32);
    h.segment_data_size = load_le<uint64_t>(h.bytes, 40);
    const auto fb_end = checked_add(fb_offset, fb_size);
    if (!fb_end || *fb_end > file.size())
      probe.fail(16, "the FlatTensor header's flatbuffer [" + std::to_string(fb_offset) + ", +" +
                         std::to_string(fb_size) + ") lies past the end of the file (" +
                         std::to_string(file.size()) + " bytes)");
    if (!range_fits(h.segment_base, *h.segment_data_size, file.size()))
      probe.fail(32, "the FlatTensor header's segment data [" + std::to_string(h.segment_base) + ", +" +
                         std::to_string(*h.segment_data_size) + ") lies past the end of the file (" +
                         std::to_string(file.size()) + " bytes)");
    h.flatbuffer_end = *fb_end;
  }
  Flat flat(file, kFormat, h.flatbuffer_end);
  const Table root(flat, flat.follow(0, "the root offset"), "FlatTensor");
  // v0.6.0's layout had tensor_alignment (a u32) at slot 1 and tensors,
  // segments, named_data at 2..4: told by a field past slot 2.
  if (root.field(3, 1) || root.field(4, 1))
    flat.fail(
        root.at(),
        "the FlatTensor has the older (v0.6.0) layout with a tensors list, which modelfs does not read");
  Ptd ptd;
  ptd.file = mapped;
  ptd.name = std::move(name);
  ptd.segments = read_segments(root, flat_tensor_field::kSegments, h, file, "FlatTensor.segments");
  if (auto named = root.vector(flat_tensor_field::kNamedData, 4, "FlatTensor.named_data")) {
    for (uint64_t i = 0; i < named->size; ++i) {
      const std::string what = "named_data " + std::to_string(i);
      const Table n = root.entry(*named, i, what);
      PtdEntry e;
      e.key = n.string(named_field::kKey, what + "'s key").value_or("");
      const std::string quote = what + " " + shown(e.key);
      const uint32_t index = n.get<uint32_t>(named_field::kSegmentIndex, 0);
      if (index >= ptd.segments.size())
        flat.fail(n.at(), quote + " names segment " + std::to_string(index) + " (the file has " +
                              std::to_string(ptd.segments.size()) + ")");
      e.start = ptd.segments[index].start;
      e.size = ptd.segments[index].size;
      if (auto l = n.table(named_field::kTensorLayout, quote + "'s tensor_layout")) {
        e.layout =
            read_layout(*l, layout_field::kScalarType, layout_field::kSizes, layout_field::kDimOrder, quote);
        if (e.layout->nbytes > e.size)
          flat.fail(n.at(), quote + " (" + e.layout->info->name + ") needs " +
                                std::to_string(e.layout->nbytes) + " bytes; its segment holds " +
                                std::to_string(e.size));
      }
      if (!ptd.by_key.emplace(e.key, ptd.entries.size()).second)
        flat.fail(n.at(), quote + ": the key appears twice");
      ptd.entries.push_back(std::move(e));
    }
  }
  return ptd;
}

TensorSpec make_spec(const std::string& name, const Layout& layout,
                     const std::shared_ptr<const MappedFile>& file, const std::string& file_name,
                     uint64_t start) {
  TensorSpec spec;
  spec.name = name;
  spec.dtype = *layout.info->dtype;
  spec.shape = layout.shape;
  spec.strides = layout.strides;
  spec.source = {file_name, start};
  spec.bytes = ByteSpan::mapped(file, start, layout.nbytes);
  spec.extras["executorch_scalar_type"] = layout.info->name;
  return spec;
}

Catalog open_ptd(const ModelFile& model) {
  const std::string file_name = model.path.filename().string();
  Ptd ptd = read_ptd(model.mapped, file_name);
  Catalog catalog = flat_catalog(kCatalogFormat, model);  // named_data entries may share a segment
  nlohmann::json not_tensors = nlohmann::json::array();
  uint64_t blobs = 0;
  for (const PtdEntry& e : ptd.entries) {
    if (!e.layout) {
      ++blobs;
      if (not_tensors.size() < kMaxListed)
        not_tensors.push_back(
            {{"name", e.key}, {"size", e.size}, {"reason", "named data without a tensor layout"}});
      continue;
    }
    catalog.add(make_spec(e.key, *e.layout, ptd.file, file_name, e.start));
  }
  nlohmann::json& meta = catalog.metadata;
  meta["kind"] = "FlatTensor (.ptd)";
  meta["segment_count"] = ptd.segments.size();
  meta["named_data_count"] = ptd.entries.size();
  meta["not_tensor_count"] = blobs;
  if (!not_tensors.empty()) meta["not_tensors"] = std::move(not_tensors);
  add_segment_check(model, ptd.segments, "ExecuTorch .ptd segments");
  return catalog;
}

// The .pte's extended header "eh00", when there is one: program_size,
// segment_base_offset and (from 32 bytes) segment_data_size.
Header read_program_header(const MappedFile& file) {
  Flat probe(file, kFormat);
  if (file.size() < 8) probe.fail(0, "the file is too short for a flatbuffer");
  if (std::memcmp(file.read(4, 4).data(), "ET12", 4) != 0) probe.fail(4, "no file identifier ET12");
  Header h = read_header(file, probe, "eh00", 24);
  if (!h.present) return h;
  const auto program_size = load_le<uint64_t>(h.bytes, 16);
  h.segment_base = load_le<uint64_t>(h.bytes, 24);
  if (h.length >= 32) h.segment_data_size = load_le<uint64_t>(h.bytes, 32);
  if (program_size < 8 || program_size > file.size())
    probe.fail(16, "program_size " + std::to_string(program_size) + " is not within the file (" +
                       std::to_string(file.size()) + " bytes)");
  if (h.segment_base != 0 && h.segment_base < program_size)
    probe.fail(24, "segment_base_offset " + std::to_string(h.segment_base) + " lies inside the program (" +
                       std::to_string(program_size) + " bytes)");
  if (h.segment_base > file.size() ||
      (h.segment_data_size && !range_fits(h.segment_base, *h.segment_data_size, file.size())))
    probe.fail(24, "the segments [" + std::to_string(h.segment_base) + ", +" +
                       std::to_string(h.segment_data_size.value_or(0)) + ") lie past the end of the file (" +
                       std::to_string(file.size()) + " bytes)");
  h.flatbuffer_end = program_size;
  return h;
}

// A program (.pte): its execution plans' constant tensors, from
// constant_buffer, constant_segment or the .ptd beside it.
class ProgramReader {
 public:
  explicit ProgramReader(const ModelFile& model)
      : model_(model),
        file_name_(model.path.filename().string()),
        header_(read_program_header(*model.mapped)),
        flat_(*model.mapped, kFormat, header_.flatbuffer_end),
        root_(flat_, flat_.follow(0, "the root offset"), "Program"),
        catalog_(flat_catalog(kCatalogFormat, model)) {}

  Catalog read() {
    nlohmann::json& meta = catalog_.metadata;
    meta["kind"] = "Program (.pte)";
    meta["version"] = root_.get<uint32_t>(program_field::kVersion, 0);
    meta["extended_header"] = header_.present;
    segments_ = read_segments(root_, program_field::kSegments, header_, *model_.mapped, "Program.segments");
    meta["segment_count"] = segments_.size();
    read_constant_sources();
    read_named_data();
    const auto inline_data =
        root_.vector(program_field::kBackendDelegateData, 4, "Program.backend_delegate_data");
    inline_count_ = inline_data ? inline_data->size : 0;
    const auto plan_vec = root_.vector(program_field::kExecutionPlan, 4, "Program.execution_plan");
    const uint64_t plan_count = plan_vec ? plan_vec->size : 0;
    for (uint64_t p = 0; p < plan_count; ++p)
      read_plan(root_.entry(*plan_vec, p, "ExecutionPlan " + std::to_string(p)));
    meta["methods"] = std::move(plans_);
    meta["method_count"] = plan_count;
    meta["constant_tensor_count"] = seen_buffers_.size() + seen_external_.size();
    meta["external_tensor_count"] = seen_external_.size();
    if (mutable_with_state_ > 0) meta["mutable_tensors_with_initial_state_left_out"] = mutable_with_state_;
    if (!delegates_.empty()) meta["delegates"] = std::move(delegates_);
    meta["not_tensor_count"] = named_count_;
    if (!not_tensors_.empty()) meta["not_tensors"] = std::move(not_tensors_);
    add_segment_check(model_, segments_, "ExecuTorch segments");
    if (ptd_)
      add_segment_check({model_.path, ptd_->file, model_.checks}, ptd_->segments, "ExecuTorch .ptd segments");
    return std::move(catalog_);
  }

 private:
  const Segment& segment(uint64_t index, uint64_t at, const std::string& quote) const {
    if (index >= segments_.size())
      flat_.fail(at, quote + " names segment " + std::to_string(index) + " (the program has " +
                         std::to_string(segments_.size()) + ")");
    return segments_[index];
  }

  // Where constants are: the inline constant_buffer (deprecated) or the
  // offsets of constant_segment; at most one of them holds any.
  void read_constant_sources() {
    buffers_ = root_.vector(program_field::kConstantBuffer, 4, "Program.constant_buffer");
    buffer_count_ = buffers_ ? buffers_->size : 0;
    if (auto cs = root_.table(program_field::kConstantSegment, "Program.constant_segment")) {
      offsets_ = cs->vector(subsegment_field::kOffsets, 8, "constant_segment.offsets");
      offset_count_ = offsets_ ? offsets_->size : 0;
      if (offset_count_ > 0)
        constant_segment_ =
            segment(cs->get<uint32_t>(subsegment_field::kSegmentIndex, 0), cs->at(), "constant_segment");
    }
    if (buffer_count_ > 0 && offset_count_ > 0)
      flat_.fail(root_.at(), "both constant_buffer and constant_segment hold constants (at most one may)");
    catalog_.metadata["constant_buffer_count"] = buffer_count_;
    catalog_.metadata["constant_segment_offsets"] = offset_count_;
  }

  // named_data: blobs by key (a delegate's), not tensors.
  void read_named_data() {
    if (auto named = root_.vector(program_field::kNamedData, 4, "Program.named_data")) {
      named_count_ = named->size;
      for (uint64_t i = 0; i < named->size; ++i) {
        const std::string what = "named_data " + std::to_string(i);
        const Table n = root_.entry(*named, i, what);
        const std::string key = n.string(named_field::kKey, what + "'s key").value_or("");
        const Segment& s =
            segment(n.get<uint32_t>(named_field::kSegmentIndex, 0), n.at(), what + " " + shown(key));
        if (not_tensors_.size() < kMaxListed)
          not_tensors_.push_back(
              {{"name", key}, {"size", s.size}, {"reason", "Program.named_data (a blob, not a tensor)"}});
      }
    }
    catalog_.metadata["named_data_count"] = named_count_;
  }

  // The .ptd beside the program, opened (inside the model's folder) when
  // the first EXTERNAL tensor needs it.
  Ptd& external(const std::string& quote, uint64_t at) {
    if (ptd_) return *ptd_;
    ModelFolder folder = ModelFolder::of_file(model_.path, std::string(kFormat));
    const std::vector<std::string> names{model_.path.stem().string() + ".ptd", std::string(kDefaultPtd)};
    std::string reasons;
    for (const std::string& n : names) {
      auto opened = folder.open(n);
      if (opened) {
        ptd_ = read_ptd(std::move(opened.file), n);
        catalog_.files.push_back(n);
        return *ptd_;
      }
      reasons += (reasons.empty() ? "" : "; ") + shown(n) + " " + opened.reason;
    }
    flat_.fail(at, quote + " is EXTERNAL, and no .ptd beside the program holds it: " + reasons);
  }

  void read_plan(const Table& plan) {
    const std::string plan_name = plan.string(plan_field::kName, "ExecutionPlan.name").value_or("");
    const auto values = plan.vector(plan_field::kValues, 4, "ExecutionPlan.values");
    if (plans_.size() < kMaxListed)
      plans_.push_back({{"name", plan_name}, {"values", values ? values->size : 0}});
    read_delegates(plan, plan_name);
    if (!values) return;
    for (uint64_t i = 0; i < values->size; ++i) {
      const std::string what = "value " + std::to_string(i) + " of method " + shown(plan_name);
      read_value(plan.entry(*values, i, what), what);
    }
  }

  // A method's delegates, listed with where their processed data lies.
  void read_delegates(const Table& plan, const std::string& plan_name) {
    auto ds = plan.vector(plan_field::kDelegates, 4, "ExecutionPlan.delegates");
    for (uint64_t d = 0; ds && d < ds->size; ++d) {
      const std::string what = "delegate " + std::to_string(d) + " of method " + shown(plan_name);
      const Table del = plan.entry(*ds, d, what);
      const std::string id = del.string(delegate_field::kId, what + "'s id").value_or("");
      nlohmann::json j = {{"method", plan_name}, {"id", id}};
      if (auto ref = del.table(delegate_field::kProcessed, what + "'s processed")) {
        const int8_t location = ref->get<int8_t>(delegate_field::kLocation, 0);
        const uint32_t index = ref->get<uint32_t>(delegate_field::kIndex, 0);
        if (location == 1) {
          j["location"] = "segment";
          j["index"] = index;
          j["size"] = segment(index, ref->at(), what).size;
        } else if (location == 0) {
          if (index >= inline_count_)
            flat_.fail(ref->at(), what + " names inline delegate data " + std::to_string(index) +
                                      " (the program has " + std::to_string(inline_count_) + ")");
          j["location"] = "inline";
          j["index"] = index;
        } else {
          flat_.fail(ref->at(), what + " has unknown data location " + std::to_string(location));
        }
      }
      if (delegates_.size() < kMaxListed) delegates_.push_back(std::move(j));
    }
  }

  // A Tensor EValue that is a constant (data_buffer_idx > 0, no
  // allocation_info) or EXTERNAL: a tensor of the catalog, once per
  // buffer or name however many methods name it.
  void read_value(const Table& ev, const std::string& what) {
    if (ev.get<uint8_t>(evalue_field::kType, 0) != evalue_field::kTensor) return;
    const auto t = ev.table(evalue_field::kValue, what);
    if (!t) flat_.fail(ev.at(), what + " is a Tensor without its table");
    const uint32_t index = t->get<uint32_t>(tensor_field::kDataBufferIdx, 0);
    const bool planned = t->field(tensor_field::kAllocationInfo, 4).has_value();
    std::string fqn;
    bool is_external = false;
    if (auto extra = t->table(tensor_field::kExtraTensorInfo, what + "'s extra_tensor_info")) {
      fqn = extra->string(extra_field::kFullyQualifiedName, what + "'s fully_qualified_name").value_or("");
      is_external = extra->get<int8_t>(extra_field::kLocation, 0) == extra_field::kExternal;
    }
    if (planned) {
      if (index > 0) ++mutable_with_state_;  // initial state in mutable_data_segments: left out
      return;
    }
    if (!is_external && index == 0) return;  // an input: supplied at run time
    const std::string quote = what + (fqn.empty() ? "" : " " + shown(fqn));
    if (is_external ? seen_external_.count(fqn) > 0 : seen_buffers_.count(index) > 0) return;
    if (const int32_t storage_offset = t->get<int32_t>(tensor_field::kStorageOffset, 0); storage_offset != 0)
      flat_.fail(t->at(),
                 quote + " has storage_offset " + std::to_string(storage_offset) + " (only 0 is supported)");
    const Layout layout =
        read_layout(*t, tensor_field::kScalarType, tensor_field::kSizes, tensor_field::kDimOrder, quote);
    if (is_external) {
      add_external(*t, fqn, layout, quote);
    } else {
      add_constant(*t, index, fqn, layout, quote);
    }
  }

  // An EXTERNAL tensor: the .ptd's entry of its name, of its layout.
  void add_external(const Table& t, const std::string& fqn, const Layout& layout, const std::string& quote) {
    if (fqn.empty()) flat_.fail(t.at(), quote + " is EXTERNAL without a fully_qualified_name");
    Ptd& data = external(quote, t.at());
    auto it = data.by_key.find(fqn);
    if (it == data.by_key.end())
      flat_.fail(t.at(), quote + " is EXTERNAL, and " + shown(data.name) + " has no entry of that name");
    const PtdEntry& e = data.entries[it->second];
    if (e.layout && (e.layout->scalar_type != layout.scalar_type || e.layout->shape != layout.shape ||
                     e.layout->strides != layout.strides))
      flat_.fail(t.at(), quote + " has another type, shape or dim_order in " + shown(data.name));
    if (layout.nbytes > e.size)
      flat_.fail(t.at(), quote + " (" + layout.info->name + ") needs " + std::to_string(layout.nbytes) +
                             " bytes; " + shown(data.name) + " holds " + std::to_string(e.size));
    TensorSpec spec = make_spec(fqn, layout, data.file, data.name, e.start);
    spec.extras["executorch_location"] = "external";
    catalog_.add(spec);
    seen_external_.emplace(fqn, true);
  }

  // A constant in the program: buffer `index` of constant_buffer, or
  // offset `index` of constant_segment.
  void add_constant(const Table& t, uint32_t index, const std::string& fqn, const Layout& layout,
                    const std::string& quote) {
    uint64_t start = 0, available = 0;
    if (buffer_count_ > 0) {
      if (index >= buffer_count_)
        flat_.fail(t.at(), quote + " names constant buffer " + std::to_string(index) + " (the program has " +
                               std::to_string(buffer_count_) + ")");
      const Table b = root_.entry(*buffers_, index, "constant buffer " + std::to_string(index));
      const auto storage = b.vector(0, 1, "constant buffer " + std::to_string(index) + ".storage");
      if (storage) start = storage->at, available = storage->size;
    } else if (constant_segment_) {
      if (index >= offset_count_)
        flat_.fail(t.at(), quote + " names constant " + std::to_string(index) + " (constant_segment has " +
                               std::to_string(offset_count_) + " offsets)");
      const uint64_t at = offsets_->at + 8 * uint64_t{index};
      const uint64_t offset = flat_.scalar<uint64_t>(at, "constant offset");
      if (offset > constant_segment_->size)
        flat_.fail(at, quote + "'s offset " + std::to_string(offset) + " lies past its segment (" +
                           std::to_string(constant_segment_->size) + " bytes)");
      start = constant_segment_->start + offset;
      available = constant_segment_->size - offset;
    } else {
      flat_.fail(t.at(), quote + " names constant " + std::to_string(index) +
                             ", but the program has neither constant_buffer nor constant_segment");
    }
    if (layout.nbytes > available)
      flat_.fail(t.at(), quote + " (" + layout.info->name + ") needs " + std::to_string(layout.nbytes) +
                             " bytes; its buffer holds " + std::to_string(available));
    const std::string name = fqn.empty() ? "constant." + std::to_string(index) : fqn;
    TensorSpec spec = make_spec(name, layout, model_.mapped, file_name_, start);
    spec.extras["executorch_buffer"] = index;
    spec.extras["executorch_location"] = buffer_count_ > 0 ? "constant_buffer" : "constant_segment";
    catalog_.add(spec);
    seen_buffers_.emplace(index, true);
  }

  const ModelFile& model_;
  const std::string file_name_;
  const Header header_;
  Flat flat_;
  const Table root_;
  Catalog catalog_;
  std::vector<Segment> segments_;
  std::optional<Vec> buffers_;  // constant_buffer
  uint64_t buffer_count_ = 0;
  std::optional<Segment> constant_segment_;
  std::optional<Vec> offsets_;  // constant_segment's
  uint64_t offset_count_ = 0;
  uint64_t named_count_ = 0;
  uint64_t inline_count_ = 0;  // backend_delegate_data
  std::optional<Ptd> ptd_;
  std::map<uint32_t, bool> seen_buffers_;
  std::map<std::string, bool, std::less<>> seen_external_;
  uint64_t mutable_with_state_ = 0;
  nlohmann::json plans_ = nlohmann::json::array();
  nlohmann::json delegates_ = nlohmann::json::array();
  nlohmann::json not_tensors_ = nlohmann::json::array();
};

}  // namespace

bool probe_file(std::span<const std::byte> head) {
  return head.size() >= 8 &&
         (std::memcmp(head.data() + 4, "ET12", 4) == 0 || std::memcmp(head.data() + 4, "FT01", 4) == 0);
}

Catalog open_file(const ModelFile& model) {
  const MappedFile& file = *model.mapped;
  if (file.size() >= 8 && std::memcmp(file.read(4, 4).data(), "FT01", 4) == 0) return open_ptd(model);
  return ProgramReader(model).read();
}

}  // namespace modelfs::executorch
