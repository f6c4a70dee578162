// SPDX-License-Identifier: Apache-2.0
// The legacy GGML reader: hand-made files of each program's layout (whisper,
// Silero VAD, Parakeet, llama.cpp unversioned/ggmf/ggjt, rwkv.cpp), read
// into catalogs (names, dtypes, shapes, offsets: ggjt's on 32-byte
// boundaries, rwkv.cpp's codes mapped), and the refusals rule by rule, each a
// ModelError naming "ggml" and the offset of the bad field.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "formats/ggml_legacy.hpp"
#include "modelfs/error.hpp"
#include "test_files.hpp"

namespace modelfs {
namespace {

using test::TempDir;

// Bytes written field by field, as the programs lay them out: each number
// little-endian at its type's width, text as it is.
class Bytes {
 public:
  explicit Bytes(std::string_view magic) : bytes_(magic) {}
  template <typename... Fields>
  Bytes& put(const Fields&... fields) {
    (append(fields), ...);
    return *this;
  }
  Bytes& zeros(size_t n) { return put(std::string(n, '\0')); }
  // A record: ne fastest first, then `data` zero bytes (ggjt: padded first).
  Bytes& record(std::string_view name, int32_t type, const std::vector<int32_t>& ne, size_t data,
                bool aligned = false) {
    put(static_cast<int32_t>(ne.size()), static_cast<int32_t>(name.size()), type);
    for (int32_t d : ne) put(d);
    put(name);
    if (aligned) zeros((32 - bytes_.size() % 32) % 32);
    return zeros(data);
  }
  size_t size() const { return bytes_.size(); }
  const std::string& str() const { return bytes_; }

 private:
  void append(std::string_view text) { bytes_.append(text); }
  void append(const std::string& text) { bytes_.append(text); }
  void append(const char* text) { bytes_.append(text); }
  template <typename T>
  requires std::is_arithmetic_v<T>
  void append(T value) {
    std::array<char, sizeof(T)> raw;
    std::memcpy(raw.data(), &value, sizeof(T));
    bytes_.append(raw.data(), raw.size());
  }

  std::string bytes_;
};

Bytes whisper_header(int32_t ftype = 1) {
  Bytes b("lmgg");
  for (int i = 0; i < 10; ++i) b.put(i == 0 ? 2 : 4);
  b.put(ftype, 2, 3).zeros(2 * 3 * 4).put(2);  // hparams, 2 x 3 filters, 2 tokens
  return b.put(1, "a", 2, "bc");
}

Bytes silero_header() {
  Bytes b("lmgg");
  b.put(10, "silero-16k", 6, 2, 0, 512, 64, 1);
  return b.put(129, 128, 3, 128, 128, 128, 1);
}

Bytes parakeet_header() {
  Bytes b("lmgg");
  const int32_t hp[15] = {2, 3200, 8, 2, 1, 16, 0, 64, 8, 4, 3, 8, 1, 2, 5};
  for (int32_t v : hp) b.put(v);
  b.put(2, 2).zeros(16).put(3).zeros(12).put(0, 1);  // filters, window, 2 durations
  return b.put(2, 1, "x", 1, "y");
}

Bytes llama_header(std::string_view magic, uint32_t version) {
  Bytes b(magic);
  if (magic != "lmgg") b.put(version);
  b.put(2, 64, 256, 2, 1, 32, 1);
  for (std::string_view token : {"<s>", "a"}) {
    b.put(static_cast<uint32_t>(token.size()), token);
    if (magic != "lmgg") b.put(0.5f);
  }
  return b;
}

Bytes rwkv_header(uint32_t version) { return Bytes("fmgg").put(version, 256, 64, 1, 7); }

Catalog open_bytes(const TempDir& dir, const std::string& bytes) {
  return ggml_legacy::open_file(ModelFile::open(dir.write("model.bin", bytes)));
}

// The refusal of `bytes`: a ModelError in "ggml" whose reason holds `words`.
ModelError refusal(const std::string& bytes, std::string_view words) {
  TempDir dir;
  try {
    open_bytes(dir, bytes);
  } catch (const ModelError& e) {
    EXPECT_EQ(e.format(), "ggml");
    EXPECT_NE(e.reason().find(words), std::string::npos) << e.reason();
    return e;
  }
  ADD_FAILURE() << "not refused: " << words;
  return ModelError("", "", std::nullopt, "");
}

TEST(GgmlLegacy, ProbesTheThreeMagics) {
  for (std::string_view magic : {"lmgg", "fmgg", "tjgg"})
    EXPECT_TRUE(ggml_legacy::probe_file(std::as_bytes(std::span(magic.data(), magic.size()))));
  const std::string_view gguf = "GGUF";
  EXPECT_FALSE(ggml_legacy::probe_file(std::as_bytes(std::span(gguf.data(), gguf.size()))));
}

TEST(GgmlLegacy, WhisperRecordsInPlaceUnaligned) {
  Bytes b = whisper_header();
  const size_t first = b.size();
  b.record("encoder.conv1.weight", 1, {3, 3, 4}, 72).record("scale", 0, {}, 4);
  TempDir dir;
  Catalog c = open_bytes(dir, b.str());
  ASSERT_EQ(c.tensors().size(), 2u);
  const Tensor& w = c.tensors()[0];
  EXPECT_EQ(w.name, "encoder.conv1.weight");
  EXPECT_EQ(w.dtype, DType::Float16);
  EXPECT_EQ(test::vec(w.shape), (std::vector<uint64_t>{4, 3, 3}));
  EXPECT_EQ(w.source.offset, first + 12 + 12 + 20);
  EXPECT_EQ(c.tensors()[1].shape.size(), 0u);
  EXPECT_EQ(c.metadata["ggml"]["layout"], "whisper");
  EXPECT_EQ(c.metadata["vocab_size"], 2);
  EXPECT_EQ(c.metadata["not_tensors"].size(), 1u);
}

TEST(GgmlLegacy, RecordsStartingAtTheEndAreAModelWithoutTensors) {
  TempDir dir;
  for (const Bytes& b :
       {whisper_header(), llama_header("fmgg", 1), llama_header("tjgg", 1), rwkv_header(101)}) {
    Catalog c = open_bytes(dir, b.str());
    EXPECT_TRUE(c.tensors().empty());
    EXPECT_EQ(c.metadata["ggml"]["records_offset"], b.size());
  }
}

TEST(GgmlLegacy, EachGgmlLayoutIsToldApart) {
  TempDir dir;
  EXPECT_EQ(open_bytes(dir, silero_header().record("w", 1, {3, 2}, 12).str()).metadata["ggml"]["layout"],
            "silero_vad");
  EXPECT_EQ(
      open_bytes(dir, parakeet_header().record("w", 0, {1, 1, 1, 2}, 8).str()).metadata["ggml"]["layout"],
      "parakeet");
  EXPECT_EQ(open_bytes(dir, llama_header("lmgg", 0).record("w", 0, {4}, 16).str()).metadata["ggml"]["layout"],
            "llama");
}

TEST(GgmlLegacy, GgjtDataOnThirtyTwoByteBoundaries) {
  Bytes b = llama_header("tjgg", 3);
  b.record("tok_embeddings.weight", 2, {64, 2}, 4 * 18, true).record("norm", 0, {3}, 12, true);
  TempDir dir;
  Catalog c = open_bytes(dir, b.str());
  ASSERT_EQ(c.tensors().size(), 2u);
  for (const Tensor& t : c.tensors()) EXPECT_EQ(*t.source.offset % 32, 0u) << t.name;
  EXPECT_EQ(c.tensors()[0].dtype, DType::GgmlBlock);
  EXPECT_EQ(c.tensors()[0].ggml->name, "q4_0");
}

TEST(GgmlLegacy, RwkvCodesAreItsOwn) {
  Bytes b = rwkv_header(101);
  b.record("a", 7, {32}, 22).record("b", 8, {32}, 24).record("c", 9, {32}, 34);
  TempDir dir;
  Catalog c = open_bytes(dir, b.str());
  ASSERT_EQ(c.tensors().size(), 3u);
  EXPECT_EQ(c.tensors()[0].ggml->name, "q5_0");
  EXPECT_EQ(c.tensors()[1].ggml->name, "q5_1");
  EXPECT_EQ(c.tensors()[2].ggml->name, "q8_0");
  refusal(rwkv_header(101).record("a", 5, {32}, 20).str(), "type code 5 is none of rwkv.cpp's");
  refusal(llama_header("tjgg", 3).record("a", 4, {32}, 20, true).str(), "q4_2 and q4_3 were removed");
  refusal(llama_header("tjgg", 3).record("a", -1, {32}, 20, true).str(), "type code -1 is no ggml_type");
}

TEST(GgmlLegacy, BlocksOlderThanGgmlsLayoutsAreRefused) {
  refusal(rwkv_header(100).record("a", 7, {32}, 22).str(), "version 100");
  refusal(llama_header("tjgg", 1).record("a", 2, {32}, 18, true).str(), "older than ggml's");
  refusal(llama_header("fmgg", 1).record("a", 2, {32}, 18).str(), "older than ggml's");
  refusal(whisper_header(8).record("a", 6, {32}, 22).str(), "quantization version 0");
  TempDir dir;
  EXPECT_EQ(open_bytes(dir, whisper_header(2008).record("a", 6, {32}, 22).str()).tensors().size(), 1u);
}

TEST(GgmlLegacy, RecordRefusals) {
  const size_t at = whisper_header().size();
  EXPECT_EQ(refusal(whisper_header().record("a", 0, {1, 1, 1, 1, 1}, 4).str(), "n_dims is 5").offset(), at);
  refusal(llama_header("fmgg", 1).record("a", 0, {1, 1, 1}, 4).str(), "n_dims is 3");
  refusal(rwkv_header(101).put(1, 60000, 0, 1, "a").str(), "name of 60000 bytes");
  refusal(rwkv_header(101).put(1, 70000, 0, 1, "a").str(), "name length 70000");
  refusal(rwkv_header(101).record("a", 0, {-1}, 0).str(), "dimension -1 is negative");
  refusal(rwkv_header(101).record("a", 2, {33}, 18).str(), "not a multiple");
  refusal(rwkv_header(101).record("a", 0, {4}, 15).str(), "run past the end");
  refusal(rwkv_header(101).record("a", 0, {4}, 16).record("a", 0, {1}, 4).str(), "stored twice");
  refusal(rwkv_header(101).record("a", 0, {4}, 16).zeros(3).str(), "needs 4 bytes");
  refusal(llama_header("tjgg", 3).record("a", 0, {4}, 0, true).str(), "run past the end");
}

TEST(GgmlLegacy, HeaderRefusals) {
  refusal(Bytes("fmgg").put(7).zeros(32).str(), "'ggmf' version 7");
  refusal(Bytes("tjgg").put(0).zeros(32).str(), "'ggjt' version 0");
  refusal(Bytes("fmgg").put(1, 1000000).zeros(40).str(), "n_vocab 1000000 cannot fit");
  refusal(Bytes("lmgg").zeros(8).str(), "none of the layouts");
  // Bytes after a whisper header that are no record: the nearest layout's reason, at its offset.
  const ModelError after = refusal(whisper_header().zeros(12).str(), "name length 0");
  EXPECT_EQ(after.offset(), whisper_header().size() + 4);
}

}  // namespace
}  // namespace modelfs
