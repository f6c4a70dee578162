// SPDX-License-Identifier: Apache-2.0
// The read-ahead window of a remote object (src/remote/read_window.hpp):
// when it starts, how it grows, where it stops, and that a random reader
// gets none.
#include <gtest/gtest.h>

#include <cstdint>

#include "remote/read_window.hpp"

namespace modelfs::remote {
namespace {

constexpr uint64_t KiB = 1024, MiB = 1024 * KiB;
constexpr uint64_t kSize = uint64_t{1} << 30;

// Reads of `step` bytes in order from `from` to `to`; the bytes asked
// ahead in all, and the largest window seen.
struct Pass {
  uint64_t ahead = 0, widest = 0, ahead_end = 0;
};
Pass read_in_order(ReadWindow& w, uint64_t from, uint64_t to, uint64_t step) {
  Pass pass;
  for (uint64_t at = from; at < to; at += step) {
    const auto a = w.on_read(at, at + step, kSize);
    if (!a.empty()) {
      EXPECT_GE(a.from, at + step) << "ahead starts past the read";
      EXPECT_EQ(a.from, pass.ahead_end == 0 ? a.from : pass.ahead_end) << "pieces follow each other";
      pass.ahead += a.to - a.from;
      pass.ahead_end = a.to;
    }
    pass.widest = std::max(pass.widest, w.window());
  }
  return pass;
}

TEST(ReadWindow, FirstReadFetchesNothingAhead) {
  ReadWindow w(1 * MiB, 64 * MiB);
  EXPECT_TRUE(w.on_read(0, 128 * KiB, kSize).empty());
  EXPECT_EQ(w.window(), 0u);
}

TEST(ReadWindow, SecondSequentialReadOpensTheInitialWindow) {
  ReadWindow w(1 * MiB, 64 * MiB);
  w.on_read(0, 128 * KiB, kSize);
  const auto a = w.on_read(128 * KiB, 256 * KiB, kSize);
  EXPECT_EQ(a.from, 256 * KiB);
  EXPECT_EQ(a.to, 256 * KiB + 1 * MiB);
  EXPECT_EQ(w.window(), 1 * MiB);
}

TEST(ReadWindow, GrowsByDoublingWhileTheReaderKeepsUpAndStopsAtTheBound) {
  ReadWindow w(1 * MiB, 16 * MiB);
  const Pass pass = read_in_order(w, 0, 256 * MiB, 128 * KiB);
  EXPECT_EQ(pass.widest, 16 * MiB);
  EXPECT_EQ(w.window(), 16 * MiB);
  // Everything the reader read past its first two reads was asked ahead,
  // and never more than the bound past where it stopped.
  EXPECT_GE(pass.ahead_end, 256 * MiB);
  EXPECT_LE(pass.ahead_end, 256 * MiB + 16 * MiB);
}

TEST(ReadWindow, NeverPastTheObject) {
  ReadWindow w(1 * MiB, 64 * MiB);
  const uint64_t size = 3 * MiB;
  uint64_t end = 0;
  for (uint64_t at = 0; at < size; at += 128 * KiB)
    if (auto a = w.on_read(at, at + 128 * KiB, size); !a.empty()) end = a.to;
  EXPECT_EQ(end, size);
}

TEST(ReadWindow, OutOfOrderReadsOfOneReadaheadStillContinue) {
  ReadWindow w(1 * MiB, 64 * MiB);
  w.on_read(0, 128 * KiB, kSize);
  w.on_read(128 * KiB, 256 * KiB, kSize);  // the window is open, up to 1.25 MiB
  w.on_read(512 * KiB, 640 * KiB, kSize);  // inside what was fetched ahead
  EXPECT_TRUE(w.continues(384 * KiB));     // one before it, arriving late
  w.on_read(384 * KiB, 512 * KiB, kSize);
  EXPECT_EQ(w.window(), 1 * MiB) << "no reset";
  // Just past the frontier is a jump.
  EXPECT_FALSE(w.continues(w.ahead_end() + 1));
}

TEST(ReadWindow, ARandomJumpResetsTheWindow) {
  ReadWindow w(1 * MiB, 64 * MiB);
  read_in_order(w, 0, 64 * MiB, 128 * KiB);
  ASSERT_GT(w.window(), 1 * MiB);
  EXPECT_FALSE(w.continues(512 * MiB));
  EXPECT_TRUE(w.on_read(512 * MiB, 512 * MiB + 4 * KiB, kSize).empty());
  EXPECT_EQ(w.window(), 0u);
  // Backwards is a jump too.
  EXPECT_FALSE(w.continues(0));
}

TEST(ReadWindow, RandomReadsNeverFetchAhead) {
  ReadWindow w(1 * MiB, 64 * MiB);
  uint64_t x = 12345;
  for (int i = 0; i < 10000; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    const uint64_t at = (x >> 20) % (kSize - 4 * KiB) & ~(4 * KiB - 1);
    const auto a = w.on_read(at, at + 4 * KiB, kSize);
    // Two reads landing in one 4 KiB page in a row would be a stream; the
    // generator makes none.
    EXPECT_TRUE(a.empty()) << "read " << i << " at " << at;
  }
}

TEST(ReadWindow, ZeroBoundMeansNoReadAhead) {
  ReadWindow w(1 * MiB, 0);
  EXPECT_EQ(read_in_order(w, 0, 32 * MiB, 128 * KiB).ahead, 0u);
}

TEST(ReadStreams, FollowsTwoReadersOfOneObjectApart) {
  ReadStreams s(1 * MiB, 64 * MiB);
  uint64_t ahead_a = 0, ahead_b = 0;
  for (uint64_t i = 0; i < 64; ++i) {
    const uint64_t a = i * 128 * KiB, b = 512 * MiB + i * 128 * KiB;
    auto x = s.on_read(a, a + 128 * KiB, kSize);
    auto y = s.on_read(b, b + 128 * KiB, kSize);
    ahead_a += x.to - std::min(x.to, x.from);
    ahead_b += y.to - std::min(y.to, y.from);
  }
  EXPECT_GT(ahead_a, 8 * MiB);
  EXPECT_GT(ahead_b, 8 * MiB);
}

}  // namespace
}  // namespace modelfs::remote
