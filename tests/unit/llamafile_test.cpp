// SPDX-License-Identifier: Apache-2.0
// The llamafile reader: the GGUF member parsed over its range of the file
// (tensors in place, alignment from the member's first byte, its bounds the
// member's, not the file's), the other members as documents, several GGUFs,
// and the refusals: a compressed GGUF, a ZIP without one, a probe that finds
// no end record.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "formats/llamafile.hpp"
#include "modelfs/error.hpp"
#include "modelfs/formats.hpp"
#include "test_files.hpp"
#include "test_refusal.hpp"

namespace modelfs {
namespace {

using test::TempDir;
using test::ZipEntry;
using test::ZipLayout;

template <typename T>
void put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof value);
}

// A GGUF v3 with one float32 tensor "w" of 4 values (1, 2, 3, 4), no
// key-values, its data at the next multiple of 32 from its first byte.
std::string gguf() {
  std::string out = "GGUF";
  put<uint32_t>(out, 3);
  put<uint64_t>(out, 1);  // tensors
  put<uint64_t>(out, 0);  // key-values
  put<uint64_t>(out, 1);
  out += "w";
  put<uint32_t>(out, 1);
  put<uint64_t>(out, 4);
  put<uint32_t>(out, 0);  // f32
  put<uint64_t>(out, 0);
  out.resize((out.size() + 31) / 32 * 32, '\0');
  for (float v : {1.0f, 2.0f, 3.0f, 4.0f}) put<float>(out, v);
  return out;
}

std::string values() {
  std::string out;
  for (float v : {1.0f, 2.0f, 3.0f, 4.0f}) put<float>(out, v);
  return out;
}

std::string refusal(const std::filesystem::path& model) { return test::refusal_message(model); }

TEST(Llamafile, GgufMemberIsServedInPlaceWithItsMembersAsDocuments) {
  TempDir dir;
  // No alignment padding: the GGUF starts at an offset that is no multiple
  // of 32, and its data section is still 32-aligned from its own start.
  const std::string zip =
      test::zip_bytes({{"model.gguf", gguf()}, {".args", "-m\nmodel.gguf\n"}}, ZipLayout{.alignment = 0});
  const auto model = dir.write("m.llamafile", zip);
  const Catalog catalog = open_model(model);
  EXPECT_EQ(catalog.format, "llamafile");
  ASSERT_EQ(catalog.tensors().size(), 1u);
  const Tensor& w = catalog.tensors()[0];
  EXPECT_EQ(w.name, "w");
  EXPECT_EQ(w.bytes.view(), values());
  const uint64_t gguf_at = zip.find("GGUF");
  EXPECT_NE(gguf_at % 32, 0u);
  EXPECT_EQ(w.source.offset, gguf_at + 64);
  EXPECT_EQ(catalog.metadata["llamafile"]["gguf_offset"], gguf_at);
  EXPECT_EQ(catalog.metadata["gguf"]["data_offset"], 64);
  ASSERT_EQ(catalog.documents.size(), 1u);
  EXPECT_EQ(catalog.documents[0].path, "llamafile/.args");
  EXPECT_EQ(catalog.documents[0].content, "-m\nmodel.gguf\n");
}

TEST(Llamafile, SeveralGgufsAreEachUnderTheirStem) {
  TempDir dir;
  const auto model = dir.write(
      "m.llamafile", test::zip_bytes({{"a.gguf", gguf()}, {"b.GGUF", gguf()}}, ZipLayout{.zip64 = true}));
  const Catalog catalog = open_model(model);
  ASSERT_EQ(catalog.tensors().size(), 2u);
  EXPECT_EQ(catalog.tensors()[0].name, "a/w");
  EXPECT_EQ(catalog.tensors()[1].name, "b/w");
  EXPECT_EQ(catalog.tensors()[1].bytes.view(), values());
  EXPECT_EQ(catalog.export_hints.models.size(), 2u);
}

TEST(Llamafile, CompressedGgufIsRefused) {
  TempDir dir;
  const auto model = dir.write(
      "m.llamafile", test::zip_bytes({{"model.gguf", gguf(), ZipArchive::kDeflated}, {".args", "x"}}));
  const std::string why = refusal(model);
  EXPECT_NE(why.find("model.gguf is compressed (deflate)"), std::string::npos) << why;
}

TEST(Llamafile, GgufEndsAtItsMemberNotAtTheFile) {
  TempDir dir;
  // The tensor's bytes lie past the member's end, inside the next member:
  // refused, never served from the neighbour.
  std::string short_gguf = gguf();
  short_gguf.resize(short_gguf.size() - 8);
  const auto model = dir.write(
      "m.llamafile", test::zip_bytes({{"model.gguf", short_gguf}, {".args", std::string(64, 'x')}}));
  const std::string why = refusal(model);
  EXPECT_NE(why.find("past the end of the file"), std::string::npos) << why;
  EXPECT_NE(why.find("llamafile"), std::string::npos) << why;
}

TEST(Llamafile, ProbeFindsTheEndRecordBehindAnExecutable) {
  TempDir dir;
  const std::string zip = test::zip_bytes({{".args", "x"}});
  const auto with_end = dir.write("a", "#!/bin/sh\n" + zip);
  const auto without = dir.write("b", std::string(5000, 'x'));
  EXPECT_TRUE(llamafile::probe_past_head(*MappedFile::open(with_end), 4096));
  EXPECT_FALSE(llamafile::probe_past_head(*MappedFile::open(without), 4096));
  const std::string ape = "MZqFpD='\n\n";
  EXPECT_TRUE(llamafile::probe_file(std::as_bytes(std::span(ape.data(), ape.size()))));
  const std::string elf =
      "\x7f"
      "ELF";
  EXPECT_FALSE(llamafile::probe_file(std::as_bytes(std::span(elf.data(), elf.size()))));
  // An APE with no archive after it: refused as a llamafile, not guessed.
  EXPECT_NE(refusal(dir.write("d", ape + std::string(100, 'x'))).find("llamafile"), std::string::npos);
  // A ZIP there, but no GGUF in it: said so, as a llamafile.
  const std::string why = refusal(dir.write("c", "#!/bin/sh\n" + std::string(5000, '#') + zip));
  EXPECT_NE(why.find("llamafile"), std::string::npos) << why;
}

}  // namespace
}  // namespace modelfs
