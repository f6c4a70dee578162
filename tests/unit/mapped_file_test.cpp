// SPDX-License-Identifier: Apache-2.0
// MappedFile (include/modelfs/mapped_file.hpp): what a model may make
// modelfs open.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <string>

#include "modelfs/error.hpp"
#include "modelfs/mapped_file.hpp"
#include "test_files.hpp"

namespace modelfs {
namespace {

// FIFOs are refused, not opened for reading.
TEST(MappedFile, RefusesAFifoWithoutWaitingForAWriter) {
  test::TempDir dir;
  const auto fifo = dir.path() / "model.safetensors";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  try {
    MappedFile::open(fifo);  // before: blocked in open(2) until a writer came
    FAIL() << "a FIFO was opened";
  } catch (const ModelError& e) {
    EXPECT_EQ(std::string(e.what()), fifo.string() +
                                         ": file: is a FIFO (named pipe), not a regular "
                                         "file; modelfs reads only regular files");
  }
  try {
    MappedFile::open(dir.path());
    FAIL() << "a folder was opened";
  } catch (const ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("is a folder, not a regular file"), std::string::npos);
  }
  // A regular file is still read, and its descriptor is blocking again.
  const auto file = MappedFile::open(dir.write("ok.bin", "abcd"));
  EXPECT_EQ(file->size(), 4u);
  EXPECT_EQ(::fcntl(file->fd(), F_GETFL) & O_NONBLOCK, 0);
}

}  // namespace
}  // namespace modelfs
