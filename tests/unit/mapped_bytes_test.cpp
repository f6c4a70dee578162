// SPDX-License-Identifier: Apache-2.0
// The mapped-bytes guard (src/io/mapped_bytes.hpp), as the
// program sets it (cli/sigbus_guard.cpp, installed for these tests by
// test_files.cpp): a model file truncated under its mapping makes the read
// path's copies and computed parts throw ModelError, where an unguarded
// read dies of SIGBUS.
#include <gtest/gtest.h>
#include <sys/uio.h>
#include <unistd.h>

#include <bit>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "io/mapped_bytes.hpp"
#include "modelfs/error.hpp"
#include "modelfs/mapped_file.hpp"
#include "modelfs/tree.hpp"
#include "test_files.hpp"
#include "test_parts.hpp"
#include "tree/numeric_views.hpp"
#include "tree/tree_parts.hpp"

namespace modelfs {
namespace {

constexpr size_t kFileBytes = 256 << 10;

// A file of kFileBytes, byte i = i * 7 + i / 251 (mod 256), mapped.
class TruncatedMapping : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string bytes(kFileBytes, '\0');
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>((i * 7 + i / 251) & 0xFF);
    expected_ = bytes;
    path_ = dir_.write("model.bin", bytes);
    file_ = MappedFile::open(path_);
  }
  void truncate_to(uint64_t size) { ASSERT_EQ(0, ::truncate(path_.c_str(), static_cast<off_t>(size))); }
  ByteSpan mapped() const { return ByteSpan::mapped(file_, 0, file_->size()); }
  static std::string read(std::span<const Part> parts, uint64_t offset, uint64_t length, size_t iovecs) {
    return test::read_parts(parts, offset, length, iovecs);
  }
  static std::vector<Part> laid_out(std::vector<Part> parts) { return test::laid_out(std::move(parts)); }

  test::TempDir dir_;
  std::filesystem::path path_;
  std::string expected_;
  std::shared_ptr<const MappedFile> file_;
};

TEST_F(TruncatedMapping, CopyFromTheMappingPastTheCutThrowsAndBeforeItCopies) {
  truncate_to(kFileBytes / 2);
  std::vector<char> out(4096);
  copy_mapped(out.data(), mapped().data() + 4096, out.size());
  EXPECT_EQ(0, std::memcmp(out.data(), expected_.data() + 4096, out.size()));
  EXPECT_THROW(copy_mapped(out.data(), mapped().data() + kFileBytes - 4096, out.size()), ModelError);
  // The guard is left as it was: the next copy works, the next fault throws again.
  copy_mapped(out.data(), mapped().data(), out.size());
  EXPECT_EQ(0, std::memcmp(out.data(), expected_.data(), out.size()));
  EXPECT_THROW(copy_mapped(out.data(), mapped().data() + kFileBytes / 2, 1), ModelError);
}

TEST_F(TruncatedMapping, BFloat16ViewFillThroughTheReadPathThrows) {
  // bfloat16 -> float32: each value is its two stored bytes as the top half.
  static const uint64_t shape[] = {kFileBytes / 2};
  static const int64_t strides[] = {1};
  auto view = ElementView::make(mapped(), shape, strides, plain_conversion(DType::BFloat16));
  ASSERT_TRUE(view);
  const auto parts = laid_out({Part{nullptr, view.get(), view->size()}});
  const std::string before = read(parts, 0, 4096, 4);
  for (size_t i = 0; i < 1024; ++i) {
    uint16_t stored;
    std::memcpy(&stored, expected_.data() + 2 * i, 2);
    const uint32_t bits = uint32_t{stored} << 16;
    ASSERT_EQ(0, std::memcmp(before.data() + 4 * i, &bits, 4)) << i;
  }
  truncate_to(0);
  EXPECT_THROW(read(parts, 0, 4096, 4), ModelError);
  EXPECT_THROW(read(parts, view->size() - 100, 100, 4), ModelError);
}

TEST_F(TruncatedMapping, HalfTruncatedViewServesTheFrontAndThrowsPastTheCut) {
  static const uint64_t shape[] = {kFileBytes / 2};
  static const int64_t strides[] = {1};
  auto view = ElementView::make(mapped(), shape, strides, plain_conversion(DType::BFloat16));
  ASSERT_TRUE(view);
  const auto parts = laid_out({Part{nullptr, view.get(), view->size()}});
  truncate_to(kFileBytes / 2);
  // Values 0 .. kFileBytes / 4 come from the half kept: 4 bytes each.
  EXPECT_EQ(4096u, read(parts, 0, 4096, 4).size());
  EXPECT_THROW(read(parts, view->size() - 4096, 4096, 4), ModelError);
}

TEST_F(TruncatedMapping, TransposedViewGatherThrows) {
  // A 256 x 256 float32 matrix read transposed: every row of the .npy
  // gathers one element of each stored row.
  static const uint64_t shape[] = {256, 256};
  static const int64_t strides[] = {1, 256};
  auto view = ElementView::make(mapped(), shape, strides, copy_conversion(4));
  ASSERT_TRUE(view);
  const auto parts = laid_out({Part{nullptr, view.get(), view->size()}});
  const std::string before = read(parts, 0, 1024, 1);
  for (size_t j = 0; j < 256; ++j)
    ASSERT_EQ(0, std::memcmp(before.data() + 4 * j, expected_.data() + 4 * 256 * j, 4)) << j;
  truncate_to(kFileBytes / 2);
  // Row 0 reaches every stored row, half of which are gone.
  EXPECT_THROW(read(parts, 0, 1024, 1), ModelError);
}

TEST_F(TruncatedMapping, GgmlBlockDequantizationThrows) {
  // q8_0: 34-byte blocks of 32 values; whatever the bytes, they decode.
  const uint64_t blocks = kFileBytes / 34;
  auto view = BlockView::make(mapped(), *ggml_type_named("q8_0"), blocks * 32);
  ASSERT_TRUE(view);
  const auto parts = laid_out({Part{nullptr, view.get(), view->size()}});
  EXPECT_EQ(8192u, read(parts, 0, 8192, 2).size());
  truncate_to(0);
  EXPECT_THROW(read(parts, 0, 8192, 2), ModelError);
}

TEST_F(TruncatedMapping, HeldPartsStayIovecsIntoTheMappingAndTheCopiedRestThrows) {
  // Eight held parts of 4 KiB from the file's second half.
  std::vector<Part> held;
  for (size_t i = 0; i < 8; ++i)
    held.push_back(Part::held(mapped().subspan(kFileBytes / 2 + 4096 * i, 4096)));
  const auto parts = laid_out(held);
  truncate_to(kFileBytes / 2);
  // Iovecs enough: none copied, each points into the mapping; nothing of
  // the mapping is read here (the kernel's copy is what fails).
  std::vector<iovec> iov(8);
  std::string scratch;
  ASSERT_EQ(8u, slice_parts(parts, 0, 8 * 4096, iov, scratch));
  for (size_t i = 0; i < 8; ++i) EXPECT_EQ(static_cast<const void*>(held[i].bytes), iov[i].iov_base);
  // Fewer: the rest is copied from the mapping, and that copy throws.
  EXPECT_THROW(read(parts, 0, 8 * 4096, 2), ModelError);
}

TEST(MappedBytesGuard, AnExceptionFromTheBodyPassesThroughAndGuardsNest) {
  EXPECT_THROW(read_mapped([] { throw std::runtime_error("body"); }), std::runtime_error);
  int ran = 0;
  read_mapped([&] {
    read_mapped([&] { ++ran; });
    ++ran;
  });
  EXPECT_EQ(2, ran);
}

TEST_F(TruncatedMapping, AFaultOutsideAGuardStillKillsTheProcess) {
#if defined(__SANITIZE_ADDRESS__)
  // AddressSanitizer's handler takes the fault and writes a report, which
  // the sanitizer pass counts as a failure: the plain build checks this.
  GTEST_SKIP() << "a fault outside a guard is AddressSanitizer's to report";
#endif
  std::vector<char> out(16);
  copy_mapped(out.data(), mapped().data(), out.size());
  truncate_to(0);
  // The handler passes the fault to the one before it (the default, or a
  // sanitizer's): the process dies as it would without the guard.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        const volatile std::byte* at = mapped().data() + 4096;
        (void)*at;
      },
      "");
}

}  // namespace
}  // namespace modelfs
