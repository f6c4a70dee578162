// SPDX-License-Identifier: Apache-2.0
// The OpenVINO IR reader: Consts served in place from the .bin, shared
// ranges, strings as JSON Lines, types left out, metadata; and its
// refusals rule by rule, each a ModelError naming "OpenVINO IR".
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include <pugixml.hpp>

#include "formats/openvino.hpp"
#include "io/budget_charge.hpp"
#include "modelfs/error.hpp"
#include "modelfs/formats.hpp"
#include "test_files.hpp"
#include "test_refusal.hpp"

namespace modelfs {
namespace {

using test::TempDir;

struct Const {
  std::string name, type, shape, offset, size;
  std::string port;  // the output port's inner XML
};

std::string const_layer(const Const& c, int id) {
  return "<layer id=\"" + std::to_string(id) + "\" name=\"" + c.name +
         "\" type=\"Const\" version=\"opset1\"><data element_type=\"" + c.type + "\" shape=\"" + c.shape +
         "\" offset=\"" + c.offset + "\" size=\"" + c.size + "\"/><output><port id=\"0\">" + c.port +
         "</port></output></layer>";
}

std::string ir(const std::vector<Const>& consts, const std::string& version = "11") {
  std::string xml =
      "<?xml version=\"1.0\"?>\n<!-- test -->\n<net name=\"t\" version=\"" + version + "\"><layers>";
  int id = 0;
  for (const auto& c : consts) xml += const_layer(c, id++);
  xml += "<layer id=\"99\" name=\"out\" type=\"Result\" version=\"opset1\"/></layers><edges/>";
  xml +=
      "<rt_info><MO_version value=\"x\"/><conversion_parameters><framework value=\"onnx\"/>"
      "</conversion_parameters></rt_info></net>\n";
  return xml;
}

std::filesystem::path write(const TempDir& dir, const std::string& xml, const std::string& bin) {
  dir.write("m.bin", bin);
  return dir.write("m.xml", xml);
}

std::string refusal(const std::filesystem::path& model) { return test::refusal_reason(model, "OpenVINO IR"); }

TEST(OpenVino, ConstsAreServedFromTheBin) {
  TempDir dir;
  std::string bin(64, '\0');
  for (size_t i = 0; i < bin.size(); ++i) bin[i] = static_cast<char>(i);
  const auto model = write(dir,
                           ir({{"a", "f32", "2, 2", "0", "16", "<dim>2</dim><dim>2</dim>"},
                               {"b", "f32", "2,2", "0", "16", ""},  // shares a's bytes
                               {"s", "i64", "", "16", "8", ""},
                               {"q", "u4", "3", "24", "2", "<dim>3</dim>"},
                               {"bits", "u2", "4", "26", "1", ""}}),
                           bin);
  const Catalog catalog = open_model(model);
  EXPECT_EQ(catalog.format, "openvino");
  ASSERT_EQ(catalog.tensors().size(), 4u);
  const Tensor& a = catalog.tensors()[0];
  EXPECT_EQ(a.name, "a");
  EXPECT_EQ(a.dtype, DType::Float32);
  EXPECT_EQ(test::vec(a.shape), (std::vector<uint64_t>{2, 2}));
  EXPECT_EQ(a.bytes.view(), bin.substr(0, 16));
  EXPECT_EQ(a.source.file, "m.bin");
  EXPECT_EQ(a.source.offset, 0u);
  EXPECT_EQ(catalog.tensors()[1].bytes.data(), a.bytes.data());  // in place, shared
  EXPECT_TRUE(catalog.tensors()[2].shape.empty());
  EXPECT_EQ(catalog.tensors()[2].bytes.view(), bin.substr(16, 8));
  EXPECT_EQ(catalog.tensors()[3].dtype, DType::UInt4);
  EXPECT_EQ(catalog.files, (std::vector<std::string>{"m.xml", "m.bin"}));
  EXPECT_EQ(catalog.metadata["ir_version"], 11);
  EXPECT_EQ(catalog.metadata["net_name"], "t");
  EXPECT_EQ(catalog.metadata["layer_types"]["Const"], 5);
  EXPECT_EQ(catalog.metadata["left_out"][0]["name"], "bits");
  EXPECT_EQ(catalog.metadata["rt_info"]["conversion_parameters"]["framework"], "onnx");
  ASSERT_EQ(catalog.documents.size(), 1u);
  EXPECT_EQ(catalog.documents[0].path, "model.xml");
}

TEST(OpenVino, StringConstsAreJsonLines) {
  TempDir dir;
  std::string bin;
  auto i32 = [&](int32_t v) { bin.append(reinterpret_cast<const char*>(&v), 4); };
  i32(3);
  i32(0);
  i32(2);
  i32(2);
  i32(3);
  bin += "ab\xff";
  const auto model = write(dir, ir({{"w", "string", "3", "0", std::to_string(bin.size()), ""}}), bin);
  const Catalog catalog = open_model(model);
  EXPECT_EQ(catalog.tensors()[0].dtype, DType::String);
  EXPECT_EQ(catalog.tensors()[0].bytes.view(), "\"ab\"\n\"\"\n\"\\udcff\"\n");
}

TEST(OpenVino, ProbeWantsANetWithAVersion) {
  auto probe = [](std::string_view text) {
    return openvino::probe_file({reinterpret_cast<const std::byte*>(text.data()), text.size()});
  };
  EXPECT_TRUE(probe("\xEF\xBB\xBF<?xml version=\"1.0\"?>\n<!-- c -->\n<net name=\"x\" version=\"10\">"));
  EXPECT_TRUE(probe("<net\nversion = \"11\"><layers>"));
  EXPECT_FALSE(probe("<network version=\"10\">"));
  EXPECT_FALSE(probe("<net name=\"x\">"));
  EXPECT_FALSE(probe("<?xml version=\"1.0\"?><html>"));
}

TEST(OpenVino, RefusalsNameTheFormat) {
  const std::string bin(32, '\0');
  struct Case {
    std::string what, xml, reason;
  };
  std::string rank65 = "1";
  for (int i = 1; i < 65; ++i) rank65 += ",1";
  auto nested = [](int levels) {
    std::string s;
    for (int i = 0; i < levels; ++i) s += "<a>";
    for (int i = 0; i < levels; ++i) s += "</a>";
    return s;
  };
  const std::vector<Case> cases = {
      {"not XML", "<net version=\"11\"><layers>", "not well-formed XML"},
      {"doctype", "<!DOCTYPE net [<!ENTITY x SYSTEM \"/etc/passwd\">]><net version=\"11\"><layers/></net>",
       "DOCTYPE"},
      {"version", ir({}, "7"), "IR version \"7\""},
      {"no layers", "<net version=\"10\"><edges/></net>", "no <layers>"},
      {"element type", ir({{"a", "f17", "2", "0", "8", ""}}), "unknown element_type \"f17\""},
      {"shape", ir({{"a", "f32", "2,-1", "0", "8", ""}}), "shape \"2,-1\""},
      {"shape text", ir({{"a", "f32", "2,,2", "0", "8", ""}}), "shape \"2,,2\""},
      {"offset", ir({{"a", "f32", "2", "x", "8", ""}}), "offset \"x\""},
      {"size", ir({{"a", "f32", "2", "0", "12", ""}}), "size 12 is not the 8 bytes"},
      {"smaller size", ir({{"a", "f32", "2", "0", "4", ""}}), "size 4 is not the 8 bytes"},
      {"past the bin", ir({{"a", "f32", "4", "24", "16", ""}}), "run past the end of m.bin"},
      {"overflow", ir({{"a", "u8", "16", "18446744073709551615", "16", ""}}), "run past the end"},
      {"numel overflow", ir({{"a", "f32", "4294967296,4294967296", "0", "8", ""}}), "overflows"},
      {"port dims", ir({{"a", "f32", "2", "0", "8", "<dim>3</dim>"}}),
       "output port's dims are not its shape"},
      {"string header", ir({{"a", "string", "2", "0", "8", ""}}), "string count 0 is not its shape's 2"},
      {"depth", "<net version=\"11\"><layers/>" + nested(100) + "</net>", "deeper than"},
      {"no data", "<net version=\"11\"><layers><layer id=\"0\" name=\"c\" type=\"Const\"/></layers></net>",
       "has no <data>"},
      {"no size",
       "<net version=\"11\"><layers><layer id=\"0\" name=\"c\" type=\"Const\"><data "
       "element_type=\"u8\" shape=\"1\" offset=\"0\"/></layer></layers></net>",
       "<data> has no size attribute"},
      {"negative offset", ir({{"a", "f32", "2", "-8", "8", ""}}), "offset \"-8\""},
      {"rank", ir({{"a", "u8", rank65, "0", "1", ""}}), "at most 64"},
      {"attribute", "<net version=\"11\" name=\"" + std::string((1 << 20) + 1, 'x') + "\"><layers/></net>",
       "attribute name of"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    TempDir dir;
    const std::string reason = refusal(write(dir, c.xml, bin));
    EXPECT_NE(reason.find(c.reason), std::string::npos) << reason;
  }
}

TEST(OpenVino, RootMustBeNet) {
  TempDir dir;
  const auto model = write(dir, "<graph version=\"11\"><net version=\"11\"><layers/></net></graph>", "");
  try {
    openvino::open_file(ModelFile::open(model));
    ADD_FAILURE() << "accepted";
  } catch (const ModelError& e) {
    EXPECT_EQ(e.format(), "OpenVINO IR");
    EXPECT_NE(e.reason().find("not <net>"), std::string::npos) << e.reason();
  }
}

TEST(OpenVino, StringOffsetsAreChecked) {
  auto region = [](std::vector<int32_t> header, const std::string& chars) {
    std::string out(header.size() * 4, '\0');
    std::memcpy(out.data(), header.data(), out.size());
    return out + chars;
  };
  struct Case {
    std::string bin, reason;
  };
  for (const auto& c : std::vector<Case>{
           {region({2, 0, 3, 2}, "abc"), "string offset 2 (2)"},    // falls back
           {region({2, 1, 2, 3}, "abc"), "string offset 0 (1)"},    // does not start at 0
           {region({2, 0, 1, 9}, "abc"), "string offset 2 (9)"},    // past the characters
           {region({2, 0, 1, 2}, "abc"), "strings end at 2 of 3"},  // leaves a byte
           {region({-1, 0}, ""), "string count -1"},                // a negative count
       }) {
    SCOPED_TRACE(c.reason);
    TempDir dir;
    const std::string reason =
        refusal(write(dir, ir({{"s", "string", "2", "0", std::to_string(c.bin.size()), ""}}), c.bin));
    EXPECT_NE(reason.find(c.reason), std::string::npos) << reason;
  }
}

TEST(OpenVino, BinMissingOrNotAFileIsRefused) {
  {
    TempDir dir;
    const auto model = dir.write("m.xml", ir({{"a", "f32", "2", "0", "8", ""}}));
    EXPECT_NE(refusal(model).find("weights file \"m.bin\""), std::string::npos);
  }
  {
    TempDir dir;
    std::filesystem::create_directory(dir.path() / "m.bin");
    const auto model = dir.write("m.xml", ir({{"a", "f32", "2", "0", "8", ""}}));
    EXPECT_NE(refusal(model).find("weights file \"m.bin\""), std::string::npos);
  }
  {
    TempDir dir;  // a link out of the folder
    TempDir outside;
    outside.write("secret.bin", std::string(8, 's'));
    std::filesystem::create_symlink(outside.path() / "secret.bin", dir.path() / "m.bin");
    const auto model = dir.write("m.xml", ir({{"a", "f32", "2", "0", "8", ""}}));
    EXPECT_NE(refusal(model).find("weights file \"m.bin\""), std::string::npos);
  }
}

// pugixml's allocator stays the host program's: the reader charges the
// budget a bound of what the parse takes before parsing, and refuses an
// .xml whose parse would pass it.
TEST(OpenVino, ParsingIsChargedBeforehandAndLeavesPugixmlsAllocatorAlone) {
  const auto allocate = pugi::get_memory_allocation_function();
  const auto deallocate = pugi::get_memory_deallocation_function();
  TempDir dir;
  const auto small = write(dir, ir({{"a", "f32", "1", "0", "4", ""}}), std::string(4, '\0'));
  EXPECT_EQ(open_model(small).tensors().size(), 1u);
  EXPECT_EQ(pugi::get_memory_allocation_function(), allocate);
  EXPECT_EQ(pugi::get_memory_deallocation_function(), deallocate);
  // A million bytes of one-byte text runs between empty elements: some 27
  // MB of parsed tree, past a fixed budget of 8 MiB.
  std::string xml = ir({{"a", "f32", "1", "0", "4", ""}});
  std::string runs;
  for (int i = 0; i < 200000; ++i) runs += "<a/>x";
  xml.insert(xml.find("</rt_info>"), "<r>" + runs + "</r>");
  const auto big = write(dir, xml, std::string(4, '\0'));
  Budget budget(uint64_t{8} << 20);
  const BudgetScope scope(budget);
  const std::string why = refusal(big);
  EXPECT_NE(why.find("parsing the XML needs"), std::string::npos) << why;
}

}  // namespace
}  // namespace modelfs
