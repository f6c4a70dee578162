// SPDX-License-Identifier: Apache-2.0
// The torch.distributed.checkpoint reader: a .metadata pickle built by hand
// (protocol 2: GLOBAL, NEWOBJ and BUILD as Python pickles a dataclass,
// TensorProperties as its 5-tuple state) over data files of hand-made
// torch.save archives; what it catalogues, and its refusals rule by rule,
// each a ModelError naming "torch.distributed.checkpoint".
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "formats/dcp.hpp"
#include "modelfs/error.hpp"
#include "modelfs/formats.hpp"
#include "test_files.hpp"

namespace modelfs {
namespace {

using namespace std::string_literals;
using test::TempDir;

constexpr const char* kMeta = "torch.distributed.checkpoint.metadata";

std::string le32(uint32_t v) {
  std::string s(4, '\0');
  std::memcpy(s.data(), &v, 4);
  return s;
}
std::string u(const std::string& s) { return "X" + le32(static_cast<uint32_t>(s.size())) + s; }
std::string g(const std::string& module, const std::string& name) {
  return "c" + module + "\n" + name + "\n";
}
// A non-negative integer: BININT below 2^31, LONG1 of 8 bytes above.
std::string num(uint64_t v) {
  if (v < (uint64_t{1} << 31)) return "J" + le32(static_cast<uint32_t>(v));
  std::string s = "\x8a\x08"s + std::string(8, '\0');
  std::memcpy(s.data() + 2, &v, 8);
  return s;
}
std::string ints(const std::vector<uint64_t>& v) {
  std::string out = "(";
  for (uint64_t x : v) out += num(x);
  return out + "t";
}
// torch.Size(tuple), as torch reduces it.
std::string size(const std::vector<uint64_t>& v) { return g("torch", "Size") + "(" + ints(v) + "tR"; }
// A dataclass object: NEWOBJ of the class, BUILD of its field dict.
std::string obj(const std::string& module, const std::string& cls, const std::string& fields) {
  return g(module, cls) + ")\x81}(" + fields + "ub";
}
std::string props(const std::string& dtype) {
  return g(kMeta, "TensorProperties") + ")\x81(" + g("torch", dtype) + "N\x89N\x89tb";
}
std::string chunk(const std::vector<uint64_t>& offsets, const std::vector<uint64_t>& sizes) {
  return obj(kMeta, "ChunkStorageMetadata", u("offsets") + size(offsets) + u("sizes") + size(sizes));
}
std::string tensor_meta(const std::string& dtype, const std::vector<uint64_t>& shape,
                        const std::string& chunks) {
  return obj(kMeta, "TensorStorageMetadata",
             u("properties") + props(dtype) + u("size") + size(shape) + u("chunks") + "](" + chunks + "e");
}
std::string index(const std::string& fqn, const std::vector<uint64_t>& offsets) {
  return obj(kMeta, "MetadataIndex", u("fqn") + u(fqn) + u("offset") + size(offsets));
}
std::string info(const std::string& path, uint64_t offset, uint64_t length, const std::string& extra = "") {
  return obj("torch.distributed.checkpoint.filesystem", "_StorageInfo",
             u("relative_path") + u(path) + u("offset") + num(offset) + u("length") + num(length) + extra);
}
std::string metadata(const std::string& entries, const std::string& storage, const std::string& extra = "") {
  return "\x80\x02"s +
         obj(kMeta, "Metadata",
             u("state_dict_metadata") + "}(" + entries + "u" + u("storage_data") + "}(" + storage + "u" +
                 extra) +
         ".";
}

// A torch.save archive of one float32 tensor of `shape` holding `values`.
std::string archive(const std::vector<uint64_t>& shape, const std::vector<float>& values,
                    const std::string& storage_class = "FloatStorage") {
  std::vector<uint64_t> strides(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) strides[d - 1] = strides[d] * shape[d];
  const std::string pickle = "\x80\x02"s + g("torch._utils", "_rebuild_tensor_v2") + "((" + u("storage") +
                             g("torch", storage_class) + u("0") + u("cpu") + num(values.size()) + "tQ" +
                             num(0) + ints(shape) + ints(strides) + "\x89" + g("collections", "OrderedDict") +
                             ")RtR.";
  std::string data(values.size() * 4, '\0');
  std::memcpy(data.data(), values.data(), data.size());
  return test::zip_bytes(
      {{"archive/data.pkl", pickle}, {"archive/data/0", data}, {"archive/version", "3\n"}});
}

// A checkpoint of tensor "w" [4, 2] in two row chunks, one per rank, and
// the archives' places.
struct Checkpoint {
  std::string rank0, rank1;
  std::string entries, storage;
};
Checkpoint two_rows() {
  Checkpoint c;
  c.rank0 = archive({2, 2}, {0, 1, 2, 3});
  c.rank1 = archive({2, 2}, {4, 5, 6, 7});
  c.entries = u("w") + tensor_meta("float32", {4, 2}, chunk({0, 0}, {2, 2}) + chunk({2, 0}, {2, 2}));
  c.storage = index("w", {0, 0}) + info("__0_0.distcp", 0, c.rank0.size()) + index("w", {2, 0}) +
              info("__1_0.distcp", 0, c.rank1.size());
  return c;
}

Catalog open(const TempDir& dir, const std::string& meta, const Checkpoint& c) {
  dir.write("__0_0.distcp", c.rank0);
  dir.write("__1_0.distcp", c.rank1);
  dir.write(".metadata", meta);
  return open_model(dir.path());
}

std::string refusal(const std::string& meta, const Checkpoint& c = two_rows()) {
  TempDir dir;
  try {
    open(dir, meta, c);
  } catch (const ModelError& e) {
    EXPECT_EQ(e.format(), "torch.distributed.checkpoint") << e.what();
    return e.what();
  }
  ADD_FAILURE() << "not refused";
  return "";
}

void expect_refused(const std::string& meta, const std::string& words, const Checkpoint& c = two_rows()) {
  const std::string what = refusal(meta, c);
  EXPECT_NE(what.find(words), std::string::npos) << what;
}

TEST(Dcp, ProbesItsPickleOnly) {
  const std::string meta = metadata("", "");
  EXPECT_TRUE(dcp::probe_file(std::as_bytes(std::span(meta.data(), meta.size()))));
  const std::string other = "\x80\x02" + g("collections", "OrderedDict") + ")R.";
  EXPECT_FALSE(dcp::probe_file(std::as_bytes(std::span(other.data(), other.size()))));
}

TEST(Dcp, RowChunksBecomeBoxPieces) {
  TempDir dir;
  const Checkpoint c = two_rows();
  const Catalog catalog = open(dir, metadata(c.entries, c.storage), c);
  EXPECT_EQ(catalog.format, "torch.distributed.checkpoint");
  ASSERT_EQ(catalog.tensors().size(), 1u);
  const Tensor& t = catalog.tensors()[0];
  EXPECT_EQ(t.name, "w");
  EXPECT_EQ(std::vector<uint64_t>(t.shape.begin(), t.shape.end()), (std::vector<uint64_t>{4, 2}));
  ASSERT_EQ(t.pieces.size(), 2u);
  EXPECT_EQ(t.nbytes(), 32u);
  float second[4];
  std::memcpy(second, t.pieces[1].bytes.span().data(), 16);
  EXPECT_EQ(second[0], 4.0f);
  EXPECT_EQ(t.pieces[1].source.file, "__1_0.distcp");
  EXPECT_EQ((std::vector<std::string>(catalog.files.begin(), catalog.files.end())),
            (std::vector<std::string>{".metadata", "__0_0.distcp", "__1_0.distcp"}));
}

TEST(Dcp, OneChunkIsServedInPlace) {
  TempDir dir;
  Checkpoint c = two_rows();
  c.entries = u("w") + tensor_meta("float32", {2, 2}, chunk({0, 0}, {2, 2}));
  c.storage = index("w", {0, 0}) + info("__1_0.distcp", 0, c.rank1.size());
  const Catalog catalog = open(dir, metadata(c.entries, c.storage), c);
  const Tensor& t = catalog.tensors()[0];
  EXPECT_TRUE(t.pieces.empty());
  EXPECT_EQ(t.bytes.mapped_file() != nullptr, true);
  EXPECT_EQ(t.source.file, "__1_0.distcp");
}

TEST(Dcp, RefusesOverlapAndHole) {
  const Checkpoint c = two_rows();
  expect_refused(
      metadata(u("w") + tensor_meta("float32", {4, 2}, chunk({0, 0}, {2, 2}) + chunk({0, 0}, {2, 2})),
               c.storage),
      "DCP chunks overlap in tensor \"w\"");
  expect_refused(
      metadata(u("w") + tensor_meta("float32", {4, 2}, chunk({0, 0}, {3, 2}) + chunk({2, 0}, {2, 2})),
               c.storage),
      "DCP chunks overlap in tensor \"w\"");
  expect_refused(
      metadata(u("w") + tensor_meta("float32", {4, 2}, chunk({0, 0}, {1, 2}) + chunk({2, 0}, {2, 2})),
               c.storage),
      "DCP chunks leave a hole in tensor \"w\"");
}

TEST(Dcp, RefusesChunksOutsideTheTensor) {
  const Checkpoint c = two_rows();
  expect_refused(metadata(u("w") + tensor_meta("float32", {4, 2}, chunk({2, 0}, {3, 2})), c.storage),
                 "outside the tensor's size");
  expect_refused(
      metadata(u("w") + tensor_meta("float32", {4, 2}, chunk({0, 0}, {uint64_t{1} << 62, 2})), c.storage),
      "outside the tensor's size");
  expect_refused(metadata(u("w") + tensor_meta("float32", {4, 2}, chunk({0}, {4})), c.storage),
                 "not of the tensor's 2 dimensions");
  expect_refused(
      metadata(u("w") + tensor_meta("float32", {uint64_t{1} << 62, 8}, chunk({0, 0}, {1, 1})), c.storage),
      "more bytes than 2^64");
}

TEST(Dcp, RefusesBadStorageRecords) {
  const Checkpoint c = two_rows();
  expect_refused(metadata(c.entries, index("w", {0, 0}) + info("__0_0.distcp", 0, c.rank0.size())),
                 "chunk 1 of tensor \"w\" has no storage_data record");
  expect_refused(metadata(c.entries, c.storage + index("w", {0, 0}) + info("__0_0.distcp", 0, 1)),
                 "is listed twice");
  expect_refused(metadata(c.entries, index("w", {0, 0}) + info("../__0_0.distcp", 0, c.rank0.size()) +
                                         index("w", {2, 0}) + info("__1_0.distcp", 0, c.rank1.size())),
                 "not a file inside the checkpoint's folder");
  expect_refused(metadata(c.entries, index("w", {0, 0}) + info("/etc/passwd", 0, c.rank0.size()) +
                                         index("w", {2, 0}) + info("__1_0.distcp", 0, c.rank1.size())),
                 "not a file inside the checkpoint's folder");
  expect_refused(metadata(c.entries, index("w", {0, 0}) + info("__0_0.distcp", 0, c.rank0.size() + 1) +
                                         index("w", {2, 0}) + info("__1_0.distcp", 0, c.rank1.size())),
                 "runs past the end of __0_0.distcp");
  expect_refused(metadata(c.entries, index("w", {0, 0}) + info("__0_0.distcp", 1, c.rank0.size() - 1) +
                                         index("w", {2, 0}) + info("__1_0.distcp", 0, c.rank1.size())),
                 "is not a torch.save archive of one tensor");
  expect_refused(metadata(c.entries, index("w", {0, 0}) +
                                         info("__0_0.distcp", 0, c.rank0.size(),
                                              u("transform_descriptors") + "](" + u("stream.zstd/1") + "e") +
                                         index("w", {2, 0}) + info("__1_0.distcp", 0, c.rank1.size())),
                 "transform descriptors");
  expect_refused(metadata(c.entries, index("w", {0, 0}) + info("missing.distcp", 0, 10) + index("w", {2, 0}) +
                                         info("__1_0.distcp", 0, c.rank1.size())),
                 "data file \"missing.distcp\"");
}

TEST(Dcp, RefusesArchivesThatDisagree) {
  Checkpoint c = two_rows();
  expect_refused(
      metadata(u("w") + tensor_meta("float64", {4, 2}, chunk({0, 0}, {2, 2}) + chunk({2, 0}, {2, 2})),
               c.storage),
      "is stored as float32, but the metadata says float64");
  Checkpoint reshaped = c;
  reshaped.rank1 = archive({1, 4}, {4, 5, 6, 7});
  reshaped.storage = index("w", {0, 0}) + info("__0_0.distcp", 0, c.rank0.size()) + index("w", {2, 0}) +
                     info("__1_0.distcp", 0, reshaped.rank1.size());
  expect_refused(metadata(c.entries, reshaped.storage), "stored with shape [1, 4], but its sizes are [2, 2]",
                 reshaped);
  expect_refused(metadata(u("w") + tensor_meta("qint8", {4, 2}, chunk({0, 0}, {4, 2})), c.storage),
                 "torch.qint8, which modelfs does not serve");
}

TEST(Dcp, RefusesUnknownClassesAndShapes) {
  const Checkpoint c = two_rows();
  expect_refused(
      metadata(c.entries, c.storage, u("planner_data") + g("os", "system") + "(" + u("true") + "tR"),
      "the pickle names os.system");
  {
    // Not probed as DCP's (its first class is not Metadata): read as one.
    TempDir dir;
    try {
      dcp::open_file(
          ModelFile::open(dir.write(".metadata", "\x80\x02" + obj(kMeta, "StorageMeta", "") + ".")));
      ADD_FAILURE() << "not refused";
    } catch (const ModelError& e) {
      EXPECT_NE(std::string(e.what()).find("the pickle's top object is not a Metadata"), std::string::npos)
          << e.what();
    }
  }
  expect_refused(metadata(u("w") + obj(kMeta, "ChunkStorageMetadata", ""), c.storage),
                 "neither a TensorStorageMetadata nor a BytesStorageMetadata");
  expect_refused(metadata(c.entries, u("x") + u("y")), "a storage_data key is not a MetadataIndex");
  expect_refused(metadata(u("w") + obj(kMeta, "TensorStorageMetadata", u("size") + size({4})), c.storage),
                 "properties is not a TensorProperties");
  expect_refused(metadata(c.entries, c.storage).substr(0, 60), "torch.distributed.checkpoint");
}

TEST(Dcp, ReadsTheOlderTensorPropertiesAsADict) {
  // Before torch ~2.3, TensorProperties was the sharded-tensor package's,
  // a dataclass whose state may be its field dict.
  TempDir dir;
  Checkpoint c = two_rows();
  const std::string old_props = obj("torch.distributed._shard.sharded_tensor.metadata", "TensorProperties",
                                    u("dtype") + g("torch", "float") + u("requires_grad") + "\x89");
  c.entries = u("w") + obj(kMeta, "TensorStorageMetadata",
                           u("properties") + old_props + u("size") + size({4, 2}) + u("chunks") + "](" +
                               chunk({0, 0}, {2, 2}) + chunk({2, 0}, {2, 2}) + "e");
  const Catalog catalog = open(dir, metadata(c.entries, c.storage), c);
  ASSERT_EQ(catalog.tensors().size(), 1u);
  EXPECT_EQ(catalog.tensors()[0].dtype, DType::Float32);
}

TEST(Dcp, ListsBytesEntries) {
  TempDir dir;
  Checkpoint c = two_rows();
  const std::string entries = c.entries + u("extra") + obj(kMeta, "BytesStorageMetadata", "");
  const std::string storage = c.storage +
                              obj(kMeta, "MetadataIndex", u("fqn") + u("extra") + u("offset") + "N") +
                              info("__1_0.distcp", 3, 5);
  const Catalog catalog = open(dir, metadata(entries, storage), c);
  EXPECT_EQ(catalog.tensors().size(), 1u);
  EXPECT_EQ(catalog.metadata["bytes_entries"][0]["fqn"], "extra");
  EXPECT_EQ(catalog.metadata["bytes_entries"][0]["offset"], 3);
  EXPECT_EQ(catalog.metadata["dcp"]["counts"]["bytes_entries"], 1);
  const std::string past = c.storage +
                           obj(kMeta, "MetadataIndex", u("fqn") + u("extra") + u("offset") + "N") +
                           info("__1_0.distcp", 3, c.rank1.size());
  expect_refused(metadata(entries, past), "bytes entry \"extra\": its slice [3, +");
  expect_refused(metadata(c.entries + c.entries, c.storage), "state_dict_metadata lists \"w\" twice");
}

}  // namespace
}  // namespace modelfs
