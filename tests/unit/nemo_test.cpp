// SPDX-License-Identifier: Apache-2.0
// The NeMo reader: the tar walked header by header (ustar prefix, PAX path
// and size, GNU long names, base-256 sizes), the checkpoint read in place
// inside it, and the refusals rule by rule, each a ModelError of "nemo".
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "formats/nemo.hpp"
#include "modelfs/error.hpp"
#include "modelfs/formats.hpp"
#include "test_files.hpp"
#include "test_refusal.hpp"

namespace modelfs {
namespace {

using namespace std::string_literals;
using test::TempDir;

// A 512-byte ustar header; `size_field` overrides the octal size's 12 bytes.
std::string header(const std::string& name, uint64_t size, char type = '0',
                   const std::string& size_field = "", const std::string& prefix = "") {
  std::string h(512, '\0');
  h.replace(0, name.size(), name);
  std::snprintf(h.data() + 100, 8, "%07o", 0644);
  std::string octal(12, '\0');
  std::snprintf(octal.data(), 12, "%011llo", static_cast<unsigned long long>(size));
  h.replace(124, 12, size_field.empty() ? octal : size_field);
  h[156] = type;
  h.replace(257, 8,
            "ustar\0"
            "00"s);
  h.replace(345, prefix.size(), prefix);
  h.replace(148, 8, "        ");
  unsigned sum = 0;
  for (char c : h) sum += static_cast<unsigned char>(c);
  std::snprintf(h.data() + 148, 8, "%06o", sum);
  return h;
}

std::string padded(std::string data) {
  data.resize((data.size() + 511) / 512 * 512, '\0');
  return data;
}

std::string member(const std::string& name, const std::string& data, char type = '0') {
  return header(name, data.size(), type) + padded(data);
}

std::string end() { return std::string(1024, '\0'); }

// torch.save({'w': tensor([1., 2., 3., 4.])}) as a ZIP archive (protocol 2).
std::string checkpoint() {
  auto u = [](const std::string& s) {
    std::string out = "X";
    const auto n = static_cast<uint32_t>(s.size());
    out.append(reinterpret_cast<const char*>(&n), 4);
    return out + s;
  };
  const std::string pickle = "\x80\x02}("s + u("w") + "ctorch._utils\n_rebuild_tensor_v2\n((" + u("storage") +
                             "ctorch\nFloatStorage\n" + u("0") + u("cpu") +
                             "K\x04tQK\x00(K\x04t(K\x01t\x89"
                             "ccollections\nOrderedDict\n)RtRu."s;
  const std::string floats = "\x00\x00\x80\x3f\x00\x00\x00\x40\x00\x00\x40\x40\x00\x00\x80\x40"s;
  return test::zip_bytes(
      {{"archive/data.pkl", pickle}, {"archive/data/0", floats}, {"archive/version", "3\n"}});
}

std::string refusal(const std::string& bytes) {
  TempDir dir;
  return test::refusal_reason(dir.write("m.nemo", bytes), "nemo");
}

TEST(Nemo, CheckpointIsServedInPlaceAndTheConfigIsADocument) {
  TempDir dir;
  const std::string pax = "28 mtime=1648687736.5820236\n";
  const std::string tar = member("././@PaxHeader", pax, 'x') + header("./", 0, '5') +
                          member("./model_config.yaml", "a: 1\n") +
                          member("./model_weights.ckpt", checkpoint()) + end();
  const Catalog catalog = open_model(dir.write("m.nemo", tar));
  EXPECT_EQ(catalog.format, "nemo");
  ASSERT_EQ(catalog.tensors().size(), 1u);
  const Tensor& w = catalog.tensors()[0];
  EXPECT_EQ(w.name, "w");
  EXPECT_EQ(w.bytes.view(), "\x00\x00\x80\x3f\x00\x00\x00\x40\x00\x00\x40\x40\x00\x00\x80\x40"s);
  // In place: the tensor's offset is inside the tar member's data.
  const uint64_t ckpt_at = tar.find("PK\x03\x04");
  EXPECT_GT(*w.source.offset, ckpt_at);
  EXPECT_EQ(tar.substr(*w.source.offset, 16), std::string(w.bytes.view()));
  ASSERT_EQ(catalog.documents.size(), 1u);
  EXPECT_EQ(catalog.documents[0].path, "model_config.yaml");
  EXPECT_EQ(catalog.documents[0].content, "a: 1\n");
  EXPECT_EQ(catalog.metadata["nemo"]["members"][1]["offset"], ckpt_at);
}

TEST(Nemo, PaxPathAndSizeGnuLongNamesAndBase256Sizes) {
  TempDir dir;
  const std::string ckpt = checkpoint();
  // A PAX path names the checkpoint; the header's own name is a stand-in.
  const std::string path = "29 path=./model_weights.ckpt\n";
  std::string base256(12, '\0');
  base256[0] = '\x80';
  base256[11] = static_cast<char>(5);
  const std::string tar = member("./PaxHeaders/x", path, 'x') + member("./stand-in", ckpt) +
                          member("././@LongLink", "./nemo/" + std::string(150, 'n') + "\0"s, 'L') +
                          header("./short", 5, '0') + padded("hello") + header("./odd", 0, '0', base256) +
                          padded("12345") + end();
  const Catalog catalog = open_model(dir.write("m.nemo", tar));
  ASSERT_EQ(catalog.tensors().size(), 1u);
  ASSERT_EQ(catalog.documents.size(), 2u);
  EXPECT_EQ(catalog.documents[0].path, "nemo/nemo/" + std::string(150, 'n'));
  EXPECT_EQ(catalog.documents[0].content, "hello");
  EXPECT_EQ(catalog.documents[1].content, "12345");
}

TEST(Nemo, SeveralRanksAreUnderTheirFolders) {
  TempDir dir;
  const std::string tar = member("./mp_rank_00/model_weights.ckpt", checkpoint()) +
                          member("./mp_rank_01/model_weights.ckpt", checkpoint()) + end();
  const Catalog catalog = open_model(dir.write("m.nemo", tar));
  ASSERT_EQ(catalog.tensors().size(), 2u);
  EXPECT_EQ(catalog.tensors()[0].name, "mp_rank_00/w");
  EXPECT_EQ(catalog.tensors()[1].name, "mp_rank_01/w");
}

TEST(Nemo, RefusalsRuleByRule) {
  const std::string ckpt = member("./model_weights.ckpt", checkpoint());
  std::string bad_sum = ckpt;
  bad_sum[0] = 'X';
  EXPECT_NE(refusal(bad_sum + end()).find("checksum"), std::string::npos);
  EXPECT_NE(refusal(ckpt + std::string(100, 'x')).find("cut short"), std::string::npos);
  // A member whose data would run 1 TiB past the archive.
  EXPECT_NE(
      refusal(header("./model_weights.ckpt", uint64_t{1} << 40) + end()).find("past the end of the file"),
      std::string::npos);
  EXPECT_NE(refusal(ckpt + ckpt + end()).find("appears twice"), std::string::npos);
  EXPECT_NE(refusal(member("./x", "12 path=a\n", 'x') + ckpt + end()).find("PAX record"), std::string::npos);
  EXPECT_NE(refusal(member("./model_config.yaml", "a") + end()).find("no model_weights.ckpt"),
            std::string::npos);
  EXPECT_NE(refusal(member("./model_weights.ckpt", "\x80\x02legacy") + end()).find("legacy"),
            std::string::npos);
  EXPECT_NE(refusal(header("./a", 0, '0', "zz") + end()).find("not an octal number"), std::string::npos);
  std::string negative(12, '\xff');
  EXPECT_NE(refusal(header("./a", 0, '0', negative) + end()).find("negative"), std::string::npos);
  EXPECT_NE(refusal("\x1f\x8b\x07\x00"s + std::string(60, '\0')).find("not deflate"), std::string::npos);
  EXPECT_NE(refusal("\x1f\x8b\x08\x00"s + std::string(6, '\0')).find("cut short"), std::string::npos);
}

// gzip (RFC 1952) around `data`, its deflate stream of stored blocks.
std::string gzip(const std::string& data) {
  std::string out = "\x1f\x8b\x08\x08"s + std::string(6, '\0') + "m.tar\0"s;
  out += test::deflate_stored_blocks(data);
  const auto crc =
      static_cast<uint32_t>(::crc32(0, reinterpret_cast<const Bytef*>(data.data()), data.size()));
  const auto size = static_cast<uint32_t>(data.size());
  out.append(reinterpret_cast<const char*>(&crc), 4);
  out.append(reinterpret_cast<const char*>(&size), 4);
  return out;
}

TEST(Nemo, GzipTarIsServedFromTheStream) {
  TempDir dir;
  const std::string tar =
      member("./model_config.yaml", "a: 1\n") + member("./model_weights.ckpt", checkpoint()) + end();
  const std::string gz = gzip(tar);
  const Catalog catalog = open_model(dir.write("m.nemo", gz));
  ASSERT_EQ(catalog.tensors().size(), 1u);
  const Tensor& w = catalog.tensors()[0];
  ASSERT_NE(w.encoded, nullptr);
  EXPECT_EQ(w.encoded->method, Encoded::Method::Deflate);
  EXPECT_EQ(w.encoded->decoded_size, tar.size());
  // The tensor's bytes are where the tar holds them, in what the stream decodes to.
  EXPECT_EQ(tar.substr(w.encoded->decoded_offset, w.encoded->size),
            "\x00\x00\x80\x3f\x00\x00\x00\x40\x00\x00\x40\x40\x00\x00\x80\x40"s);
  EXPECT_FALSE(w.source.offset.has_value());
  ASSERT_EQ(catalog.documents.size(), 1u);
  EXPECT_EQ(catalog.documents[0].content, "a: 1\n");
  // A trailer that lies, bytes after the stream, a tar with nothing after its end blocks but 2 MiB.
  std::string bad_crc = gz;
  bad_crc[bad_crc.size() - 8] ^= 1;
  EXPECT_NE(refusal(bad_crc).find("CRC-32"), std::string::npos);
  EXPECT_NE(refusal(gz + "x").find("follow the gzip stream"), std::string::npos);
  EXPECT_NE(refusal(gzip(tar + std::string(2 << 20, '\0'))).find("follow the end of the tar"),
            std::string::npos);
}

}  // namespace
}  // namespace modelfs
