// SPDX-License-Identifier: Apache-2.0
// The PaddlePaddle readers: programs and tensor streams written here by
// hand from framework.proto's field numbers and the stream layout
// (docs/formats.md, "PaddlePaddle"), a .pdparams pickle made by Python's
// pickle (protocol 2), what the catalog holds of them, and the refusals
// rule by rule, each a ModelError naming "PaddlePaddle".
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "formats/paddle.hpp"
#include "modelfs/error.hpp"
#include "modelfs/formats.hpp"
#include "modelfs/mapped_file.hpp"
#include "test_files.hpp"
#include "tree/numeric_views.hpp"

namespace modelfs {
namespace {

using test::pb_bytes;
using test::pb_uint;
using test::TempDir;

struct Param {
  std::string name;
  uint64_t code = 5;  // FP32
  std::vector<int64_t> dims;
  std::string data;
};

std::string desc(uint64_t code, const std::vector<int64_t>& dims) {
  std::string out = pb_uint(1, code);
  for (int64_t d : dims) out += pb_uint(2, static_cast<uint64_t>(d));
  return out;
}

std::string var(const std::string& name, uint64_t type, bool persistable, const Param* p = nullptr) {
  std::string vtype = pb_uint(1, type);
  if (p != nullptr) vtype += pb_bytes(3, pb_bytes(1, desc(p->code, p->dims)) + pb_uint(2, 0));
  return pb_bytes(1, name) + pb_bytes(2, vtype) + pb_uint(3, persistable ? 1 : 0);
}

std::string program(const std::vector<Param>& params) {
  std::string block = pb_uint(1, 0) + pb_uint(2, ~uint64_t{0});
  block += pb_bytes(3, var("feed", 9, true)) + pb_bytes(3, var("fetch", 10, true));
  block += pb_bytes(3, var("activation", 7, false));
  for (const Param& p : params) block += pb_bytes(3, var(p.name, 7, true, &p));
  return pb_bytes(1, block);
}

template <typename T>
void put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof value);
}

std::string stream(const Param& p, uint32_t version = 0, uint64_t lod = 0) {
  std::string out;
  put<uint32_t>(out, version);
  put<uint64_t>(out, lod);
  for (uint64_t i = 0; i < lod; ++i) {
    put<uint64_t>(out, 8);
    put<uint64_t>(out, 0);
  }
  put<uint32_t>(out, 0);
  const std::string d = desc(p.code, p.dims);
  put<int32_t>(out, static_cast<int32_t>(d.size()));
  return out + d + p.data;
}

std::vector<Param> params() {
  std::string w(24, '\0'), b(8, '\0');
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<char>(i * 7);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<char>(0x80 + i);
  return {{"fc_0.w_0", 5, {2, 3}, w}, {"fc_0.b_0", 3, {1}, b}};
}

std::string combined(const std::vector<Param>& ps) {  // sorted by name
  std::map<std::string, const Param*> sorted;
  for (const Param& p : ps) sorted[p.name] = &p;
  std::string out;
  for (const auto& [_, p] : sorted) out += stream(*p);
  return out;
}

std::string refusal(const std::filesystem::path& model) {
  try {
    open_model(model);
  } catch (const ModelError& e) {
    EXPECT_EQ(e.format(), "PaddlePaddle") << e.what();
    return e.reason();
  }
  ADD_FAILURE() << "accepted";
  return {};
}

TEST(Paddle, CombinedStreamsAreNamedInSortedOrder) {
  TempDir dir;
  const auto ps = params();
  const std::string data = combined(ps);
  dir.write("m.pdiparams", data);
  const auto model = dir.write("m.pdmodel", program(ps));
  const Catalog catalog = open_model(model);
  ASSERT_EQ(catalog.tensors().size(), 2u);
  const Tensor& b = catalog.tensors()[0];
  const Tensor& w = catalog.tensors()[1];
  EXPECT_EQ(b.name, "fc_0.b_0");
  EXPECT_EQ(b.dtype, DType::Int64);
  EXPECT_EQ(w.name, "fc_0.w_0");
  EXPECT_EQ(w.dtype, DType::Float32);
  EXPECT_EQ(test::vec(w.shape), (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(b.bytes.view(), ps[1].data);
  EXPECT_EQ(w.bytes.view(), ps[0].data);
  EXPECT_EQ(*w.source.offset, data.size() - ps[0].data.size());
  EXPECT_EQ(w.source.file, "m.pdiparams");
  EXPECT_EQ(catalog.metadata["parameters"], "combined");
}

TEST(Paddle, SeparateFilesAreOnePerVarAndOthersAreNotRead) {
  TempDir dir;
  const auto ps = params();
  for (const Param& p : ps) dir.write(p.name, stream(p, 0, 2));
  dir.write("fc_9.w_0", "stale: not a stream");
  const auto model = dir.write("__model__", program(ps));
  const Catalog catalog = open_model(model);
  ASSERT_EQ(catalog.tensors().size(), 2u);
  EXPECT_EQ(catalog.tensors()[0].name, "fc_0.w_0");  // program order
  EXPECT_EQ(catalog.tensors()[0].bytes.view(), ps[0].data);
  EXPECT_EQ(catalog.tensors()[1].source.file, "fc_0.b_0");
  EXPECT_EQ(catalog.metadata["parameters"], "separate");
}

TEST(Paddle, RefusalsNameTheFormat) {
  auto ps = params();
  const std::string good = combined(ps);
  struct Case {
    std::string what, params, reason;
    std::vector<Param> declared;
  };
  Param lying = ps[0];
  lying.dims = {2, 300};
  Param negative = ps[0];
  negative.dims = {-2, 3};
  Param unknown = ps[0];
  unknown.code = 99;
  std::vector<Param> other = ps;
  other[0].dims = {3, 2};
  std::vector<Param> unknown_dims = ps;  // -1: the stream's dims are taken
  unknown_dims[0].dims = {-1, -1};
  const std::vector<Case> cases = {
      {"truncated", good.substr(0, good.size() - 3), "remain", ps},
      {"extra stream", good + stream(ps[1]), "more streams than vars", ps},
      {"missing stream", stream(ps[1]), "ends after 1 of the 2 tensor streams", ps},
      {"dims lie", stream(ps[1]) + stream(lying), "needs 2400 bytes of data", unknown_dims},
      {"dims differ", stream(ps[1]) + stream(lying), "but the program declares", ps},
      {"negative dim", stream(ps[1]) + stream(negative), "dims [-2, 3]", ps},
      {"unknown type", stream(ps[1]) + stream(unknown), "unknown data type 99", ps},
      {"version", stream(ps[1], 1) + stream(ps[0]), "version 1", ps},
      {"declared otherwise", good, "but the program declares", other},
  };
  for (const Case& c : cases) {
    TempDir dir;
    dir.write("m.pdiparams", c.params);
    const auto model = dir.write("m.pdmodel", program(c.declared));
    EXPECT_NE(refusal(model).find(c.reason), std::string::npos) << c.what << ": " << refusal(model);
  }
  TempDir missing;
  missing.write("fc_0.w_0", stream(ps[0]));
  EXPECT_NE(refusal(missing.write("__model__", program(ps))).find("\"fc_0.b_0\""), std::string::npos);
  TempDir trailing;
  trailing.write("fc_0.w_0", stream(ps[0]));
  trailing.write("fc_0.b_0", stream(ps[1]) + "x");
  EXPECT_NE(refusal(trailing.write("__model__", program(ps))).find("1 bytes after"), std::string::npos);
  TempDir cut;
  EXPECT_FALSE(refusal(cut.write("m.pdmodel", program(ps).substr(0, 30))).empty());
}

TEST(Paddle, ProbesTellProgramsAndStateDictsFromTheirNeighbours) {
  const std::string prog = program(params());
  const auto bytes = [](const std::string& s) { return std::as_bytes(std::span(s.data(), s.size())); };
  EXPECT_TRUE(paddle::probe_program(bytes(prog)));
  EXPECT_FALSE(paddle::probe_program(bytes(pb_uint(1, 7) + prog)));  // ONNX: ir_version first
  EXPECT_FALSE(paddle::probe_program(bytes(std::string("\x0a\x05\x08\x01\x10\x00", 6))));
  using namespace std::string_literals;
  const std::string state = "\x80\x02}q\x00(X\x01\x00\x00\x00wcnumpy.core.multiarray\n_reconstruct\n"s;
  EXPECT_TRUE(paddle::probe_pdparams(bytes(state)));
  const std::string torch_legacy = "\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19";
  EXPECT_FALSE(paddle::probe_pdparams(bytes(torch_legacy + "numpy.core.multiarray _reconstruct")));
  EXPECT_FALSE(paddle::probe_pdparams(bytes("\x80\x02}q\x00(X\x01\x00\x00\x00w"s)));
}

// pickle.dumps({"w": np.array([1.0, -2.5, 3e-7], np.float32), "n": {"a": "b"}}, protocol=2)
constexpr std::string_view kStateDictHex =
    "80027d7100285801000000777101636e756d70792e636f72652e6d756c746961727261790a5f7265636f6e7374727563740a71"
    "02636e756d70790a6e6461727261790a71034b00857104635f636f646563730a656e636f64650a71055801000000627106580600"
    "00006c6174696e31710786710852710987710a52710b284b014b0385710c636e756d70790a64747970650a710d58020000006634"
    "710e898887710f527110284b0358010000003c71114e4e4e4affffffff4affffffff4b007471126289680558100000000000c280"
    "3f000020c380c2b00fc2a134711368078671145271157471166258010000006e71177d71185801000000617119580100000062"
    "711a73752e";

std::string unhex(std::string_view hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
  return out;
}

TEST(Paddle, Protocol2ArraysAreDecodedPerRead) {
  TempDir dir;
  const std::string pickled = unhex(kStateDictHex);
  const auto path = dir.write("m.pdparams", pickled);
  const Catalog catalog = open_model(path);
  ASSERT_EQ(catalog.tensors().size(), 1u);
  const Tensor& w = catalog.tensors()[0];
  EXPECT_EQ(w.name, "w");
  ASSERT_NE(w.encoded, nullptr);
  EXPECT_EQ(w.encoded->method, Encoded::Method::Latin1Utf8);
  EXPECT_EQ(w.nbytes(), 12u);
  EXPECT_EQ(w.bytes.size(), 16u);  // four bytes >= 0x80, two each
  EXPECT_EQ(catalog.metadata["not_tensors"][0]["name"], "n");
  const auto view = Latin1View::make(w.bytes, 12);
  ASSERT_NE(view, nullptr);
  const std::string want = unhex("0000803f000020c0b00fa134");
  ReadScope scope(ReadScope::Kind::Copied);
  for (uint64_t start = 0; start < 12; ++start)
    for (uint64_t end = start + 1; end <= 12; ++end) {
      std::string got(end - start, '\0');
      view->read(start, std::as_writable_bytes(std::span(got.data(), got.size())), scope);
      EXPECT_EQ(got, want.substr(start, end - start)) << start << ".." << end;
    }
  EXPECT_EQ(Latin1View::make(w.bytes, 11), nullptr);  // the text stands for 12 bytes
  // A text past the view's marks: 40 000 bytes, each >= 0x80 every third.
  std::string raw(40'000, '\0'), text;
  for (size_t i = 0; i < raw.size(); ++i) {
    raw[i] = static_cast<char>(i % 3 == 0 ? 0x80 + i % 64 : i % 128);
    const auto c = static_cast<unsigned char>(raw[i]);
    if (c < 0x80) {
      text.push_back(static_cast<char>(c));
    } else {
      text.push_back(static_cast<char>(0xC0 | (c >> 6)));
      text.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    }
  }
  const auto big = Latin1View::make(ByteSpan::owned(text), raw.size());
  ASSERT_NE(big, nullptr);
  for (const auto& [start, length] : std::vector<std::pair<uint64_t, uint64_t>>{
           {0, 40'000}, {16'383, 2}, {16'384, 1}, {32'767, 7'233}, {12'345, 20'000}}) {
    std::string got(length, '\0');
    big->read(start, std::as_writable_bytes(std::span(got.data(), got.size())), scope);
    EXPECT_EQ(got, raw.substr(start, length)) << start;
  }
  text[5] = '\xE2';  // not a latin-1 character
  EXPECT_EQ(Latin1View::make(ByteSpan::owned(text), raw.size()), nullptr);
}

TEST(Paddle, StateDictRefusals) {
  std::string pickled = unhex(kStateDictHex);
  TempDir dir;
  // The shape says 4 elements: the text stands for 12 bytes, not 16.
  std::string shape = pickled;
  shape.replace(shape.find(std::string("K\x01K\x03\x85", 5)), 5, std::string("K\x01K\x04\x85", 5));
  EXPECT_NE(refusal(dir.write("shape.pdparams", shape)).find("stands for 12 bytes"), std::string::npos);
  // A character above U+00FF in the text (same length).
  std::string text = pickled;
  text.replace(text.find(std::string("\xc2\x80", 2)), 2, std::string("\xc4\x80", 2));
  EXPECT_NE(refusal(dir.write("text.pdparams", text)).find("not latin-1"), std::string::npos);
  // Not a dict (the probe wants one first; the reader says so too).
  const auto list = dir.write("list.pdparams", std::string("\x80\x02]q\x00.", 6));
  try {
    paddle::open_pdparams(ModelFile::open(list));
    ADD_FAILURE() << "accepted";
  } catch (const ModelError& e) {
    EXPECT_NE(e.reason().find("not a dict"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace modelfs
