// SPDX-License-Identifier: Apache-2.0
// Tensors made of pieces (catalog.hpp, Piece; src/tree/pieces_view.hpp):
// catalogs built by hand over temporary files, every read compared with
// the tensor the test assembled itself before cutting it into pieces.
#include <gtest/gtest.h>
#include <sys/uio.h>
#include <unistd.h>
#include <zlib.h>

#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/pieces.hpp"
#include "io/tensor_spec.hpp"
#include "modelfs/error.hpp"
#include "modelfs/mapped_file.hpp"
#include "modelfs/tree.hpp"
#include "test_files.hpp"
#include "tree/tree_parts.hpp"

namespace modelfs {
namespace {

using SpecPiece = BasicPiece<std::string, std::vector<uint64_t>, std::vector<PieceFilter>>;

// The tensor's bytes, made by the test: element i's bytes differ from its
// neighbours' and within the element.
std::string values(uint64_t bytes) {
  std::string out(bytes, '\0');
  for (uint64_t i = 0; i < bytes; ++i) out[i] = static_cast<char>((i * 31 + i / 7 + 1) & 0xFF);
  return out;
}

std::string zlib_compress(const std::string& in) {
  uLongf size = compressBound(in.size());
  std::string out(size, '\0');
  EXPECT_EQ(Z_OK, compress2(reinterpret_cast<Bytef*>(out.data()), &size,
                            reinterpret_cast<const Bytef*>(in.data()), in.size(), 6));
  out.resize(size);
  return out;
}

// HDF5's shuffle as its writer applies it: byte b of every element first.
std::string shuffle(const std::string& in, size_t element) {
  std::string out(in.size(), '\0');
  const size_t n = in.size() / element;
  for (size_t i = 0; i < n; ++i)
    for (size_t b = 0; b < element; ++b) out[b * n + i] = in[i * element + b];
  return out;
}

// A box cut from a C-order array `whole` of `shape`: the C-order array of
// `extent` from `start`, what lies past the shape filled with 0xEE (an
// HDF5 edge chunk is stored full size).
std::string cut_box(const std::string& whole, const std::vector<uint64_t>& shape, size_t element,
                    const std::vector<uint64_t>& start, const std::vector<uint64_t>& extent) {
  const size_t rank = shape.size();
  uint64_t count = 1;
  for (auto e : extent) count *= e;
  std::string out;
  std::vector<uint64_t> local(rank, 0);
  for (uint64_t k = 0; k < count; ++k) {
    uint64_t rest = k;
    for (size_t d = rank; d-- > 0;) {
      local[d] = rest % extent[d];
      rest /= extent[d];
    }
    bool inside = true;
    uint64_t at = 0;
    for (size_t d = 0; d < rank; ++d) {
      const uint64_t i = start[d] + local[d];
      inside = inside && i < shape[d];
      at = at * shape[d] + (inside ? i : 0);
    }
    out += inside ? whole.substr(at * element, element) : std::string(element, '\xEE');
  }
  return out;
}

class Pieces : public ::testing::Test {
 protected:
  // A model file holding `bytes` after a few bytes of its own.
  std::shared_ptr<const MappedFile> file(const std::string& name, const std::string& bytes) {
    auto mapped = MappedFile::open(dir_.write(name, "HEAD" + bytes));
    files_[name] = mapped;
    return mapped;
  }

  static SpecPiece run(const std::shared_ptr<const MappedFile>& f, const std::string& name, uint64_t offset,
                       uint64_t size) {
    SpecPiece p;
    p.bytes = ByteSpan::mapped(f, offset, size);
    p.size = size;
    p.source = {name, offset};
    return p;
  }

  // The boxes of a grid of chunks `chunk` over `shape`, each cut from
  // `whole` and stored in one file, in an order of the test's choosing
  // (reversed: the reader's order is not the grid's).
  std::vector<SpecPiece> grid(const std::string& whole, const std::vector<uint64_t>& shape, size_t element,
                              const std::vector<uint64_t>& chunk, std::vector<PieceFilter> filters = {},
                              const std::vector<size_t>& zeros = {}) {
    const size_t rank = shape.size();
    std::vector<std::vector<uint64_t>> starts(1);
    for (size_t d = 0; d < rank; ++d) {
      std::vector<std::vector<uint64_t>> next;
      for (const auto& s : starts)
        for (uint64_t at = 0; at < shape[d]; at += chunk[d]) {
          auto t = s;
          t.push_back(at);
          next.push_back(t);
        }
      starts = next;
    }
    std::string stored;
    std::vector<std::pair<uint64_t, uint64_t>> where;
    std::vector<std::string> decoded;
    for (const auto& start : starts) {
      std::string box = cut_box(whole, shape, element, start, chunk);
      decoded.push_back(box);
      for (auto it = filters.begin(); it != filters.end(); ++it)
        box = *it == PieceFilter::Shuffle ? shuffle(box, element) : zlib_compress(box);
      where.emplace_back(4 + stored.size(), box.size());
      stored += box;
    }
    const std::string name = "chunks" + std::to_string(files_.size()) + ".bin";
    auto f = file(name, stored);
    std::vector<SpecPiece> out;
    for (size_t i = starts.size(); i-- > 0;) {
      SpecPiece p;
      p.start = starts[i];
      p.extent = chunk;
      p.size = decoded[i].size();
      if (std::find(zeros.begin(), zeros.end(), i) != zeros.end()) {
        p.zeros = true;
      } else {
        p.bytes = ByteSpan::mapped(f, where[i].first, where[i].second);
        p.filters = filters;
        p.source = {name, where[i].first};
      }
      out.push_back(p);
    }
    return out;
  }

  static TensorSpec spec(const std::string& name, DType dtype, std::vector<uint64_t> shape,
                         std::vector<SpecPiece> pieces) {
    TensorSpec t;
    t.name = name;
    t.dtype = dtype;
    t.shape = std::move(shape);
    t.strides = contiguous_strides(t.shape).value();
    t.source = {"model.json", std::nullopt};
    t.pieces = std::move(pieces);
    return t;
  }

  std::unique_ptr<const Tree> build(const std::vector<TensorSpec>& specs) {
    Catalog catalog;
    catalog.format = "pieces-test";
    catalog.files = {"model.json"};
    for (const auto& [name, f] : files_) catalog.files.push_back(name);
    for (const auto& s : specs) catalog.add(s);
    return Tree::build(std::move(catalog), {});
  }

  static void refuse(const TensorSpec& s, const std::string& why) {
    Catalog catalog;
    catalog.format = "pieces-test";
    try {
      catalog.add(s);
      ADD_FAILURE() << "accepted; expected: " << why;
    } catch (const ModelError& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("\"" + s.name + "\""), std::string::npos) << e.what();
    }
  }

  static const Node& node(const Tree& tree, const std::string& path) {
    const auto ino = tree.resolve(path);
    EXPECT_TRUE(ino) << path;
    return *tree.node(*ino);
  }

  // [offset, offset + length) of a file through the read path, with
  // `iovecs` iovecs.
  static std::string read(const Tree& tree, const Node& f, uint64_t offset, uint64_t length,
                          size_t iovecs = 16) {
    std::vector<iovec> iov(iovecs);
    std::string scratch;
    const size_t n = tree.read(f, offset, length, iov, scratch);
    std::string out;
    for (size_t i = 0; i < n; ++i) out.append(static_cast<const char*>(iov[i].iov_base), iov[i].iov_len);
    return out;
  }

  // Every read of a few lengths from every offset equals `expected`.
  static void expect_reads(const Tree& tree, const std::string& path, const std::string& expected) {
    const Node& f = node(tree, path);
    ASSERT_EQ(f.size, expected.size()) << path;
    EXPECT_EQ(tree.content(f), expected) << path;
    for (uint64_t offset = 0; offset < expected.size(); ++offset)
      for (const uint64_t length : {uint64_t{1}, uint64_t{3}, uint64_t{13}, uint64_t{64}, expected.size()}) {
        const uint64_t n = std::min(length, expected.size() - offset);
        ASSERT_EQ(read(tree, f, offset, n, offset % 2 ? 2 : 16), expected.substr(offset, n))
            << path << " at " << offset << " for " << n;
      }
  }

  // The .npy's body (after its header) equals `expected`.
  static void expect_npy_body(const Tree& tree, const std::string& path, const std::string& expected) {
    const std::string npy = tree.content(node(tree, path));
    ASSERT_GE(npy.size(), 10u);
    ASSERT_EQ(npy.substr(0, 6), "\x93NUMPY");
    const size_t header = 10 + (static_cast<uint8_t>(npy[8]) | static_cast<uint8_t>(npy[9]) << 8);
    EXPECT_EQ(npy.substr(header), expected) << path;
  }

  // The tensor's bytes in the export file, found by its header.
  static std::string exported(const Tree& tree, const std::string& name) {
    const std::string file = tree.content(node(tree, ".modelfs/model.safetensors"));
    uint64_t length = 0;
    std::memcpy(&length, file.data(), 8);
    const auto header = nlohmann::json::parse(file.substr(8, length));
    if (!header.contains(name)) return "<left out>";
    const auto& offsets = header[name]["data_offsets"];
    const uint64_t begin = offsets[0], end = offsets[1];
    return file.substr(8 + length + begin, end - begin);
  }

  test::TempDir dir_;
  std::map<std::string, std::shared_ptr<const MappedFile>> files_;
};

TEST_F(Pieces, RunPiecesAcrossTwoFilesAreHeldPartsOfBothMappings) {
  const std::string whole = values(40);  // float32 [10]
  auto a = file("group1-shard1of2.bin", std::string(8, 'a') + whole.substr(0, 24));
  auto b = file("group1-shard2of2.bin", whole.substr(24));
  auto tree = build({spec("w", DType::Float32, {10},
                          {run(a, "group1-shard1of2.bin", 12, 24), run(b, "group1-shard2of2.bin", 4, 16)})});
  expect_reads(*tree, "w", whole);
  // Zero copy: the iovecs point into the two mappings.
  std::vector<iovec> iov(4);
  std::string scratch;
  const Node& f = node(*tree, "w");
  ASSERT_EQ(2u, tree->read(f, 20, 10, iov, scratch));
  EXPECT_EQ(iov[0].iov_base, a->unchecked_data() + 12 + 20);
  EXPECT_EQ(iov[0].iov_len, 4u);
  EXPECT_EQ(iov[1].iov_base, b->unchecked_data() + 4);
  EXPECT_EQ(iov[1].iov_len, 6u);
  expect_npy_body(*tree, "w.npy", whole);
  EXPECT_EQ(exported(*tree, "w"), whole);
  EXPECT_EQ(tree->tensors()[0].nbytes(), 40u);
}

TEST_F(Pieces, ZerosRunPieceReadsAsZeros) {
  const std::string whole = values(8);
  auto a = file("a.bin", whole);
  SpecPiece zeros;
  zeros.size = 8;
  zeros.zeros = true;
  auto tree = build({spec("z", DType::UInt8, {16}, {run(a, "a.bin", 4, 8), zeros})});
  expect_reads(*tree, "z", whole + std::string(8, '\0'));
}

TEST_F(Pieces, RowTiledBoxesAreHeldInOrderOfTheirStart) {
  const std::vector<uint64_t> shape = {7, 3};
  const std::string whole = values(7 * 3 * 2);  // int16
  auto f = file("rows.bin", whole.substr(30) + whole.substr(0, 18) + whole.substr(18, 12));
  auto box = [&](uint64_t row, uint64_t rows, uint64_t at) {
    SpecPiece p;
    p.start = {row, 0};
    p.extent = {rows, 3};
    p.size = rows * 6;
    p.bytes = ByteSpan::mapped(f, at, p.size);
    return p;
  };
  // Given out of order: rows 5-6, 0-2, 3-4.
  auto tree = build({spec("t", DType::Int16, shape, {box(5, 2, 4), box(0, 3, 16), box(3, 2, 34)})});
  expect_reads(*tree, "t", whole);
  std::vector<iovec> iov(8);
  std::string scratch;
  ASSERT_EQ(3u, tree->read(node(*tree, "t"), 0, whole.size(), iov, scratch));
  EXPECT_EQ(iov[0].iov_base, f->unchecked_data() + 16);
  EXPECT_EQ(iov[1].iov_base, f->unchecked_data() + 34);
  EXPECT_EQ(iov[2].iov_base, f->unchecked_data() + 4);
  expect_npy_body(*tree, "t.npy", whole);
  EXPECT_EQ(exported(*tree, "t"), whole);
}

TEST_F(Pieces, ColumnSplitBoxesAreGathered) {
  const std::vector<uint64_t> shape = {5, 6};
  const std::string whole = values(5 * 6 * 4);
  const std::string left = cut_box(whole, shape, 4, {0, 0}, {5, 2});
  const std::string right = cut_box(whole, shape, 4, {0, 2}, {5, 4});
  auto f = file("cols.bin", right + left);
  SpecPiece l, r;
  l.start = {0, 0};
  l.extent = {5, 2};
  l.size = left.size();
  l.bytes = ByteSpan::mapped(f, 4 + right.size(), left.size());
  r.start = {0, 2};
  r.extent = {5, 4};
  r.size = right.size();
  r.bytes = ByteSpan::mapped(f, 4, right.size());
  auto tree = build({spec("c", DType::Float32, shape, {r, l})});
  expect_reads(*tree, "c", whole);
  expect_npy_body(*tree, "c.npy", whole);
  EXPECT_EQ(exported(*tree, "c"), whole);
}

TEST_F(Pieces, GridWithEdgeChunksIsClipped) {
  const std::vector<uint64_t> shape = {5, 7, 3};
  const std::string whole = values(5 * 7 * 3 * 4);
  auto tree = build({spec("g", DType::Int32, shape, grid(whole, shape, 4, {2, 3, 2}))});
  expect_reads(*tree, "g", whole);
  expect_npy_body(*tree, "g.npy", whole);
  EXPECT_EQ(exported(*tree, "g"), whole);
}

TEST_F(Pieces, ShuffledDeflatedChunksAndZerosChunks) {
  const std::vector<uint64_t> shape = {5, 7, 3};
  std::string whole = values(5 * 7 * 3 * 4);
  // Chunk 0 (start 0,0,0) is never written: its elements read as zeros.
  for (uint64_t i = 0; i < 2; ++i)
    for (uint64_t j = 0; j < 3; ++j)
      for (uint64_t k = 0; k < 2; ++k) std::memset(whole.data() + ((i * 7 + j) * 3 + k) * 4, 0, 4);
  auto pieces = grid(whole, shape, 4, {2, 3, 2}, {PieceFilter::Shuffle, PieceFilter::Deflate}, {0});
  auto tree = build({spec("h", DType::Float32, shape, pieces)});
  expect_reads(*tree, "h", whole);
  expect_npy_body(*tree, "h.npy", whole);
  EXPECT_EQ(exported(*tree, "h"), whole);
  // The sidecar lists the pieces: where each lies, its box and filters.
  const auto sidecar = nlohmann::json::parse(tree->content(node(*tree, "h.json")));
  ASSERT_EQ(sidecar["pieces"].size(), pieces.size());
  const auto& last = sidecar["pieces"][0];  // the test gave them reversed
  EXPECT_EQ(last["start"], nlohmann::json({4, 6, 2}));
  EXPECT_EQ(last["extent"], nlohmann::json({2, 3, 2}));
  EXPECT_EQ(last["filters"], nlohmann::json({"shuffle", "deflate"}));
  EXPECT_EQ(last["size"], pieces[0].bytes.size());
  EXPECT_EQ(last["offset"], *pieces[0].source.offset);
  EXPECT_EQ(sidecar["pieces"][pieces.size() - 1]["zeros"], true);
}

TEST_F(Pieces, DeflateOnlyChunksOfOneByteElements) {
  const std::vector<uint64_t> shape = {9, 10};
  const std::string whole = values(90);
  auto tree = build({spec("d", DType::UInt8, shape, grid(whole, shape, 1, {4, 4}, {PieceFilter::Deflate}))});
  expect_reads(*tree, "d", whole);
}

TEST_F(Pieces, BFloat16OfPiecesHasAConvertedNpy) {
  const std::vector<uint64_t> shape = {4, 6};
  const std::string whole = values(4 * 6 * 2);
  auto tree = build({spec("b", DType::BFloat16, shape, grid(whole, shape, 2, {3, 4}))});
  expect_reads(*tree, "b", whole);
  std::string floats;
  for (size_t i = 0; i < 24; ++i) floats += std::string(2, '\0') + whole.substr(2 * i, 2);
  expect_npy_body(*tree, "b.npy", floats);
  const Node& npy = node(*tree, "b.npy");
  const std::string all = tree->content(npy);
  for (uint64_t offset = 0; offset < all.size(); ++offset)
    for (const uint64_t length : {uint64_t{1}, uint64_t{5}, uint64_t{29}}) {
      const uint64_t n = std::min(length, all.size() - offset);
      ASSERT_EQ(read(*tree, npy, offset, n), all.substr(offset, n)) << offset;
    }
}

TEST_F(Pieces, Refusals) {
  const std::vector<uint64_t> shape = {4, 4};
  const std::string whole = values(16);
  auto pieces = grid(whole, shape, 1, {2, 2});
  auto with = [&](auto change) {
    auto p = pieces;
    change(p);
    return spec("bad", DType::UInt8, shape, p);
  };
  refuse(with([](auto& p) { p.pop_back(); }), "hole");
  refuse(with([](auto& p) { p.push_back(p.front()); }), "overlaps");
  refuse(with([](auto& p) {
           // The piece at (0, 0) reaching into the next row of chunks.
           p.back().extent = {3, 2};
           p.back().size = 6;
           p.back().bytes = {};
           p.back().zeros = true;
         }),
         "overlaps another");
  refuse(with([](auto& p) { p[0].size = 3; }), "but says 3");
  refuse(with([](auto& p) { p[0].extent = {0, 2}; }), "zero extent");
  refuse(with([](auto& p) { p[0].start = {4, 0}; }), "outside the shape");
  refuse(with([](auto& p) {
           p[0].start.clear();
           p[0].extent.clear();
         }),
         "mixed");
  refuse(with([](auto& p) { p[0].filters = {PieceFilter::Deflate, PieceFilter::Deflate}; }), "twice");
  {
    // Bricks offset from one row to the next: a tiling, but no grid.
    SpecPiece a, b, c, d;
    auto box = [&](SpecPiece& p, std::vector<uint64_t> start, std::vector<uint64_t> extent) {
      p.start = start;
      p.extent = extent;
      p.size = extent[0] * extent[1];
      p.zeros = true;
    };
    box(a, {0, 0}, {1, 3});
    box(b, {0, 3}, {1, 1});
    box(c, {1, 0}, {1, 1});
    box(d, {1, 1}, {1, 3});
    refuse(spec("bad", DType::UInt8, {2, 4}, {a, b, c, d}), "grid");
  }
  {
    // A filtered piece decoded whole may not pass kMaxDecodedPiece.
    SpecPiece big;
    big.start = {0};
    big.extent = {kMaxDecodedPiece / 4 + 1};
    big.size = kMaxDecodedPiece + 4;
    big.bytes = pieces[0].bytes;
    big.filters = {PieceFilter::Deflate};
    refuse(spec("bad", DType::Float32, {kMaxDecodedPiece / 4 + 1}, {big}), "a piece decoded whole");
  }
  {
    auto s = spec("bad", DType::String, {4, 4}, pieces);
    refuse(s, "whole bytes");
    auto strided = spec("bad", DType::UInt8, shape, pieces);
    strided.strides = {1, 4};
    refuse(strided, "C order");
    auto runs = spec("bad", DType::UInt8, {5}, {pieces[0]});
    runs.pieces[0].start.clear();
    runs.pieces[0].extent.clear();
    refuse(runs, "its shape needs 5");
  }
}

TEST_F(Pieces, TruncatedMappingMakesAGatheredReadThrow) {
  const std::vector<uint64_t> shape = {64, 64};
  const std::string whole = values(64 * 64 * 4);
  auto plain = grid(whole, shape, 4, {16, 16});
  auto packed = grid(whole, shape, 4, {16, 16}, {PieceFilter::Deflate});
  auto tree = build({spec("p", DType::Float32, shape, plain), spec("q", DType::Float32, shape, packed)});
  const Node& p = node(*tree, "p");
  const Node& q = node(*tree, "q");
  EXPECT_EQ(read(*tree, p, 0, 4096), whole.substr(0, 4096));
  for (const auto& [name, f] : files_) ASSERT_EQ(0, ::truncate((dir_.path() / name).c_str(), 0));
  EXPECT_THROW(read(*tree, p, 8192, 4096), ModelError);
  EXPECT_THROW(read(*tree, q, 8192, 4096), ModelError);
  EXPECT_THROW(read(*tree, node(*tree, "p.npy"), 0, 4096), ModelError);
}

TEST_F(Pieces, CorruptStreamsFailTheReadNeverShortOrPadded) {
  const std::vector<uint64_t> shape = {8};
  const std::string whole = values(8);
  auto f = file("bad.bin", zlib_compress(whole.substr(0, 4)) + zlib_compress(whole + "xx") + "garbage!");
  const uint64_t short_size = zlib_compress(whole.substr(0, 4)).size();
  const uint64_t long_size = zlib_compress(whole + "xx").size();
  auto piece = [&](uint64_t at, uint64_t size) {
    SpecPiece p;
    p.start = {0};
    p.extent = {8};
    p.size = 8;
    p.bytes = ByteSpan::mapped(f, at, size);
    p.filters = {PieceFilter::Deflate};
    return p;
  };
  const std::vector<uint64_t> square = {6, 6};
  const std::string good = values(36);
  auto tree =
      build({spec("short", DType::UInt8, shape, {piece(4, short_size)}),
             spec("long", DType::UInt8, shape, {piece(4 + short_size, long_size)}),
             spec("junk", DType::UInt8, shape, {piece(4 + short_size + long_size, 8)}),
             spec("good", DType::UInt8, square, grid(good, square, 1, {4, 4}, {PieceFilter::Deflate}))});
  for (const char* name : {"short", "long", "junk"})
    EXPECT_THROW(read(*tree, node(*tree, name), 0, 8), ModelError);
  // A failed read leaves nothing behind for the next one.
  expect_reads(*tree, "good", good);
}

}  // namespace
}  // namespace modelfs

namespace modelfs {
namespace {

// Chunks past what is decoded whole (kDecodedWhole) are read as streams:
// every read equals the array the test cut into chunks, shuffled or not,
// with a checksum or not, across chunk boundaries.
TEST_F(Pieces, ChunksPastWhatIsDecodedWholeAreStreamed) {
  const uint64_t row = kDecodedWhole / 4 + 1000;  // float32 elements of a chunk: one row
  const std::vector<uint64_t> shape = {3, row};
  const std::string whole = values(3 * row * 4);
  auto tree =
      build({spec("s", DType::Float32, shape,
                  grid(whole, shape, 4, {1, row}, {PieceFilter::Shuffle, PieceFilter::Deflate})),
             spec("d", DType::Float32, shape, grid(whole, shape, 4, {1, row}, {PieceFilter::Deflate}))});
  std::mt19937_64 rng(5);
  for (const char* name : {"s", "d"}) {
    const Node& f = node(*tree, name);
    for (int k = 0; k < 40; ++k) {
      const uint64_t at = rng() % (whole.size() - 9000);
      const uint64_t n = 1 + rng() % 9000;
      ASSERT_EQ(read(*tree, f, at, n), whole.substr(at, n)) << name << " at " << at;
    }
    // Across the boundary of two chunks, and the very end.
    const uint64_t boundary = row * 4;
    EXPECT_EQ(read(*tree, f, boundary - 5, 10), whole.substr(boundary - 5, 10)) << name;
    EXPECT_EQ(read(*tree, f, whole.size() - 7, 7), whole.substr(whole.size() - 7)) << name;
  }
}

// Deflate applied before shuffle (the compressed bytes shuffled) cannot be
// read as a stream: the read fails and says why, never serves other bytes.
TEST_F(Pieces, DeflatedThenShuffledChunksFailTheRead) {
  const std::vector<uint64_t> shape = {8, 8};
  const std::string whole = values(8 * 8 * 4);
  auto tree = build({spec("x", DType::Float32, shape,
                          grid(whole, shape, 4, {4, 4}, {PieceFilter::Deflate, PieceFilter::Shuffle}))});
  try {
    read(*tree, node(*tree, "x"), 0, 16);
    ADD_FAILURE() << "read";
  } catch (const ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("shuffle the deflated bytes"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace modelfs
