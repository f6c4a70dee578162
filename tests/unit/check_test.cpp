// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include "io/tensor_spec.hpp"
#include "modelfs/check.hpp"
#include "modelfs/error.hpp"
#include "test_files.hpp"

namespace modelfs {
namespace {

TensorSpec mapped_tensor(const std::string& name, std::shared_ptr<const MappedFile> file, uint64_t offset,
                         uint64_t length) {
  TensorSpec t;
  t.name = name;
  t.dtype = DType::UInt8;
  t.shape = {length};
  t.strides = {1};
  t.bytes = ByteSpan::mapped(std::move(file), offset, length);
  return t;
}

TEST(Check, ReadsEveryByteAndReportsProgressToTheEnd) {
  test::TempDir dir;
  auto file = MappedFile::open(dir.write("m.bin", std::string(3 << 20, 'x')));
  Catalog catalog;
  catalog.format = "test";
  catalog.add(mapped_tensor("a", file, 0, 1 << 20));
  catalog.add(mapped_tensor("b", file, 1 << 20, 2 << 20));
  uint64_t last_done = 0, last_total = 0;
  auto summary = check_model(catalog, {}, [&](uint64_t done, uint64_t total) {
    EXPECT_GE(done, last_done);
    last_done = done;
    last_total = total;
  });
  EXPECT_EQ(summary.tensors, 2u);
  EXPECT_EQ(summary.bytes_read, 3u << 20);
  EXPECT_EQ(last_done, last_total);
  EXPECT_EQ(last_total, 3u << 20);
}

TEST(Check, OverlapIsAFaultUnlessTheFormatAllowsSharing) {
  test::TempDir dir;
  auto file = MappedFile::open(dir.write("m.bin", std::string(100, 'x')));
  Catalog catalog;
  catalog.format = "test";
  catalog.add(mapped_tensor("a", file, 0, 60));
  catalog.add(mapped_tensor("b", file, 50, 50));
  try {
    check_model(catalog, {}, nullptr);
    FAIL();
  } catch (const ModelError& e) {
    EXPECT_EQ(e.offset(), 50u);
    EXPECT_NE(e.reason().find("overlaps"), std::string::npos);
  }
  catalog.tensors_may_share_bytes = true;
  EXPECT_EQ(check_model(catalog, {}, nullptr).bytes_read, 110u);
}

TEST(Check, IntegrityChecksRunAndTheirFaultsStopTheCheck) {
  Catalog catalog;
  catalog.format = "test";
  int runs = 0;
  IntegrityChecks checks;
  checks.push_back({"first", 10, [&](const auto& progress) {
                      ++runs;
                      progress(10);
                    }});
  checks.push_back({"second", 5, [&](const auto&) {
                      ++runs;
                      throw ModelError("m.bin", "test", 7, "CRC-32 mismatch");
                    }});
  EXPECT_THROW(check_model(catalog, checks, nullptr), ModelError);
  EXPECT_EQ(runs, 2);
}

TEST(Check, AFileShorterThanItsMappingIsReportedNotCrashed) {
  test::TempDir dir;
  auto path = dir.write("m.bin", std::string(8192, 'x'));
  auto file = MappedFile::open(path);
  Catalog catalog;
  catalog.format = "test";
  catalog.add(mapped_tensor("tail", file, 4096, 4096));
  std::filesystem::resize_file(path, 5000);  // shrunk after opening
  try {
    check_model(catalog, {}, nullptr);
    FAIL();
  } catch (const ModelError& e) {
    EXPECT_NE(e.reason().find("\"tail\" cannot be read"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace modelfs
