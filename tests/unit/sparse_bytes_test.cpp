// SPDX-License-Identifier: Apache-2.0
// A remote model's bytes present by construction. Over a sparse file whose
// holes read as zeros until its fetcher writes them (what a remote model's
// cache file is), each way a reader, a view or the tree's read path takes
// mapped bytes gets the file's bytes, never a hole's zeros, and asks the
// file's own fetcher: the file is not registered for lookup by address.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "io/byte_reader.hpp"
#include "modelfs/catalog.hpp"
#include "modelfs/error.hpp"
#include "modelfs/mapped_file.hpp"
#include "test_files.hpp"
#include "test_parts.hpp"
#include "tree/numeric_views.hpp"
#include "tree/tree_parts.hpp"

namespace modelfs {

// Maps a sparse file with a fetcher of the test's (MappedFile's friend).
struct MappedFileTesting {
  static std::shared_ptr<const MappedFile> sparse(int fd, uint64_t size, std::string name,
                                                  MappedFile::Fetcher* fetcher) {
    std::shared_ptr<MappedFile> file(new MappedFile());
    file->fd_ = fd;
    file->path_ = std::move(name);
    file->size_ = size;
    file->map();
    file->fetcher_ = fetcher;
    return file;
  }
};

namespace {

constexpr uint64_t kFileBytes = 64 << 10;

// The "server": writes the bytes asked for into the sparse file, counting
// what it was asked.
class CountingFetcher final : public MappedFile::Fetcher {
 public:
  CountingFetcher(const std::filesystem::path& path, const std::string& content)
      : fd_(::open(path.c_str(), O_WRONLY | O_CLOEXEC)), content_(content) {}
  ~CountingFetcher() override { ::close(fd_); }
  void make_present(uint64_t offset, uint64_t length) override {
    ++calls;
    const uint64_t end = std::min<uint64_t>(content_.size(), offset + length);
    if (offset >= end) return;
    ASSERT_EQ(static_cast<ssize_t>(end - offset),
              ::pwrite(fd_, content_.data() + offset, end - offset, static_cast<off_t>(offset)));
    fetched += end - offset;
  }
  int calls = 0;
  uint64_t fetched = 0;

 private:
  int fd_;
  const std::string& content_;
};

class SparseFile : public ::testing::Test {
 protected:
  void SetUp() override {
    // No byte is zero, so a hole read as zeros shows.
    content_.resize(kFileBytes);
    for (size_t i = 0; i < content_.size(); ++i)
      content_[i] = static_cast<char>(1 + (i * 13 + i / 251) % 255);
    path_ = dir_.write("model.bin", "");
    ASSERT_EQ(0, ::truncate(path_.c_str(), static_cast<off_t>(kFileBytes)));  // all a hole
    fetcher_ = std::make_unique<CountingFetcher>(path_, content_);
    file_ = MappedFileTesting::sparse(::open(path_.c_str(), O_RDONLY | O_CLOEXEC), kFileBytes, "model.bin",
                                      fetcher_.get());
  }
  static std::string read(std::span<const Part> parts, uint64_t offset, uint64_t length, size_t iovecs) {
    return test::read_parts(parts, offset, length, iovecs);
  }
  static std::vector<Part> laid_out(std::vector<Part> parts) { return test::laid_out(std::move(parts)); }
  ByteSpan span(uint64_t offset, uint64_t length) const { return ByteSpan::mapped(file_, offset, length); }

  test::TempDir dir_;
  std::string content_;
  std::filesystem::path path_;
  std::unique_ptr<CountingFetcher> fetcher_;
  std::shared_ptr<const MappedFile> file_;
};

TEST_F(SparseFile, AHoleReadsAsZerosUntilFetched) {
  // What the tree or a reader would serve, had it read the mapping itself.
  EXPECT_EQ(std::string(4096, '\0'),
            std::string(reinterpret_cast<const char*>(file_->unchecked_data()) + 8192, 4096));
  EXPECT_EQ(0, fetcher_->calls);
}

TEST_F(SparseFile, HeldPartsAreFetchedThroughTheirFile) {
  const auto parts = laid_out({Part::held(span(4096, 8192)), Part::held(span(20000, 3000))});
  // Into the mapping (an iovec each) and copied into the last iovec.
  for (size_t iovecs : {size_t{4}, size_t{1}}) {
    EXPECT_EQ(content_.substr(4096 + 100, 8092) + content_.substr(20000, 1000),
              read(parts, 100, 9092, iovecs))
        << iovecs << " iovecs";
  }
  EXPECT_GT(fetcher_->calls, 0);
  EXPECT_LT(fetcher_->fetched, kFileBytes / 2);  // only what was read
}

TEST_F(SparseFile, ViewsFetchTheStoredBytesTheyConvert) {
  // bfloat16 widened to float32: a value's high half is its stored bits.
  constexpr uint64_t kCount = 1000;
  std::vector<uint64_t> shape{kCount};
  std::vector<int64_t> strides{1};
  auto view = ElementView::make(span(30000, 2 * kCount), shape, strides, plain_conversion(DType::BFloat16));
  ASSERT_TRUE(view);
  const std::string got = read(laid_out({Part{nullptr, view.get(), view->size()}}), 0, view->size(), 2);
  ASSERT_EQ(4 * kCount, got.size());
  for (uint64_t i = 0; i < kCount; ++i) {
    const std::string expected = std::string(2, '\0') + content_.substr(30000 + 2 * i, 2);
    ASSERT_EQ(expected, got.substr(4 * i, 4)) << "value " << i;
  }
  EXPECT_GT(fetcher_->calls, 0);
}

TEST_F(SparseFile, PerChannelParametersAreFetchedWithTheView) {
  // Per channel along axis 1 of a 2x2 quint8: float64 scales and int64
  // zero points, laid in the file where nothing else has read.
  const double scales[2] = {0.5, 0.25};
  const int64_t zeros[2] = {1, 2};
  std::memcpy(content_.data() + 40000, scales, 16);
  std::memcpy(content_.data() + 50000, zeros, 16);
  PerChannelAffine p{span(40000, 16), DType::Float64, span(50000, 16), DType::Int64, false, 2, 1};
  std::vector<uint64_t> shape{2, 2};
  std::vector<int64_t> strides{2, 1};
  const std::string quants = "\x03\x03\x0a";
  auto view = ElementView::make(ByteSpan::owned(quants + std::string(1, '\0')), shape, strides,
                                affine_conversion(DType::UInt8, p));
  ASSERT_TRUE(view);
  const std::string got = read(laid_out({Part{nullptr, view.get(), view->size()}}), 0, 16, 1);
  std::vector<float> values(4);
  std::memcpy(values.data(), got.data(), 16);
  EXPECT_EQ((std::vector<float>{1.0f, 0.25f, 4.5f, -0.5f}), values);
}

TEST_F(SparseFile, ReadersTakeOnlyFetchedBytes) {
  ByteReader reader(*file_, "test");
  reader.seek(1000);
  uint32_t expected = 0;
  std::memcpy(&expected, content_.data() + 1000, 4);
  EXPECT_EQ(expected, reader.u32("a count"));
  EXPECT_EQ(content_.substr(2000, 16), span(2000, 16).view());
  const auto bytes = file_->read(3000, 8);
  EXPECT_EQ(content_.substr(3000, 8), std::string(reinterpret_cast<const char*>(bytes.data()), 8));
  EXPECT_EQ(3, fetcher_->calls);
  EXPECT_THROW(file_->read(kFileBytes - 4, 8), ModelError);  // bounds-checked too
}

}  // namespace
}  // namespace modelfs
