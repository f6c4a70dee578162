// SPDX-License-Identifier: Apache-2.0
// The ZIP central-directory reader: members, local headers, ZIP64, nested
// archives in stored members, inflation of compressed ones, CRC checks.
#include "fuzz_input.hpp"
#include "io/zip_archive.hpp"
#include "modelfs/error.hpp"

namespace {

void visit(const modelfs::ZipArchive& zip, int depth) {
  for (const auto& member : zip.members()) {
    try {
      (void)zip.contents(member).size();
      if (depth < 2 && member.stored()) visit(zip.nested(member), depth + 1);
    } catch (const modelfs::ModelError&) {
    }
  }
  for (const auto& check : zip.crc_checks()) {
    try {
      check.run([](uint64_t) {});
    } catch (const modelfs::ModelError&) {
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto path = modelfs::fuzz::write_input(data, size, "archive.zip");
  try {
    visit(modelfs::ZipArchive::open(modelfs::MappedFile::open(path), "ZIP archive"), 0);
  } catch (const modelfs::ModelError&) {
  }
  return 0;
}
