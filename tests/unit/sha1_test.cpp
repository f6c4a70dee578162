// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include <string>

#include "io/sha1.hpp"

namespace modelfs {
namespace {

std::string sha1_of(const std::string& text, size_t piece = 0) {
  Sha1 sha;
  const auto bytes = std::as_bytes(std::span(text.data(), text.size()));
  if (piece == 0) {
    sha.update(bytes);
  } else {
    for (size_t at = 0; at < bytes.size(); at += piece)
      sha.update(bytes.subspan(at, std::min(piece, bytes.size() - at)));
  }
  return sha.hex_digest();
}

TEST(Sha1, StandardTestVectors) {
  EXPECT_EQ(sha1_of(""), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
  EXPECT_EQ(sha1_of("abc"), "a9993e364706816aba3e25717850c26c9cd0d89d");
  EXPECT_EQ(sha1_of("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "84983e441c3bd26ebaae4aa1f95129e5e54670f1");
  EXPECT_EQ(sha1_of(std::string(1000000, 'a')), "34aa973cd4c4daa4f61eeb2bdbad27316534016f");
}

TEST(Sha1, PiecesOfAnySizeGiveTheSameDigest) {
  const std::string text(1000, 'x');
  const auto whole = sha1_of(text);
  for (size_t piece : {1, 7, 63, 64, 65, 999}) EXPECT_EQ(sha1_of(text, piece), whole) << piece;
}

}  // namespace
}  // namespace modelfs
