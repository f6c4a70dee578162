// SPDX-License-Identifier: Apache-2.0
// The NumPy reader: the .npy header parser rule by rule (docs/formats.md
// §10.5: magic, version, header length, the dict's grammar and keys, descr
// allow-list, shape, data size), each refusal a ModelError naming "npy" and
// the offset; good headers as numpy and other writers make them; .npz
// archives stored and deflated, with their members' refusals.
#include <gtest/gtest.h>

#include <cstring>

#include "formats/numpy.hpp"
#include "modelfs/error.hpp"
#include "modelfs/formats.hpp"
#include "modelfs/tree.hpp"
#include "test_files.hpp"

namespace modelfs {
namespace {

using test::TempDir;
using test::vec;

// An .npy: preamble of `version`, `header` padded to 64 with a final \n
// (unless `raw_header`), then `data`.
std::string npy(std::string_view header, const std::string& data, int version = 1, bool raw_header = false) {
  std::string text(header);
  const size_t fixed = version == 1 ? 10 : 12;
  if (!raw_header) {
    text += ' ';
    while ((fixed + text.size() + 1) % 64 != 0) text += ' ';
    text += '\n';
  }
  std::string out = "\x93NUMPY";
  out += static_cast<char>(version);
  out += '\0';
  const uint64_t n = text.size();
  out += static_cast<char>(n & 0xff);
  out += static_cast<char>(n >> 8 & 0xff);
  if (version != 1) {
    out += static_cast<char>(n >> 16 & 0xff);
    out += static_cast<char>(n >> 24 & 0xff);
  }
  return out + text + data;
}

std::string dict(std::string_view descr, std::string_view order, std::string_view shape) {
  return "{'descr': '" + std::string(descr) + "', 'fortran_order': " + std::string(order) +
         ", 'shape': " + std::string(shape) + ", }";
}

Catalog open_bytes(const TempDir& dir, const std::string& bytes, const std::string& name = "model.npy") {
  return open_model(dir.write(name, bytes));
}

const Node* raw_file(const Tree& tree, std::string_view path) {
  const auto ino = tree.resolve(path);
  return ino ? tree.node(*ino) : nullptr;
}

// Bytes [offset, offset + length) of a file, through the read path.
std::string read(const Tree& tree, const Node& file, uint64_t offset, uint64_t length) {
  std::string scratch, out;
  iovec io[4];
  const size_t n = tree.read(file, offset, length, io, scratch);
  for (size_t i = 0; i < n; ++i) out.append(static_cast<const char*>(io[i].iov_base), io[i].iov_len);
  return out;
}

struct Bad {
  std::string what;
  std::string bytes;
  std::string reason;
};

std::vector<Bad> bad_files() {
  const std::string f4x3(12, '\0');
  std::vector<Bad> cases;
  auto add = [&](std::string what, std::string bytes, std::string reason) {
    cases.push_back({std::move(what), std::move(bytes), std::move(reason)});
  };
  add(
      "version 4.0",
      [&] {
        auto b = npy(dict("<f4", "False", "(3,)"), f4x3);
        b[6] = 4;
        return b;
      }(),
      "format version 4.0");
  add(
      "version 1.1",
      [&] {
        auto b = npy(dict("<f4", "False", "(3,)"), f4x3);
        b[7] = 1;
        return b;
      }(),
      "format version 1.1");
  add("truncated preamble", std::string("\x93NUMPY\x01\x00", 8) + "\x05", "too short");
  add("header length past the file", npy(dict("<f4", "False", "(3,)"), "").substr(0, 40),
      "runs past the end");
  add(
      "header length over the limit",
      [&] {
        std::string b = "\x93NUMPY\x02";
        b += std::string("\0\0\0\0\x10", 5);  // 2^28
        return b + std::string(64, ' ');
      }(),
      "over the limit");
  add("not a dict", npy("['descr', '<f4']", f4x3), "expected '{'");
  add("an expression", npy("__import__('os').system('x')", f4x3), "expected '{'");
  add("a call inside", npy("{'descr': dtype('<f4'), 'fortran_order': False, 'shape': (3,)}", f4x3),
      "expected a quoted string");
  add("missing shape", npy("{'descr': '<f4', 'fortran_order': False}", f4x3), "lacks the key 'shape'");
  add("missing descr", npy("{'fortran_order': False, 'shape': (3,)}", f4x3), "lacks the key 'descr'");
  add("extra key", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'x': 1}", f4x3),
      "unknown key");
  add("duplicate key", npy("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (3,)}", f4x3),
      "appears twice");
  add("fortran_order not a bool", npy(dict("<f4", "1", "(3,)"), f4x3), "True or False");
  add("shape not a tuple", npy(dict("<f4", "False", "[3]"), f4x3), "expected '('");
  add("shape (n) without a comma", npy(dict("<f4", "False", "(3)"), f4x3), "not a tuple");
  add("negative dimension", npy(dict("<f4", "False", "(-3,)"), f4x3), "non-negative");
  add("float dimension", npy(dict("<f4", "False", "(3.0,)"), f4x3), "expected ',' or ')'");
  add("nested tuple", npy(dict("<f4", "False", "((3,),)"), f4x3), "non-negative");
  add("leading zero", npy(dict("<f4", "False", "(03,)"), f4x3), "leading zero");
  add("dimension past int64", npy(dict("<f4", "False", "(9223372036854775808,)"), f4x3), "past 2^63");
  add("L suffix in 3.0", npy(dict("<f4", "False", "(3L,)"), f4x3, 3), "expected ',' or ')'");
  add("escape in a string", npy("{'descr': '<f\\x34', 'fortran_order': False, 'shape': (3,)}", f4x3),
      "escapes");
  add("unterminated string", npy("{'descr': '<f4", f4x3, 1, true), "does not end");
  add("text after the dict", npy(dict("<f4", "False", "(3,)") + " x", f4x3), "text after the header");
  add("rank over 64",
      npy(dict(
              "<f4", "False",
              "(" +
                  [] {
                    std::string s;
                    for (int i = 0; i < 65; ++i) s += "1,";
                    return s;
                  }() +
                  ")"),
          std::string(4, '\0')),
      "more than 64 dimensions");
  add("element count overflows", npy(dict("<f4", "False", "(4294967296, 4294967296)"), ""), "passes 2^64");
  add("strides pass int64", npy(dict("|u1", "False", "(4611686018427387904, 3)"), ""), "pass 2^63");
  add("object array", npy(dict("|O", "False", "(3,)"), "\x80\x04."), "pickle, never loaded");
  add("void", npy(dict("|V2", "False", "(3,)"), std::string(6, '\0')), "void");
  add("string", npy(dict("<U3", "False", "(1,)"), f4x3), "string array");
  add("datetime", npy(dict("<M8[ns]", "False", "(1,)"), std::string(8, '\0')), "datetime64");
  add("long double", npy(dict("<f16", "False", "(1,)"), std::string(16, '\0')), "long double");
  add("unknown descr", npy(dict("<q7", "False", "(1,)"), ""), "unknown dtype");
  add("no byte order", npy(dict("f4", "False", "(3,)"), f4x3), "unknown dtype");
  add("structured",
      npy("{'descr': [('a', '<f4'), ('b', [('c', '<i2')])], 'fortran_order': False, 'shape': (1,)}",
          std::string(6, '\0')),
      "structured dtype");
  add("fields nested too deep", npy("{'descr': " + std::string(40, '[') + ", 'fortran_order': False}", ""),
      "nested deeper");
  add("short data", npy(dict("<f4", "False", "(3,)"), f4x3.substr(1)), "need 12");
  add("trailing bytes", npy(dict("<f4", "False", "(3,)"), f4x3 + "zz"), "2 bytes after");
  return cases;
}

TEST(Numpy, CorruptHeadersAreRefusedNamingTheFormat) {
  TempDir dir;
  for (const auto& bad : bad_files()) {
    SCOPED_TRACE(bad.what);
    try {
      open_bytes(dir, bad.bytes);
      ADD_FAILURE() << "accepted: " << bad.what;
    } catch (const ModelError& e) {
      EXPECT_EQ(e.format(), "npy") << e.what();
      EXPECT_NE(e.reason().find(bad.reason), std::string::npos) << e.what();
      EXPECT_TRUE(e.offset().has_value()) << e.what();
    }
  }
}

TEST(Numpy, HeadersAsWritersMakeThem) {
  TempDir dir;
  const std::string data(24, '\x01');
  for (const auto& header : {
           dict("<f4", "False", "(2, 3)"),                                            // numpy
           std::string("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}"),  // no trailing comma
           std::string("{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (2, 3, )}"),
           std::string("{'shape': (2L, 3L), 'fortran_order': False, 'descr': '<f4'}"),  // Python 2, any order
       }) {
    SCOPED_TRACE(header);
    const std::string bytes = npy(header, data);
    const Catalog c = open_bytes(dir, bytes);
    ASSERT_EQ(c.tensors().size(), 1u);
    const Tensor& t = c.tensors()[0];
    EXPECT_EQ(c.format, "npy");
    EXPECT_EQ(t.name, "model");
    EXPECT_EQ(t.dtype, DType::Float32);
    EXPECT_EQ(vec(t.shape), (std::vector<uint64_t>{2, 3}));
    EXPECT_EQ(vec(t.strides), (std::vector<int64_t>{3, 1}));
    EXPECT_EQ(t.source.offset, std::optional<uint64_t>(bytes.size() - data.size()));
    EXPECT_EQ(c.metadata["format_version"], "1.0");
  }
  // Without the final newline (other writers), and a 2.0 header.
  EXPECT_EQ(open_bytes(dir, npy(dict("<f4", "False", "(2, 3)"), data, 1, true)).tensors().size(), 1u);
  const std::string v2_bytes = npy(dict("<f4", "False", "(2, 3)"), data, 2);
  const Catalog v2 = open_bytes(dir, v2_bytes);
  EXPECT_EQ(v2.metadata["format_version"], "2.0");
  EXPECT_EQ(v2.tensors()[0].source.offset, std::optional<uint64_t>(v2_bytes.size() - data.size()));
}

TEST(Numpy, DescrsMapToDtypes) {
  const std::pair<const char*, DType> cases[] = {
      {"|b1", DType::Bool},      {"|i1", DType::Int8},        {"<i2", DType::Int16},
      {"<i4", DType::Int32},     {"<i8", DType::Int64},       {"|u1", DType::UInt8},
      {"<u2", DType::UInt16},    {"<u4", DType::UInt32},      {"<u8", DType::UInt64},
      {"<f2", DType::Float16},   {"<f4", DType::Float32},     {"<f8", DType::Float64},
      {"<c8", DType::Complex64}, {"<c16", DType::Complex128}, {">u1", DType::UInt8},
      {"=f4", DType::Float32}};
  for (const auto& [descr, dtype] : cases) {
    SCOPED_TRACE(descr);
    const auto kind = numpy::descr_kind(descr);
    ASSERT_TRUE(kind.dtype.has_value()) << kind.refusal;
    EXPECT_EQ(*kind.dtype, dtype);
  }
  EXPECT_TRUE(numpy::descr_kind("|O").object);
  EXPECT_TRUE(numpy::descr_kind("<U5").text);
  EXPECT_TRUE(numpy::descr_kind("|S5").text);
  // Big-endian: its dtype, served byte-swapped (one byte has no order).
  EXPECT_EQ(numpy::descr_kind(">f8").dtype, DType::Float64);
  EXPECT_TRUE(numpy::descr_kind(">f8").big_endian);
  EXPECT_FALSE(numpy::descr_kind(">u1").big_endian);
  EXPECT_FALSE(numpy::descr_kind("<f8").big_endian);
  EXPECT_FALSE(numpy::descr_kind("|f4").dtype.has_value());
}

TEST(Numpy, BigEndianArraysAreSwappedPerRead) {
  TempDir dir;
  const Catalog c = open_bytes(dir, npy(dict(">c8", "False", "(2,)"), std::string(16, '\1')));
  ASSERT_EQ(c.tensors().size(), 1u);
  const Tensor& t = c.tensors()[0];
  EXPECT_EQ(t.dtype, DType::Complex64);
  ASSERT_NE(t.encoded, nullptr);
  EXPECT_EQ(t.encoded->method, Encoded::Method::ByteSwap);
  EXPECT_EQ(t.encoded->swap_bytes, 4);  // each part of the complex number
  EXPECT_EQ(t.nbytes(), 16u);
  EXPECT_FALSE(t.source.offset.has_value());
}

TEST(Numpy, FortranOrderKeepsTheBytesWithColumnMajorStrides) {
  TempDir dir;
  const Catalog c = open_bytes(dir, npy(dict("<i2", "True", "(2, 3, 4)"), std::string(48, '\0')));
  const Tensor& t = c.tensors()[0];
  EXPECT_EQ(vec(t.strides), (std::vector<int64_t>{1, 2, 6}));
  EXPECT_TRUE(t.is_f_contiguous());
  const Catalog scalar = open_bytes(dir, npy(dict("<f8", "False", "()"), std::string(8, '\0')));
  EXPECT_TRUE(scalar.tensors()[0].shape.empty());
  const Catalog empty = open_bytes(dir, npy(dict("<f8", "False", "(0, 5)"), ""));
  EXPECT_EQ(empty.tensors()[0].bytes.size(), 0u);
}

TEST(Numpy, NpzStoredAndDeflatedMembers) {
  TempDir dir;
  const std::string a = npy(dict("<f4", "False", "(2,)"), std::string("\0\0\x80\x3f\0\0\0\x40", 8));
  const std::string b = npy(dict("|u1", "False", "(3,)"), "xyz");
  const std::string s = npy(dict("<U1", "False", "()"), std::string("a\0\0\0", 4));
  const auto zip =
      test::zip_bytes({{"dir/a.npy", a}, {"b.npy", b, 8, test::deflate_stored_blocks(b)}, {"s.npy", s}},
                      {.data_descriptors = false, .zip64 = false, .alignment = 0});
  const Catalog c = open_bytes(dir, zip, "model.npz");
  EXPECT_EQ(c.format, "npz");
  ASSERT_EQ(c.tensors().size(), 2u);
  EXPECT_EQ(c.tensors()[0].name, "dir/a");
  EXPECT_EQ(c.tensors()[0].bytes.view(), a.substr(a.size() - 8));
  EXPECT_EQ(c.tensors()[0].encoded, nullptr);
  const Tensor& deflated = c.tensors()[1];
  EXPECT_EQ(deflated.name, "b");
  ASSERT_NE(deflated.encoded, nullptr);
  EXPECT_EQ(deflated.encoded->decoded_offset, b.size() - 3);
  EXPECT_EQ(deflated.nbytes(), 3u);
  EXPECT_EQ(c.metadata["left_out"][0]["name"], "s");

  // The tree inflates the member for each read.
  const auto tree = Tree::build(open_bytes(dir, zip, "model.npz"), {});
  const Node* raw = raw_file(*tree, "b");
  ASSERT_NE(raw, nullptr);
  EXPECT_EQ(tree->content(*raw), "xyz");
  EXPECT_EQ(read(*tree, *raw, 1, 2), "yz");
  EXPECT_EQ(read(*tree, *raw, 0, 1), "x");  // behind the checkpoint: inflated again
  const Node* view = raw_file(*tree, "b.npy");
  ASSERT_NE(view, nullptr);
  EXPECT_TRUE(tree->content(*view).ends_with("xyz"));
}

TEST(Numpy, NpzMemberRefusals) {
  TempDir dir;
  const std::string good = npy(dict("|u1", "False", "(3,)"), "xyz");
  auto refused = [&](const std::vector<test::ZipEntry>& entries, const std::string& reason) {
    SCOPED_TRACE(reason);
    try {
      open_bytes(dir, test::zip_bytes(entries, {.data_descriptors = false, .zip64 = false, .alignment = 0}),
                 "model.npz");
      ADD_FAILURE() << "accepted";
    } catch (const ModelError& e) {
      EXPECT_EQ(e.format(), "npz") << e.what();
      EXPECT_NE(e.reason().find(reason), std::string::npos) << e.what();
    }
  };
  refused({{"a.npy", good}, {"o.npy", npy(dict("|O", "False", "(1,)"), "\x80\x04.")}}, "member \"o.npy\"");
  refused({{"a.npy", good}, {"o.npy", npy(dict("|O", "False", "(1,)"), "\x80\x04.")}}, "never loaded");
  refused({{"a.npy", npy(dict("|u1", "False", "(4,)"), "xyz")}}, "need 4");
  refused({{"a.npy", good + "!"}}, "1 bytes after");
  // A deflated member whose stream yields less than the header needs.
  const std::string big = npy(dict("|u1", "False", "(100,)"), std::string(100, 'q'));
  refused({{"a.npy", big, 8, test::deflate_stored_blocks(big.substr(0, 30))}}, "runs past the end");
}

TEST(Numpy, InflatedReadsFailOnAShortOrLongStream) {
  TempDir dir;
  const std::string body = npy(dict("|u1", "False", "(100,)"), std::string(100, 'q'));
  // The directory declares `body`; the stream yields 20 bytes less, or more.
  for (const std::string& stream : {test::deflate_stored_blocks(body.substr(0, body.size() - 20)),
                                    test::deflate_stored_blocks(body + "extra")}) {
    const auto zip = test::zip_bytes({{"a.npy", body, 8, stream}},
                                     {.data_descriptors = false, .zip64 = false, .alignment = 0});
    const auto tree = Tree::build(open_bytes(dir, zip, "model.npz"), {});
    const Node* raw = raw_file(*tree, "a");
    ASSERT_NE(raw, nullptr);
    EXPECT_THROW(read(*tree, *raw, 0, 100), ModelError);
    // The start of the member is still there.
    EXPECT_EQ(read(*tree, *raw, 0, 10), std::string(10, 'q'));
  }
}

}  // namespace
}  // namespace modelfs
