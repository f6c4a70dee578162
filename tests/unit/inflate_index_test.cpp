// SPDX-License-Identifier: Apache-2.0
// The deflate seek index (src/tree/inflate_index.hpp): every range read
// back equals the bytes the test compressed itself; once a stream has been
// passed through, a random read inflates at most one span; the points kept
// stay within their bounds; a stream that lies fails, never short.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "io/tensor_spec.hpp"
#include "tree/inflate_index.hpp"
#include "tree/inflate_view.hpp"

namespace modelfs {
namespace {

// Bytes that differ from their neighbours and repeat rarely enough that a
// range read from the wrong place shows, yet compress well.
std::string pattern(uint64_t size) {
  std::string out(size, '\0');
  for (uint64_t i = 0; i < size; ++i) out[i] = static_cast<char>(((i / 4096) * 7 + (i % 4096) / 16) & 0xFF);
  return out;
}

// A deflate stream of `in`: zlib's wrapper, or raw as a ZIP holds it.
std::string deflated(const std::string& in, bool zlib_wrapper) {
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, 6, Z_DEFLATED, zlib_wrapper ? MAX_WBITS : -MAX_WBITS, 8, Z_DEFAULT_STRATEGY),
            Z_OK);
  std::string out(deflateBound(&zs, in.size()), '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

std::string read(const DeflateStream& stream, uint64_t begin, uint64_t end) {
  std::string out(end - begin, '\0');
  uint64_t next = begin;
  ReadScope scope(ReadScope::Kind::Copied);
  inflate_range(
      stream, begin, end,
      [&](uint64_t at, const std::byte* data, uint64_t n) {
        EXPECT_EQ(at, next);  // in order, no gap
        std::memcpy(out.data() + (at - begin), data, n);
        next = at + n;
      },
      scope);
  EXPECT_EQ(next, end);
  return out;
}

TEST(InflateIndex, RandomReadsInflateAtMostOneSpan) {
  const uint64_t size = 12 * kDeflateSpan + 12345;
  const std::string plain = pattern(size);
  const DeflateStream stream{
      new_stream_owner(), 0, ByteSpan::owned(deflated(plain, false)), size, false, true};
  // The first read near the end passes through the whole stream once.
  EXPECT_EQ(read(stream, size - 4096, size), plain.substr(size - 4096));
  EXPECT_GE(deflate_index_counts().fixed, 12u);
  std::mt19937_64 rng(7);
  for (int k = 0; k < 200; ++k) {
    const uint64_t begin = rng() % (size - 1);
    const uint64_t end = begin + 1 + rng() % std::min<uint64_t>(size - begin - 1, 3 * 4096);
    const uint64_t before = deflate_index_counts().inflated;
    ASSERT_EQ(read(stream, begin, end), plain.substr(begin, end - begin)) << begin;
    const uint64_t cost = deflate_index_counts().inflated - before;
    // From the fixed point at or before `begin` (or a later moving one) to
    // `end`, plus the end's check of one byte.
    EXPECT_LE(cost, kDeflateSpan + (end - begin) + 1) << begin;
  }
  const auto counts = deflate_index_counts();
  EXPECT_LE(counts.fixed, kDeflateFixedPoints);
  EXPECT_LE(counts.moving, kDeflateMovingPoints);
  forget_deflate_streams(stream.owner);
}

TEST(InflateIndex, SequentialReadsGoOnWhereTheLastStopped) {
  const uint64_t size = 3 * kDeflateSpan;
  const std::string plain = pattern(size);
  const DeflateStream stream{new_stream_owner(), 0, ByteSpan::owned(deflated(plain, true)), size, true, true};
  const uint64_t before = deflate_index_counts().inflated;
  for (uint64_t at = 0; at < size; at += 5000)
    ASSERT_EQ(read(stream, at, std::min(size, at + 5000)), plain.substr(at, 5000)) << at;
  // Each byte once, and the check of the end.
  EXPECT_LE(deflate_index_counts().inflated - before, size + 1);
  forget_deflate_streams(stream.owner);
}

TEST(InflateIndex, ThreadsShareTheIndex) {
  const uint64_t size = 6 * kDeflateSpan + 99;
  const std::string plain = pattern(size);
  const DeflateStream stream{new_stream_owner(), 3, ByteSpan::owned(deflated(plain, true)), size, true, true};
  std::vector<std::thread> threads;
  std::vector<int> wrong(8, 0);
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      for (int k = 0; k < 30; ++k) {
        const uint64_t begin = rng() % (size - 4096);
        if (read(stream, begin, begin + 4096) != plain.substr(begin, 4096)) ++wrong[t];
      }
    });
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(wrong, std::vector<int>(8, 0));
  forget_deflate_streams(stream.owner);
}

TEST(InflateIndex, PointsStayWithinTheirBounds) {
  // More streams than the index holds points for, each read at its end.
  const uint64_t size = 2 * kDeflateSpan + 1;
  const std::string plain = pattern(size);
  const ByteSpan bytes = ByteSpan::owned(deflated(plain, false));
  const uint64_t owner = new_stream_owner();
  for (uint64_t part = 0; part < kDeflateFixedPoints / 2 + kDeflateMovingPoints + 8; ++part) {
    const DeflateStream stream{owner, part, bytes, size, false, true};
    ASSERT_EQ(read(stream, size - 10, size - 1), plain.substr(size - 10, 9));
    const auto counts = deflate_index_counts();
    ASSERT_LE(counts.fixed, kDeflateFixedPoints);
    ASSERT_LE(counts.moving, kDeflateMovingPoints);
  }
  forget_deflate_streams(owner);
}

TEST(InflateIndex, AStreamThatLiesFails) {
  const std::string plain = pattern(kDeflateSpan + 500);
  const std::string stream_bytes = deflated(plain, true);
  auto stream = [&](std::string bytes, uint64_t size) {
    return DeflateStream{new_stream_owner(), 0, ByteSpan::owned(std::move(bytes)), size, true, true};
  };
  // Declared longer than it is: ends early.
  EXPECT_THROW(read(stream(stream_bytes, plain.size() + 1), 0, plain.size() + 1), DeflateError);
  // Declared shorter: makes more at its end.
  EXPECT_THROW(read(stream(stream_bytes, plain.size() - 1), 10, plain.size() - 1), DeflateError);
  // Cut short: no final block.
  EXPECT_THROW(read(stream(stream_bytes.substr(0, stream_bytes.size() / 2), plain.size()), 0, plain.size()),
               DeflateError);
  // A damaged byte: corrupt, or its Adler-32 fails at the end.
  std::string damaged = stream_bytes;
  damaged[damaged.size() / 2] = static_cast<char>(damaged[damaged.size() / 2] ^ 0x55);
  EXPECT_THROW(read(stream(damaged, plain.size()), 0, plain.size()), DeflateError);
}

// Tensors that are ranges of one stream (a gzip .nemo's) share its points:
// once a read of one has passed through, a read at the end of another
// inflates one span, not the stream from its start.
TEST(InflateIndex, ViewsOfOneStreamShareItsPoints) {
  const uint64_t size = 3 * kDeflateSpan, split = 5 * kDeflateSpan / 2;
  const std::string in = pattern(size);
  const ByteSpan stream = ByteSpan::owned(deflated(in, false));
  Catalog catalog;
  for (const auto& [at, length] : {std::pair{uint64_t{0}, split}, std::pair{split, size - split}}) {
    TensorSpec t;
    t.name = "t" + std::to_string(at);
    t.dtype = DType::UInt8;
    t.shape = {length};
    t.strides = {1};
    t.bytes = stream;
    t.encoded = Encoded{Encoded::Method::Deflate, at, length, size, 0};
    catalog.add(t);
  }
  const InflateView first(catalog.tensors()[0], "m", "test"), second(catalog.tensors()[1], "m", "test");
  std::string out(1 << 20, '\0');
  ReadScope scope(ReadScope::Kind::Copied);
  // The first tensor read through: points at each span it passes.
  for (uint64_t at = 0; at < split; at += out.size())
    first.read(at, std::as_writable_bytes(std::span(out)), scope);
  // The second's first read starts from the point at 2 spans, not from 0.
  const uint64_t before = deflate_index_counts().inflated;
  second.read(0, std::as_writable_bytes(std::span(out)), scope);
  EXPECT_LE(deflate_index_counts().inflated - before, kDeflateSpan);
  EXPECT_EQ(out, in.substr(split, out.size()));
}

}  // namespace
}  // namespace modelfs
