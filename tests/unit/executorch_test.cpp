// SPDX-License-Identifier: Apache-2.0
// The ExecuTorch reader: programs written here with flatbuffers'
// FlatBufferBuilder by field slot (docs/formats.md, "ExecuTorch"), what a
// mount holds of them, and the refusals rule by rule, each a ModelError
// naming "ExecuTorch".
#include <flatbuffers/flatbuffers.h>
#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "formats/executorch.hpp"
#include "modelfs/error.hpp"
#include "modelfs/formats.hpp"
#include "test_files.hpp"

namespace modelfs {
namespace {

using test::TempDir;

constexpr flatbuffers::voffset_t slot(int id) { return static_cast<flatbuffers::voffset_t>(4 + 2 * id); }

struct Const {
  std::vector<int32_t> sizes;
  int8_t type = 6;  // FLOAT
  uint32_t index = 1;
  std::string data;
  std::vector<uint8_t> order;
  std::string fqn;
  bool external = false;
  int32_t storage_offset = 0;
};

enum class Layout { Inline, Segment };

struct Options {
  uint64_t segment_offset = 0;  // DataSegment.offset of the constant segment
  uint32_t segment_index = 0;   // constant_segment.segment_index
  bool both = false;            // constant_buffer and constant_segment both used
  uint64_t extra_offset = 0;    // an extra constant_segment offset value, appended
  bool overlap = false;         // a second segment over the first one's bytes
};

std::string f32(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

// A Program of one method holding `consts`; the blobs `buffers` (index 1..)
// inline or in one segment after the program (with an eh00 header).
std::string build(const std::vector<Const>& consts, const std::vector<std::string>& buffers, Layout layout,
                  Options opt = {}) {
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<flatbuffers::Offset<void>> values;
  for (const Const& c : consts) {
    const auto sizes = fbb.CreateVector(c.sizes);
    const auto order = fbb.CreateVector(c.order);
    flatbuffers::Offset<void> extra;
    if (!c.fqn.empty() || c.external) {
      const auto name = fbb.CreateString(c.fqn);
      const auto start = fbb.StartTable();
      fbb.AddOffset(slot(1), name);
      fbb.AddElement<int8_t>(slot(2), c.external ? 1 : 0, 0);
      extra = flatbuffers::Offset<void>(fbb.EndTable(start));
    }
    auto start = fbb.StartTable();
    fbb.AddElement<int8_t>(slot(0), c.type, -1);
    fbb.AddElement<int32_t>(slot(1), c.storage_offset, 0);
    fbb.AddOffset(slot(2), sizes);
    fbb.AddOffset(slot(3), order);
    fbb.AddElement<uint32_t>(slot(5), c.index, 0);
    if (!extra.IsNull()) fbb.AddOffset(slot(9), extra);
    const auto tensor = flatbuffers::Offset<void>(fbb.EndTable(start));
    start = fbb.StartTable();
    fbb.AddElement<uint8_t>(slot(0), 5, 0);
    fbb.AddOffset(slot(1), tensor);
    values.push_back(flatbuffers::Offset<void>(fbb.EndTable(start)));
  }
  const auto value_vector = fbb.CreateVector(values);
  const auto name = fbb.CreateString("forward");
  auto start = fbb.StartTable();
  fbb.AddOffset(slot(0), name);
  fbb.AddOffset(slot(2), value_vector);
  const std::vector<flatbuffers::Offset<void>> plans{flatbuffers::Offset<void>(fbb.EndTable(start))};
  const auto plan_vector = fbb.CreateVector(plans);

  std::string segment;
  std::vector<uint64_t> offsets{0};
  for (const std::string& b : buffers) {
    segment.resize((segment.size() + 15) / 16 * 16, '\0');
    offsets.push_back(segment.size());
    segment += b;
  }
  if (opt.extra_offset) offsets.push_back(opt.extra_offset);
  flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<void>>> buffer_vector, segment_vector;
  flatbuffers::Offset<void> constant_segment;
  if (layout == Layout::Inline || opt.both) {
    std::vector<flatbuffers::Offset<void>> bufs;
    for (size_t i = 0; i <= buffers.size(); ++i) {
      const std::string& b = i == 0 ? std::string() : buffers[i - 1];
      fbb.ForceVectorAlignment(b.size(), 1, 16);
      const auto data = fbb.CreateVector(reinterpret_cast<const uint8_t*>(b.data()), b.size());
      start = fbb.StartTable();
      fbb.AddOffset(slot(0), data);
      bufs.push_back(flatbuffers::Offset<void>(fbb.EndTable(start)));
    }
    buffer_vector = fbb.CreateVector(bufs);
  }
  if (layout == Layout::Segment) {
    start = fbb.StartTable();
    fbb.AddElement<uint64_t>(slot(0), opt.segment_offset, 0);
    fbb.AddElement<uint64_t>(slot(1), segment.size(), 0);
    std::vector<flatbuffers::Offset<void>> segs{flatbuffers::Offset<void>(fbb.EndTable(start))};
    if (opt.overlap) {
      start = fbb.StartTable();
      fbb.AddElement<uint64_t>(slot(0), 0, 0);
      fbb.AddElement<uint64_t>(slot(1), 4, 0);
      segs.push_back(flatbuffers::Offset<void>(fbb.EndTable(start)));
    }
    segment_vector = fbb.CreateVector(segs);
    const auto offs = fbb.CreateVector(offsets);
    start = fbb.StartTable();
    fbb.AddElement<uint32_t>(slot(0), opt.segment_index, 0);
    fbb.AddOffset(slot(1), offs);
    constant_segment = flatbuffers::Offset<void>(fbb.EndTable(start));
  }
  start = fbb.StartTable();
  fbb.AddOffset(slot(1), plan_vector);
  if (!buffer_vector.IsNull()) fbb.AddOffset(slot(2), buffer_vector);
  if (!segment_vector.IsNull()) fbb.AddOffset(slot(4), segment_vector);
  if (!constant_segment.IsNull()) fbb.AddOffset(slot(5), constant_segment);
  fbb.Finish(flatbuffers::Offset<void>(fbb.EndTable(start)), "ET12");
  std::string fb(reinterpret_cast<const char*>(fbb.GetBufferPointer()), fbb.GetSize());
  if (layout == Layout::Inline) return fb;
  // The extended header at byte 8 (32 bytes), the segment at a 128 boundary.
  const uint64_t program_size = fb.size() + 32, base = (program_size + 127) / 128 * 128;
  const uint64_t data_size = segment.size() + opt.segment_offset;
  uint32_t root = 0;
  std::memcpy(&root, fb.data(), 4);
  root += 32;
  std::string header = "eh00";
  const uint32_t length = 32;
  header.append(reinterpret_cast<const char*>(&length), 4);
  for (const uint64_t v : {program_size, base, data_size})
    header.append(reinterpret_cast<const char*>(&v), 8);
  std::string out(reinterpret_cast<const char*>(&root), 4);
  out += fb.substr(4, 4) + header + fb.substr(8);
  out.resize(base, '\0');
  out += segment;
  return out;
}

std::string refusal(const std::string& bytes, const char* name = "model.pte") {
  TempDir dir;
  const auto path = dir.write(name, bytes);
  try {
    IntegrityChecks checks;
    open_model(path, &checks);
    for (const auto& c : checks) c.run([](uint64_t) {});
  } catch (const ModelError& e) {
    EXPECT_EQ(e.format(), "ExecuTorch") << e.what();
    return e.reason();
  }
  ADD_FAILURE() << "accepted";
  return {};
}

bool has(const std::string& reason, const char* what) {
  if (reason.find(what) != std::string::npos) return true;
  ADD_FAILURE() << "\"" << what << "\" not in: " << reason;
  return false;
}

TEST(Executorch, ConstantSegmentAndInlineBuffersAreServedInPlace) {
  const std::string a = f32({1, 2, 3, 4, 5, 6}), b = f32({7, 8});
  for (const Layout layout : {Layout::Segment, Layout::Inline}) {
    TempDir dir;
    const auto path = dir.write("model.pte", build({{{2, 3}, 6, 1, a, {0, 1}, "fc.weight"},
                                                    {{2}, 6, 2, b},
                                                    {{2, 3}, 6, 1, a, {}, "fc.weight"},
                                                    {{4}, 6, 0, ""}},
                                                   {a, b}, layout));
    const Catalog catalog = open_model(path);
    EXPECT_EQ(catalog.format, "executorch");
    ASSERT_EQ(catalog.tensors().size(), 2U);
    EXPECT_EQ(catalog.tensors()[0].name, "fc.weight");
    EXPECT_EQ(catalog.tensors()[0].dtype, DType::Float32);
    EXPECT_EQ(catalog.tensors()[0].bytes.view(), a);
    EXPECT_EQ(catalog.tensors()[1].name, "constant.2");
    EXPECT_EQ(catalog.tensors()[1].bytes.view(), b);
  }
}

TEST(Executorch, DimOrderGivesStrides) {
  TempDir dir;
  const std::string a = f32({1, 2, 3, 4, 5, 6});
  const Catalog catalog =
      open_model(dir.write("m.pte", build({{{2, 3}, 6, 1, a, {1, 0}}}, {a}, Layout::Segment)));
  ASSERT_EQ(catalog.tensors().size(), 1U);
  EXPECT_EQ(test::vec(catalog.tensors()[0].strides), (std::vector<int64_t>{1, 2}));
  EXPECT_TRUE(has(refusal(build({{{2, 3}, 6, 1, a, {1, 1}}}, {a}, Layout::Segment)), "permutation"));
  EXPECT_TRUE(has(refusal(build({{{2, 3}, 6, 1, a, {0}}}, {a}, Layout::Segment)), "dim_order has 1"));
}

TEST(Executorch, RefusesIndexesOutOfRange) {
  const std::string a = f32({1});
  EXPECT_TRUE(has(refusal(build({{{1}, 6, 5, a}}, {a}, Layout::Inline)), "names constant buffer 5"));
  EXPECT_TRUE(has(refusal(build({{{1}, 6, 5, a}}, {a}, Layout::Segment)), "names constant 5"));
  Options o;
  o.segment_index = 3;
  EXPECT_TRUE(has(refusal(build({{{1}, 6, 1, a}}, {a}, Layout::Segment, o)), "names segment 3"));
}

TEST(Executorch, RefusesSegmentsAndOffsetsPastTheFile) {
  const std::string a = f32({1});
  std::string bad = build({{{1}, 6, 1, a}}, {a}, Layout::Segment);
  const uint64_t far = uint64_t{1} << 40;
  std::memcpy(bad.data() + 24, &far, 8);  // segment_base_offset
  EXPECT_TRUE(has(refusal(bad), "past the end of the file"));
  bad = build({{{1}, 6, 1, a}}, {a}, Layout::Segment);
  std::memcpy(bad.data() + 16, &far, 8);  // program_size
  EXPECT_TRUE(has(refusal(bad), "program_size"));
  Options o;
  o.extra_offset = 1 << 20;
  EXPECT_TRUE(has(refusal(build({{{1}, 6, 2, a}}, {a}, Layout::Segment, o)), "past its segment"));
}

TEST(Executorch, RefusesTooFewBytesAndOverflow) {
  const std::string a = f32({1, 2});
  EXPECT_TRUE(has(refusal(build({{{3}, 6, 1, a}}, {a}, Layout::Inline)), "needs 12 bytes"));
  EXPECT_TRUE(has(refusal(build({{{-1}, 6, 1, a}}, {a}, Layout::Inline)), "negative size"));
  EXPECT_TRUE(
      has(refusal(build({{{1 << 30, 1 << 30, 1 << 30}, 6, 1, a}}, {a}, Layout::Inline)), "overflows"));
  const std::vector<int32_t> deep(17, 1);
  EXPECT_TRUE(has(refusal(build({{deep, 6, 1, a}}, {a}, Layout::Inline)), "rank 17"));
}

TEST(Executorch, RefusesUnknownTypesAndStorageOffsets) {
  const std::string a = f32({1});
  EXPECT_TRUE(has(refusal(build({{{1}, 42, 1, a}}, {a}, Layout::Inline)), "unknown ScalarType 42"));
  EXPECT_TRUE(has(refusal(build({{{1}, 9, 1, a}}, {a}, Layout::Inline)), "COMPLEXFLOAT"));
  Const c{{1}, 6, 1, a};
  c.storage_offset = 1;
  EXPECT_TRUE(has(refusal(build({c}, {a}, Layout::Inline)), "storage_offset"));
}

TEST(Executorch, RefusesBothConstantLayouts) {
  const std::string a = f32({1});
  Options o;
  o.both = true;
  EXPECT_TRUE(has(refusal(build({{{1}, 6, 1, a}}, {a}, Layout::Segment, o)), "both constant_buffer"));
}

TEST(Executorch, RefusesAnExternalTensorWithoutItsPtd) {
  const std::string a = f32({1});
  Const c{{1}, 6, 0, a, {}, "w", true};
  EXPECT_TRUE(has(refusal(build({c}, {}, Layout::Inline)), "no .ptd beside the program"));
  Const nameless{{1}, 6, 0, a, {}, "", true};
  EXPECT_TRUE(has(refusal(build({nameless}, {}, Layout::Inline)), "without a fully_qualified_name"));
}

TEST(Executorch, RefusesFlatbufferViolations) {
  const std::string a = f32({1});
  const std::string model = build({{{1}, 6, 1, a}}, {a}, Layout::Inline);
  uint32_t root = 0;
  std::memcpy(&root, model.data(), 4);
  std::string bad = model;
  const int32_t far = 0x7fffffff;
  std::memcpy(bad.data() + root, &far, 4);
  EXPECT_TRUE(has(refusal(bad), "vtable"));
  EXPECT_FALSE(refusal(model.substr(0, root + 2)).empty());
  std::string past = model;
  const uint32_t huge = 0x7ffffff0;
  std::memcpy(past.data(), &huge, 4);
  EXPECT_TRUE(has(refusal(past), "past the flatbuffer"));
}

TEST(Executorch, CheckRefusesOverlappingSegments) {
  const std::string a = f32({1, 2});
  Options o;
  o.overlap = true;
  TempDir dir;
  const auto path = dir.write("m.pte", build({{{2}, 6, 1, a}}, {a}, Layout::Segment, o));
  EXPECT_EQ(open_model(path).tensors().size(), 1U);  // a mount serves it; --check refuses
  EXPECT_TRUE(
      has(refusal(build({{{2}, 6, 1, a}}, {a}, Layout::Segment, o)), "overlaps the segment before it"));
}

// A FlatTensor (.ptd) of one segment holding `data`, one named entry `key`
// of FLOAT `sizes`; `old_layout` adds a field at slot 4 (v0.6.0's layout).
std::string build_ptd(const std::string& key, const std::vector<int32_t>& sizes, const std::string& data,
                      bool old_layout = false, uint32_t segment_index = 0) {
  flatbuffers::FlatBufferBuilder fbb;
  auto start = fbb.StartTable();
  fbb.AddElement<uint64_t>(slot(0), 0, 0);
  fbb.AddElement<uint64_t>(slot(1), data.size(), 0);
  const std::vector<flatbuffers::Offset<void>> segs{flatbuffers::Offset<void>(fbb.EndTable(start))};
  const auto seg_vector = fbb.CreateVector(segs);
  const auto k = fbb.CreateString(key);
  const auto s = fbb.CreateVector(sizes);
  start = fbb.StartTable();
  fbb.AddElement<int8_t>(slot(0), 6, -1);
  fbb.AddOffset(slot(1), s);
  const auto layout = flatbuffers::Offset<void>(fbb.EndTable(start));
  start = fbb.StartTable();
  fbb.AddOffset(slot(0), k);
  fbb.AddElement<uint32_t>(slot(1), segment_index, 0);
  fbb.AddOffset(slot(2), layout);
  const std::vector<flatbuffers::Offset<void>> named{flatbuffers::Offset<void>(fbb.EndTable(start))};
  const auto named_vector = fbb.CreateVector(named);
  start = fbb.StartTable();
  fbb.AddOffset(slot(1), seg_vector);
  fbb.AddOffset(slot(2), named_vector);
  if (old_layout) fbb.AddElement<uint32_t>(slot(4), 1, 0);
  fbb.Finish(flatbuffers::Offset<void>(fbb.EndTable(start)), "FT01");
  std::string fb(reinterpret_cast<const char*>(fbb.GetBufferPointer()), fbb.GetSize());
  const uint64_t head = 48, base = (fb.size() + head + 127) / 128 * 128;
  uint32_t root = 0;
  std::memcpy(&root, fb.data(), 4);
  root += head;
  std::string header = "FH01";
  const uint32_t length = 40;
  header.append(reinterpret_cast<const char*>(&length), 4);
  for (const uint64_t v : {head, uint64_t{fb.size()}, base, uint64_t{data.size()}})
    header.append(reinterpret_cast<const char*>(&v), 8);
  header.resize(head, '\0');
  std::string out(reinterpret_cast<const char*>(&root), 4);
  out += fb.substr(4, 4) + header + fb.substr(8);
  out.resize(base, '\0');
  return out + data;
}

TEST(Executorch, PtdAloneAndBesideAProgram) {
  const std::string a = f32({1, 2, 3, 4});
  TempDir dir;
  const Catalog alone = open_model(dir.write("w.ptd", build_ptd("fc.w", {2, 2}, a)));
  ASSERT_EQ(alone.tensors().size(), 1U);
  EXPECT_EQ(alone.tensors()[0].name, "fc.w");
  EXPECT_EQ(alone.tensors()[0].bytes.view(), a);
  dir.write("_default_external_constant.ptd", build_ptd("fc.w", {2, 2}, a));
  const Catalog program =
      open_model(dir.write("model.pte", build({{{2, 2}, 6, 0, "", {}, "fc.w", true}}, {}, Layout::Inline)));
  ASSERT_EQ(program.tensors().size(), 1U);
  EXPECT_EQ(program.tensors()[0].bytes.view(), a);
  // Another shape in the .ptd than in the program.
  dir.write("model.ptd", build_ptd("fc.w", {4}, a));
  try {
    open_model(dir.path() / "model.pte");
    ADD_FAILURE() << "accepted";
  } catch (const ModelError& e) {
    EXPECT_TRUE(has(e.reason(), "another type, shape or dim_order"));
  }
}

TEST(Executorch, RefusesBadPtds) {
  const std::string a = f32({1, 2, 3, 4});
  EXPECT_TRUE(has(refusal(build_ptd("w", {2, 2}, a, true), "w.ptd"), "older (v0.6.0) layout"));
  EXPECT_TRUE(has(refusal(build_ptd("w", {2, 2}, a, false, 3), "w.ptd"), "names segment 3"));
  EXPECT_TRUE(has(refusal(build_ptd("w", {3, 2}, a), "w.ptd"), "needs 24 bytes"));
  std::string bad = build_ptd("w", {2, 2}, a);
  const uint64_t far = uint64_t{1} << 40;
  std::memcpy(bad.data() + 32, &far, 8);  // segment_base_offset
  EXPECT_TRUE(has(refusal(bad, "w.ptd"), "past the end of the file"));
}

TEST(Executorch, ProbeNeedsTheIdentifier) {
  const std::string model = build({}, {}, Layout::Inline);
  EXPECT_TRUE(executorch::probe_file(std::as_bytes(std::span(model.data(), model.size()))));
  std::string other = model;
  other[4] = 'X';
  EXPECT_FALSE(executorch::probe_file(std::as_bytes(std::span(other.data(), other.size()))));
  other.replace(4, 4, "FT01");
  EXPECT_TRUE(executorch::probe_file(std::as_bytes(std::span(other.data(), other.size()))));
}

}  // namespace
}  // namespace modelfs
